// The admission fence: what admit checks, after taking its claims and before creating a Job, so that admission
// never trusts demand's progress. A Job is created only when
//   - nothing will leave it running: a demand instance pulls foreground requests and a cancel instance pulls
//     cancel requests (the server's count of waiting pull requests: a killed process has none, a paused one
//     none once its pulls expire), and the gateway ingress, where one is watched, can publish (pkg/admission/ingress.ts),
//     and
//   - no foreground request it cannot see is waiting: the model's newest request on its per-model subject is read
//     straight from the stream (with the server's store time), and every request on the foreground subject that
//     the stream held when the check began has been acknowledged by demand, which acks only once its idle-state
//     write is stored. The caller reads the idle state after this returns.
// Requests stored after the check are demand's: it writes idleness and then reads the claims, which were taken
// before this check, so it cancels whatever this admission creates (see functions/demand).
import type { JetStreamManager } from '@nats-io/jetstream'
import { foregroundSubject, STREAM_EVENTS, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST } from '../../events/catalog.js'
import { isNotFound } from '../jetstream/errors.js'
import { consumerName, instanceName } from '../jetstream/names.js'
import { lastBySubject } from '../jetstream/streams.js'
import type { Deps } from '../transport/function.js'
import { probeIngress } from './ingress.js'
import type { FenceResult } from './ports.js'

/** How long admission waits for demand to work through the foreground subject's backlog before it re-checks. */
export const FENCE_WAIT_MS = 2_000
const POLL_MS = 25

export type { FenceResult } from './ports.js'

/**
 * The time NATS stored the model's newest request on its per-model subject, or null when there is none. A
 * STREAM.MSG.GET on purpose, never a direct get: on a JetStream cluster any replica answers a direct get, and a
 * follower that has not applied the newest request would hide it; the stream leader answers this one and has
 * every request that got a PubAck (deploy/nats/CLUSTER.md; test/integration/cluster/linearizable-reads.test.ts).
 */
export async function lastRequestAt(jsm: JetStreamManager, namespace: string, model: string): Promise<string | null> {
  const msg = await lastBySubject(jsm, STREAM_FOREGROUND_LAST, foregroundSubject(namespace, model))
  return msg ? msg.time.toISOString() : null
}

/** The durable consumer names of this system's demand and cancel (tests run several systems on one server); the
 * fail-safe probes the same ones (functions/cancel/fail-safe.ts). */
export function consumers(deps: Deps) {
  const fn = (name: string) => instanceName(name, deps.instance)
  return {
    demandForeground: consumerName(fn('demand'), STREAM_FOREGROUND),
    demandLast: consumerName(fn('demand'), STREAM_FOREGROUND_LAST),
    cancel: consumerName(fn('cancel'), STREAM_EVENTS),
  }
}

export async function consumerInfo(jsm: JetStreamManager, stream: string, name: string) {
  try {
    return await jsm.consumers.info(stream, name)
  } catch (err) {
    if (isNotFound(err)) return null
    throw err
  }
}

/**
 * How long a consumer seen without a waiting pull is given to send its next one before it counts as not pulling. A
 * live consumer has none for a moment whenever a pull ends: the server answers the expired pull, and the client sends
 * the next one when its event loop gets to it — a round trip plus that loop's lag under load. A stopped or paused
 * consumer stays without one. Read once more, only on such a miss: what "pulling" proves moves by this much at most
 * (a waiting pull already says only "pulled within PULL_EXPIRES_MS").
 */
export const PULL_RENEWAL_MS = 300

/** consumerInfo, read once more after PULL_RENEWAL_MS when the consumer exists and has no waiting pull. */
export async function pullingInfo(jsm: JetStreamManager, stream: string, name: string) {
  const info = await consumerInfo(jsm, stream, name)
  if (!info || info.num_waiting > 0) return info
  await new Promise((r) => setTimeout(r, PULL_RENEWAL_MS))
  return consumerInfo(jsm, stream, name)
}

/**
 * How long a positive liveness answer for demand's per-model consumer and cancel's consumer stands, shared by every
 * admission of the process (one read per interval, not two per admission: a burst of windows ending together
 * otherwise queues hundreds of consumer infos on the server's JetStream API). What the fence proves moves by this
 * much at most: the server counts a pull as waiting until it expires (pkg/transport/jetstream-adapter.ts
 * PULL_EXPIRES_MS, 4 s), so waiting pulls already say only "pulled within the last 4 s"; an answer reused for this
 * long says "within 4.5 s". A negative answer is never reused (it is read again at the next admission). Demand's
 * foreground-subject consumer is read on every admission (its acknowledgement floor), and its liveness with it.
 */
export const LIVENESS_MS = 500

interface Liveness {
  /** When the read began (performance.now()). */
  at: number
  read: Promise<string | null>
}

const MAX_SYSTEMS = 64

/** Per bus (one per process) and system (consumer names): bounded by the systems a process serves (tests: a few). */
const liveness = new WeakMap<object, Map<string, Liveness>>()

/** Why demand's per-model consumer or cancel's consumer is not pulling, or null when both are. */
function pullingElsewhere(jsm: JetStreamManager, bus: object, names: ReturnType<typeof consumers>) {
  let bySystem = liveness.get(bus)
  if (!bySystem) {
    bySystem = new Map()
    liveness.set(bus, bySystem)
  }
  const key = `${names.demandLast} ${names.cancel}`
  const cached = bySystem.get(key)
  if (cached && performance.now() - cached.at < LIVENESS_MS) return cached.read
  // Bounded: a process serves one system (tests a few); past that, old answers are simply dropped.
  if (bySystem.size >= MAX_SYSTEMS) bySystem.clear()
  const entry: Liveness = {
    at: performance.now(),
    read: Promise.all([
      pullingInfo(jsm, STREAM_FOREGROUND_LAST, names.demandLast),
      pullingInfo(jsm, STREAM_EVENTS, names.cancel),
    ]).then(([demandLast, cancel]) => {
      const why = !demandLast?.num_waiting
        ? 'no demand instance is pulling foreground requests'
        : !cancel?.num_waiting
          ? 'no cancel instance is pulling cancel requests'
          : null
      // Only "both pulling" is reused: a consumer that comes back is seen by the next admission.
      if (why !== null && bySystem.get(key) === entry) bySystem.delete(key)
      return why
    }),
  }
  entry.read.catch(() => {
    if (bySystem.get(key) === entry) bySystem.delete(key)
  })
  bySystem.set(key, entry)
  return entry.read
}

/**
 * Round trips, in the common case (demand caught up, liveness answered within LIVENESS_MS): one, the consumer info of
 * demand's foreground-subject consumer. It is needed on every admission: its acknowledgement floor is what the idle
 * state read after the fence is known to hold, and its waiting pulls say demand is consuming that subject now.
 * When that consumer has nothing pending or unacknowledged, demand has acknowledged every request the stream held when
 * the server answered, and its floor is where the stream ended (the stream holds the foreground subject only): no
 * stream info is needed for the target. Only a demand behind costs the stream info and the polling below.
 */
export async function checkFence(deps: Deps): Promise<FenceResult> {
  const jsm = deps.bus.jsm
  const names = consumers(deps)
  // INGRESS_READY_URL (deployed: http://model-backfill-ingress/readyz); unset: no ingress is watched.
  const ingressUrl = deps.settings?.ingressReadyUrl
  const [demandForeground, elsewhere, ingress] = await Promise.all([
    pullingInfo(jsm, STREAM_FOREGROUND, names.demandForeground),
    pullingElsewhere(jsm, deps.bus, names),
    ingressUrl ? probeIngress(ingressUrl) : undefined,
  ])
  // What demand has acknowledged is in the idle state read after this: the reads around the POST look at the
  // foreground subject only past it (all of it when there is no demand consumer at all).
  const floor = demandForeground?.ack_floor.stream_seq ?? 0
  if (!demandForeground?.num_waiting) {
    return { ready: false, why: 'no demand instance is pulling foreground requests', cursor: floor }
  }
  if (elsewhere !== null) return { ready: false, why: elsewhere, cursor: floor }
  if (ingress && !ingress.visible) return { ready: false, why: ingress.why, cursor: floor }
  if (demandForeground.num_pending + demandForeground.num_ack_pending === 0) return { ready: true, cursor: floor }
  const target = (await jsm.streams.info(STREAM_FOREGROUND)).state.last_seq
  const deadline = Date.now() + FENCE_WAIT_MS
  for (let info = demandForeground; ; ) {
    if (info.ack_floor.stream_seq >= target || info.num_pending + info.num_ack_pending === 0) {
      return { ready: true, cursor: target }
    }
    if (Date.now() >= deadline) {
      const behind = target - info.ack_floor.stream_seq
      return {
        ready: false,
        why: `demand has not yet processed ${behind} foreground requests`,
        cursor: info.ack_floor.stream_seq,
      }
    }
    await new Promise((r) => setTimeout(r, POLL_MS))
    const next = await consumerInfo(jsm, STREAM_FOREGROUND, names.demandForeground)
    if (!next) return { ready: false, why: 'no demand instance is pulling foreground requests', cursor: 0 }
    info = next
  }
}
