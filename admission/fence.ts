// The admission fence: what admit checks, after taking its claims and before creating a Job, so that admission
// never trusts demand's progress. A Job is created only when
//   - nothing will leave it running: a demand instance pulls foreground requests and a cancel instance pulls
//     cancel requests (the server's count of waiting pull requests: a killed process has none, a paused one
//     none once its pulls expire), and
//   - no foreground request it cannot see is waiting: the model's newest request on its per-model subject is read
//     straight from the stream (with the server's store time), and every request on the documented subject that
//     the stream held when the check began has been acknowledged by demand, which acks only once its idle-state
//     write is stored. The caller reads the idle state after this returns.
// Requests stored after the check are demand's: it writes idleness and then reads the claims, which were taken
// before this check, so it cancels whatever this admission creates (see functions/demand).
import type { JetStreamManager } from '@nats-io/jetstream'
import { foregroundSubject, STREAM_EVENTS, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST } from '../events/catalog.js'
import { isNotFound, lastBySubject } from '../jetstream/bus.js'
import { consumerName, instanceName } from '../jetstream/names.js'
import type { Deps } from '../transport/function.js'
import type { FenceResult } from './ports.js'

/** How long admission waits for demand to work through the documented subject's backlog before it re-checks. */
export const FENCE_WAIT_MS = 2_000
const POLL_MS = 25

export type { FenceResult } from './ports.js'

/**
 * The time NATS stored the model's newest request on its per-model subject, or null when there is none. A
 * STREAM.MSG.GET on purpose, never a direct get: on a JetStream cluster any replica answers a direct get, and a
 * follower that has not applied the newest request would hide it; the stream leader answers this one and has
 * every request that got a PubAck (nats/CLUSTER.md; test/integration/cluster/linearizable-reads.test.ts).
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

export async function checkFence(deps: Deps): Promise<FenceResult> {
  const jsm = deps.bus.jsm
  const names = consumers(deps)
  const [stream, demandForeground, demandLast, cancel] = await Promise.all([
    jsm.streams.info(STREAM_FOREGROUND),
    consumerInfo(jsm, STREAM_FOREGROUND, names.demandForeground),
    consumerInfo(jsm, STREAM_FOREGROUND_LAST, names.demandLast),
    consumerInfo(jsm, STREAM_EVENTS, names.cancel),
  ])
  // What demand has acknowledged is in the idle state read after this: the reads around the POST look at the
  // documented subject only past it (all of it when there is no demand consumer at all).
  const floor = demandForeground?.ack_floor.stream_seq ?? 0
  if (!demandForeground?.num_waiting || !demandLast?.num_waiting) {
    return { ready: false, why: 'no demand instance is pulling foreground requests', cursor: floor }
  }
  if (!cancel?.num_waiting) return { ready: false, why: 'no cancel instance is pulling cancel requests', cursor: floor }
  const target = stream.state.last_seq
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
