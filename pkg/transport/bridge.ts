// The JetStream → Knative Broker bridge (`FUNCTION=bridge`, knative overlay). Under Knative source, admit and
// lifecycle are served over HTTP from the Broker, but the events they take (backfill.admit, the catalog events
// source translates) and the timers JetStream's message schedules fire land in FLEXINFER_EVENTS /
// FLEXINFER_TIMERS. The bridge is an ordinary EventFunction on its own durable pull consumers (the JetStream
// adapter's loop, acks and dead-lettering) whose handler POSTs each event to the Broker (`K_SINK`, injected by a
// SinkBinding) as a structured-mode CloudEvent. The outcome maps onto the adapter's vocabulary:
//
//   2xx                                   handled: acked
//   5xx, 404, 408, 409, 429, network/timeout  transient: nak with backoff, redelivered (dead-lettered after MAX_DELIVER)
//   401 with a sink token                 transient: the token file is re-read at once (rotated), then retried
//   any other 4xx                         PermanentError: dead-lettered with the status and the sink's answer
//
// (the retryable 4xx are the ones Knative's own dispatcher retries). What is not forwarded, and why: below.
// With the Broker's sender identity on (`authentication-oidc`), each POST carries `Authorization: Bearer` with an
// audience-bound projected ServiceAccount token (BRIDGE_SINK_TOKEN_FILE, pkg/transport/auth/sink-token.ts).
import Fastify from 'fastify'
import { catalog, STREAM_EVENTS, STREAM_TIMERS } from '../../events/catalog.js'
import type { InboundEvent } from '../../events/codec.js'
import { registerBrokerDeadLetter } from '../jetstream/broker-deadletter.js'
import { SinkToken } from './auth/sink-token.js'
import { deleteInstanceConsumers, openDeps, type ProcessOptions, scoped } from './deps.js'
import type { Deps } from './function.js'
import { type EventFunction, PermanentError } from './function.js'
import { type RunningFunction, runOnJetStream } from './jetstream-adapter.js'

/**
 * The preemption path pulls from JetStream itself, in the knative overlay too (warm Knative Services, min-scale 1,
 * TRANSPORT=jetstream): the Broker is never between a foreground request and the Job's DELETE, and the gateway's
 * firehose never goes through it.
 */
export const PULLING_FUNCTIONS: readonly string[] = ['demand', 'cancel']
/**
 * What the bridge forwards from FLEXINFER_EVENTS: the catalog events a Broker-served function (admit, lifecycle)
 * consumes. Not forwarded: foreground requests and cancel requests (pulled directly, above) and the raw Kubernetes
 * events `flexinfer.events.k8s.>` (the local watcher's stand-in: under Knative the ApiServerSources post to the
 * Broker themselves). A catalog type added for admit or lifecycle is forwarded without a change here.
 */
export const BRIDGE_EVENT_SUBJECTS = Object.values(catalog)
  .filter(
    (e) => !('subjectIsPrefix' in e) && !('stream' in e) && e.consumers.some((fn) => !PULLING_FUNCTIONS.includes(fn)),
  )
  .map((e) => e.subject)
/** Fired timers and resync sweeps (the schedules themselves, flexinfer.schedules.>, stay in the stream). */
export const BRIDGE_TIMER_SUBJECTS = ['flexinfer.events.timer.>', 'flexinfer.events.resync.>']

const MIME_CE = 'application/cloudevents+json'
/** See BridgeOptions.timeoutMs. */
export const BRIDGE_POST_TIMEOUT_MS = 60_000
/** Besides 5xx: what Knative's dispatcher retries too (not found yet, timeout, conflict, throttled). */
const RETRYABLE_4XX = new Set([404, 408, 409, 429])

export interface BridgeOptions {
  /** Where events go: the Broker's address (K_SINK). */
  sink: string
  /** POSTs in flight at once (default 64). */
  concurrency?: number
  /**
   * Per POST. Default 60 s: a Broker whose channel does not acknowledge on store (the InMemoryChannel) answers only
   * after its fan-out, subscriber and retries included, and drops the delivery when the sender hangs up; a shorter
   * deadline abandoned slow deliveries, re-sent them onto the same loaded path and dead-lettered them after
   * MAX_DELIVER (test/integration/knative/bridge-slow-broker.test.ts). The adapter's keep-alive holds the message
   * past the consumer's ack wait meanwhile.
   */
  timeoutMs?: number
  /** Forward only events about these namespaces (others are acknowledged and skipped); default: all. */
  namespaces?: string[]
  /** Durable consumers `bridge-<instance>` from new messages on (tests; see RunnerOptions.instance). */
  instance?: string
  /**
   * The bearer token each POST presents (the Broker's sender identity): `current()` per request, `reload()` after a
   * 401. startBridge makes it from `tokenFile`.
   */
  token?: { current(): string; reload(): Promise<void> }
}

/**
 * The event as a structured-mode CloudEvent: the attributes every producer here sets, its extension attributes
 * (traceparent/tracestate: the trace goes on through the Broker, unchanged as the tracing extension asks of
 * intermediaries), the data as validated.
 */
export function toStructured(event: InboundEvent): string {
  return JSON.stringify({
    ...event.extensions,
    specversion: '1.0',
    id: event.id,
    source: event.source,
    type: event.type,
    time: event.time,
    ...(event.subject === undefined ? {} : { subject: event.subject }),
    datacontenttype: 'application/json',
    data: event.data,
  })
}

/**
 * A repeating schedule fires the very message it stores, so every resync sweep would carry the same CloudEvent id
 * and time; a Broker that de-duplicates by id would drop all but the first. Each firing is its own occurrence.
 */
function asOccurrence(event: InboundEvent): InboundEvent {
  if (event.type !== 'ai.flexinfer.resync.due') return event
  const now = new Date()
  return { ...event, id: `${event.id}.${now.getTime()}`, time: now.toISOString() }
}

export function createBridge(opts: BridgeOptions): EventFunction {
  const sink = new URL(opts.sink).toString()
  const timeoutMs = opts.timeoutMs ?? BRIDGE_POST_TIMEOUT_MS
  const bridge: EventFunction = {
    name: 'bridge',
    subscriptions: [
      { stream: STREAM_EVENTS, subjects: BRIDGE_EVENT_SUBJECTS },
      { stream: STREAM_TIMERS, subjects: BRIDGE_TIMER_SUBJECTS },
    ],
    concurrency: opts.concurrency ?? 64,
    async handle(event) {
      let res: Response
      try {
        const headers: Record<string, string> = { 'content-type': MIME_CE }
        if (opts.token) headers.authorization = `Bearer ${opts.token.current()}`
        res = await fetch(sink, {
          method: 'POST',
          headers,
          body: toStructured(asOccurrence(event)),
          signal: AbortSignal.timeout(timeoutMs),
        })
      } catch (err) {
        throw new Error(`sink ${sink} unreachable: ${(err as Error)?.message ?? String(err)}`)
      }
      const answer = (await res.text().catch(() => '')).slice(0, 512)
      if (res.ok) return
      const reason = `sink answered ${res.status}${answer ? `: ${answer}` : ''}`
      if (res.status === 401 && opts.token) {
        // The token may have rotated (or expired) under us: read the file again and retry, never dead-letter.
        await opts.token.reload()
        throw new Error(`${reason} (sink token re-read; retried)`)
      }
      if (res.status >= 400 && res.status < 500 && !RETRYABLE_4XX.has(res.status)) throw new PermanentError(reason)
      throw new Error(reason)
    },
  }
  return scoped(bridge, opts.namespaces, opts.instance)
}

export interface BridgeProcessOptions extends BridgeOptions, ProcessOptions {
  /**
   * A projected ServiceAccount token bound to the Broker's audience (env BRIDGE_SINK_TOKEN_FILE), sent as a bearer
   * token and re-read when the kubelet rotates it. Required when the Broker's `authentication-oidc` is enabled.
   */
  tokenFile?: string
  /** How often the token file is checked for a rotation (default 5 s). */
  tokenPollMs?: number
  /** Port for /healthz, /readyz and the Broker's dead-letter sink POST /deadletter; undefined: no HTTP server. 0: any free port. */
  httpPort?: number
  httpHost?: string
}

export interface RunningBridge {
  running: RunningFunction
  deps: Deps
  httpUrl?: string
  /** Stops pulling, lets in-flight POSTs finish (and ack), then closes (an instance's consumers are removed). */
  stop(): Promise<void>
}

/** A bridge process: its own NATS connection, the bridge on JetStream, and health endpoints for the probes. */
export async function startBridge(opts: BridgeProcessOptions): Promise<RunningBridge> {
  // Read before anything pulls: without its token the bridge could only dead-letter or retry every event.
  const token = opts.tokenFile
    ? await SinkToken.open(opts.tokenFile, { pollMs: opts.tokenPollMs, log: opts.logger })
    : undefined
  const fn = createBridge({ ...opts, token: opts.token ?? token })
  // The bridge never calls Kubernetes (its ServiceAccount has no RBAC); Deps just carries a client.
  const deps = await openDeps({ ...opts, name: `model-backfill:${fn.name}` }).catch((err) => {
    token?.close()
    throw err
  })
  const { bus, log } = deps
  const running = await runOnJetStream(deps, fn)
  let ready = true
  const app = Fastify({ logger: false })
  let httpUrl: string | undefined
  if (opts.httpPort !== undefined) {
    app.get('/healthz', async () => ({ ok: true }))
    app.get('/readyz', async (_req, reply) => {
      const ok = ready && !bus.nc.isClosed()
      reply.code(ok ? 200 : 503)
      return { ok, ...running.stats }
    })
    registerBrokerDeadLetter(app, bus, log)
    httpUrl = await app.listen({ port: opts.httpPort, host: opts.httpHost ?? '127.0.0.1' })
  }
  log.info(
    { function: fn.name, sink: new URL(opts.sink).origin, httpUrl, sinkToken: Boolean(opts.token ?? token) },
    'bridging JetStream to the sink',
  )
  return {
    running,
    deps,
    httpUrl,
    async stop() {
      ready = false
      await running.stop()
      if (opts.instance) await deleteInstanceConsumers(bus, [fn.name])
      await app.close()
      token?.close()
      await deps.close()
    },
  }
}
