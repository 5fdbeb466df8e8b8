// ingress: for gateways that can only POST CloudEvents over HTTP. Served by the HTTP adapter with a bearer token
// (INGRESS_TOKEN, or INGRESS_TOKEN_FILE naming a mounted Secret); takes `ai.flexinfer.foreground.request` only
// (binary, structured or a batch), validated by the catalog, and publishes each to its per-model subject as
// structured JSON (events/README.md), answering 202 once JetStream has stored it. Not in functions/registry.ts: it
// consumes nothing from JetStream (a runner consuming foreground requests would re-publish them forever).
//
// An ingress that cannot publish makes foreground demand invisible to the preemption path although cancel may see
// NATS fine (a partition between the ingress and NATS, its NATS user's permissions, its stream without a leader). So
// it says so where the preemption path sees it without NATS: its /readyz answers 503 with the reason (the kubelet
// takes it out of its Service; admit's fence and cancel's fail-safe ask the Service, pkg/admission/ingress.ts), a
// gateway's POST is answered 503 at once (it retries), and flexinfer_model_backfill_ingress_publishing is 0.
// It finds out by publishing, once a second, what the stream refuses without storing: a foreground request on a
// probe subject expecting a stream that does not exist. The stream's own refusal (expected stream does not match)
// proves every hop of a real publish — the connection, the user's publish permission, the stream's leader —
// and nothing is stored, so demand never sees it.
import { JetStreamApiError } from '@nats-io/jetstream'
import { catalog, foregroundSubject } from '../../events/catalog.js'
import { encode } from '../../events/codec.js'
import { describeError } from '../../pkg/observability/log.js'
import { ingressPublishing } from '../../pkg/observability/ops-metrics.js'
import { type EventFunction, PermanentError } from '../../pkg/transport/function.js'

export const INGRESS_TYPES = ['ai.flexinfer.foreground.request'] as const

/** How often the ingress checks that it reaches its stream. */
export const PROBE_EVERY_MS = 1_000
/** A probe not refused by the stream within this is a failed one (cancel's own probe has the same deadline). */
const PROBE_DEADLINE_MS = 1_000
/** No stream has this name: the stream refuses the probe without storing it. */
const PROBE_EXPECTED_STREAM = 'ingress-publish-probe'
/** JetStream's error code for "expected stream does not match". */
const EXPECTED_STREAM_MISMATCH = 10060
/** The probe's subject: a per-model foreground subject no namespace can have (Kubernetes names never hold `_`). */
const PROBE_SUBJECT = foregroundSubject('_probe', '_ingress')

export function ingressFunction(): EventFunction {
  // Why this instance cannot publish now (undefined: it can), as its latest probe found.
  let cannot: string | undefined
  let timer: NodeJS.Timeout | undefined
  let running: Promise<void> = Promise.resolve()
  let stopped = false
  return {
    name: 'ingress',
    subscriptions: [],
    concurrency: 256,
    async start(deps) {
      stopped = false
      const body = encode('ai.flexinfer.foreground.request', { namespace: '_probe', model: '_ingress' })
      const probe = async () => {
        const before = cannot
        try {
          await deps.bus.js.publish(PROBE_SUBJECT, body, {
            expect: { streamName: PROBE_EXPECTED_STREAM },
            timeout: PROBE_DEADLINE_MS,
          })
          // Stored after all: the stream did not check the expectation. Publishing works.
          cannot = undefined
        } catch (err) {
          cannot =
            err instanceof JetStreamApiError && err.code === EXPECTED_STREAM_MISMATCH
              ? undefined
              : `cannot publish foreground requests (${describeError(err)})`
        }
        ingressPublishing.set(cannot ? 0 : 1)
        if (cannot && !before) deps.log.error({ why: cannot }, 'ingress: cannot publish foreground requests')
        if (!cannot && before) deps.log.warn('ingress: publishing foreground requests again')
      }
      const loop = () => {
        if (stopped) return
        const started = Date.now()
        running = probe().finally(() => {
          if (!stopped) timer = setTimeout(loop, Math.max(0, PROBE_EVERY_MS - (Date.now() - started)))
        })
      }
      await probe()
      timer = setTimeout(loop, PROBE_EVERY_MS)
    },
    async stop() {
      stopped = true
      clearTimeout(timer)
      await running
      ingressPublishing.set(1) // nothing left to publish
    },
    notReady() {
      return cannot
    },
    async handle(event, deps) {
      if (event.type !== 'ai.flexinfer.foreground.request') throw new PermanentError(`ingress takes ${INGRESS_TYPES}`)
      // The event id (per source) de-duplicates a gateway's retry within the stream's duplicate window.
      // A relay: the gateway's trace context (traceparent/tracestate) goes on unchanged.
      const { id, source, time, extensions } = event
      // Known unable: refused at once (503, the gateway retries) rather than after the publish's own timeout. The
      // probe notices the way back within a second.
      if (cannot) throw new Error(`the ingress ${cannot}`)
      await deps.bus.publish(event.type, event.data, { id, source, time, extensions, msgID: `ingress:${source}:${id}` })
    },
  }
}

export const INGRESS_SUBJECT = catalog['ai.flexinfer.foreground.request'].subject
