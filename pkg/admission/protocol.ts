// The admission protocol: what stands between a decision to create an attempt's Job and the Job itself, so that
// foreground always wins even against an admission in flight.
//
//   1. Take the model and node claims (pkg/admission/claims.ts). Demand writes idleness before it looks for claims, and
//      admission looks at the requests after taking its claims (Dekker): a request racing the admission is seen by
//      one side or the other.
//   2. The fence (RequestLog.fence), issued together with the claims: demand and cancel consuming, demand caught up
//      with the foreground subject up to the fence's cursor.
//   3. Decide again on what the claims and the fence found (a contender, a preemption path not ready). Not admitted:
//      the claims this admission took (by their claimedAt and tryId, never another try's) are given back. Admitted:
//      the idle state is read again (after the fence: it holds every request demand acknowledged), in flight while the
//      caller checks its watched copies and writes the state; its answer is awaited only before the POST.
//   4. (The caller commits the Starting state by compare-and-set, a retry's unchanged one too: the POST stands on
//      the newest state.) The newest request (after the claims: Dekker) as the very last step before the POST — sent
//      together with that state write, and sent again if it is older than PRE_POST_READ_FRESH_MS when the POST goes —
//      and once more right after it: a request stored while the POST was in flight makes the admission delete the
//      Job it has just created (by its UID) rather than leave it to demand → cancel — and so does that read failing
//      or coming late (the real one has a deadline, POST_READ_DEADLINE_MS), since then no request can be ruled out.
//      A request in the idle state read or in the read before the POST newer than the window the state was admitted
//      on: no POST, and the attempt is taken back (the caller decides again with it).
//
// The newest-request reads see every request stored before them, whichever subject it came on: the per-model
// subject's newest, and the foreground subject's requests past the fence's cursor (RequestLog.newest).
import type { V1Job } from '@kubernetes/client-node'
import { decide, racedAdmission } from '../core/decide.js'
import type { Decision, Observed, Trigger } from '../core/decision.js'
import type { BackfillState, Claim } from '../core/state.js'
import { parseEntry, parseModelIdleState } from '../core/state.js'
import { JobRejectedError } from '../kube/errors.js'
import type { StepTimings } from '../observability/step-timings.js'
import { type ClaimKeys, type ClaimReads, claimKeys, newClaim, releaseClaimKeys, takeClaimKeys } from './claims.js'
import type { AdmissionPorts, Cursor, DeleteResult } from './ports.js'

/**
 * How long each newest-request read around the POST may take (the NATS one: pkg/admission/nats-ports.ts). A request
 * stored just after the read before the POST is caught by the read after it, so that read's answer bounds how long a
 * raced Job can run: a request stored, the POST, this deadline, the DELETE — within the second the chaos oracle
 * allows a raced admission even when the POST itself was late. Such a read normally answers in a few milliseconds.
 */
export const POST_READ_DEADLINE_MS = 300

/**
 * How long before the POST the newest-request read in front of it may have been sent. It is sent together with the
 * state write (one round trip fewer on every admission); when that write, or an action between it and the POST, took
 * longer, the read is sent again. A request stored after the read was sent is seen by the read after the POST (the
 * Job is then deleted at once), so this bounds how late a Job may be created after a request it could have seen:
 * well inside the 100 ms the simulation's and the chaos oracle's invariant allows.
 */
export const PRE_POST_READ_FRESH_MS = 25

type IdleEntry = Awaited<ReturnType<AdmissionPorts['requests']['idle']>>

/** The newest-request read sent ahead of the POST (with the state write): when it was sent, and its answer. */
export interface EarlyRead {
  sentAt: number
  answer: Promise<{ at: string | null; cursor?: Cursor }>
  /** The idle state read after the fence (Admitted.idle). */
  idle?: Promise<IdleEntry>
}

/**
 * Sends the read in front of the POST now, alongside the caller's state write; `idle` is the admission's idle-state
 * read after the fence, already in flight.
 */
export function readBeforePost(
  ports: AdmissionPorts,
  namespace: string,
  model: string,
  cursor?: Cursor,
  idle?: Promise<IdleEntry>,
): EarlyRead {
  // Timed before it goes: a request stored from then on may be one it does not see.
  const sentAt = ports.clock.now()
  const answer = ports.requests.newest(namespace, model, cursor)
  // Awaited only if the state write commits; a failure is read again before the POST.
  answer.catch(() => {})
  return { sentAt, answer, idle }
}

/** Claims an admission holds for the Job it is about to create. */
export interface Held {
  keys: ClaimKeys
  claim: Claim
  /** The claims of another try of this Job that this one replaced, put back if it gives up. */
  replaced?: Record<string, string>
}

/** A decision after the admission's checks, with what it holds for its Job. */
export interface Admitted {
  decision: Decision
  /** The claims taken, when the decision still creates the Job (give them back if it is not committed). */
  held?: Held
  /** When the fence answered: the start of the gap the POST must close quickly. */
  fencedAt?: number
  /** Up to where the foreground subject is in the idle state read after the fence: the reads around the POST look
   * past it. */
  cursor?: Cursor
  /** The idle state read after the fence, awaited before the POST (post()): sent, not yet answered. */
  idle?: Promise<IdleEntry>
}

/**
 * Steps 1–3 for a decision that creates a Job; any other decision is returned as it is. `observed` is updated with
 * what the checks read (a contender, the preemption path).
 */
export async function runAdmission(
  ports: AdmissionPorts,
  observed: Observed,
  trigger: Trigger,
  decision: Decision,
  timings?: StepTimings,
  /** The claims read ahead with the first reads (pkg/admission/claims.ts), used when they are this Job's keys. */
  claimReads?: ClaimReads,
): Promise<Admitted> {
  const create = decision.actions.find((a) => a.type === 'createJob')
  const b = observed.backfill
  if (create?.type !== 'createJob' || !b) return { decision }
  const namespace = b.metadata.namespace
  const model = b.spec.modelRef
  const claim = newClaim(
    {
      namespace,
      backfill: b.metadata.name,
      attempt: create.attempt,
      jobName: create.jobName,
      idleSince: decision.state?.idleSince,
    },
    ports.clock.now(),
  )
  // The fence alongside the claims, not after them: what it proves is about requests up to its cursor only (demand
  // acknowledged them, so the idle state read after both holds them); every request past the cursor is read after
  // the claims (the per-model newest below, the foreground subject's around the POST). Dekker holds on those reads.
  const fencing = ports.requests.fence()
  // Awaited only when the claims are taken: a contended admission drops it.
  fencing.catch(() => {})
  const claimed = await takeClaimKeys(ports, claimKeys(namespace, model, create.node), claim, claimReads)
  timings?.mark('claims')
  let fencedAt: number | undefined
  let cursor: Cursor | undefined
  let idle: Promise<IdleEntry> | undefined
  if (claimed.contender) {
    observed.contenders.push(claimed.contender)
  } else {
    const fence = await fencing
    timings?.mark('fence')
    fencedAt = ports.clock.now()
    cursor = fence.cursor
    if (!fence.ready) observed.preemptionPath = { ready: false, why: fence.why }
    // After the fence: it holds everything demand acknowledged up to the cursor. Not awaited here — nothing before
    // the POST depends on it (no round trip of its own on the admission's path); post() awaits it, and a request in
    // it newer than the window keeps the POST from going. Read whatever the fence said: a retry of a Starting
    // attempt creates its Job with demand behind too (decide() re-checks only what cancels it), and the reads
    // around the POST look past the cursor alone.
    idle = ports.requests.idle(namespace, model)
    idle.catch(() => {})
  }
  const again = decide(observed, trigger, ports.clock.now())
  timings?.mark('decide')
  const stillCreates = again.actions.some((a) => a.type === 'createJob')
  if (!claimed.keys || !claimed.claim) return { decision: again }
  const held: Held = { keys: claimed.keys, claim: claimed.claim, replaced: claimed.replaced }
  if (!stillCreates) {
    await giveBack(ports, held)
    return { decision: again }
  }
  return { decision: again, held, fencedAt, cursor, idle }
}

/** Gives back the claims an admission took and did not commit (the watched copy proved behind, a failure). */
export function giveBack(ports: AdmissionPorts, held: Held | undefined) {
  return held ? releaseClaimKeys(ports, held.keys, held.claim, held.replaced) : Promise.resolve()
}

/** What became of the POST (step 4). */
export type PostOutcome =
  /** A request stored since the fence: no POST. */
  | { kind: 'racedBefore'; lastRequestAt: string }
  | { kind: 'rejected'; message: string }
  /** The name is held by a predecessor's Job, now being deleted: retry once it is gone. */
  | { kind: 'predecessor' }
  | { kind: 'created'; result: 'created' | 'exists'; uid?: string; postAt: number; postMs: number }
  /** The read after the POST failed: the Job just created was deleted (by UID), as if a request had raced it. */
  | {
      kind: 'unobserved'
      why: string
      deleted: DeleteResult
      /** The UID of the Job created and then deleted. */
      uid?: string
      result: 'created' | 'exists'
      postAt: number
      postMs: number
    }
  /** A request stored while the POST was in flight: the Job just created was deleted (by UID). */
  | {
      kind: 'racedAfter'
      lastRequestAt: string
      deleted: DeleteResult
      /** The UID of the Job created and then deleted. */
      uid?: string
      result: 'created' | 'exists'
      postAt: number
      postMs: number
    }

/** Step 4: the POST of `job` for the committed Starting `state`, between two reads of the newest request. */
export async function post(
  ports: AdmissionPorts,
  job: V1Job,
  state: BackfillState | null,
  where: { namespace: string; model: string; jobName: string; cursor?: Cursor },
  timings?: StepTimings,
  /** The read in front of the POST, sent with the state write (readBeforePost). */
  early?: EarlyRead,
): Promise<PostOutcome> {
  const { namespace, model, jobName } = where
  // The very last step before the POST: what stood between the fence and here (the state write, a finalizer,
  // cleanups; slow under load) is no gap for a request. The read sent with the state write stands in for it while
  // it is fresh; a failed or stale one is sent again.
  const ahead = early ? await early.answer.catch(() => undefined) : undefined
  // The idle state read after the fence: what demand acknowledged up to the cursor (the read below looks past it).
  const idle = early?.idle ? await early.idle.catch(() => ports.requests.idle(namespace, model)) : undefined
  const acknowledged = idle === undefined ? undefined : readIdle(ports, idle)?.lastForegroundAt
  const before =
    ahead && early && ports.clock.now() - early.sentAt <= PRE_POST_READ_FRESH_MS
      ? ahead
      : await ports.requests.newest(namespace, model, where.cursor)
  timings?.mark('prePostRead')
  if (racedAdmission(state, acknowledged)) return { kind: 'racedBefore', lastRequestAt: acknowledged as string }
  if (racedAdmission(state, before.at)) return { kind: 'racedBefore', lastRequestAt: before.at as string }
  const postAt = ports.clock.now()
  let created: Awaited<ReturnType<AdmissionPorts['jobs']['create']>>
  try {
    created = await ports.jobs.create(job)
  } catch (err) {
    // Refused for good: decided again with the refusal, which releases the claims and blocks.
    if (err instanceof JobRejectedError) return { kind: 'rejected', message: err.message }
    throw err
  }
  timings?.mark('post')
  const postMs = ports.clock.now() - postAt
  const { result, uid } = created
  if (result === 'predecessor') return { kind: 'predecessor' }
  // And once more after it: a request stored while the POST was in flight is one no read before it could see.
  let after: Awaited<ReturnType<AdmissionPorts['requests']['newest']>>
  try {
    after = await ports.requests.newest(namespace, model, before.cursor ?? where.cursor)
  } catch (err) {
    // No answer (NATS failing, or slower than the read's deadline): nothing proves that no request came while the
    // POST was in flight, and demand, which would cancel it, may be as slow. Foreground wins when it cannot be
    // observed: the Job just created goes at once, before its container does any work.
    const deleted = await ports.jobs.delete(namespace, jobName, uid)
    const why = err instanceof Error ? err.message : String(err)
    return { kind: 'unobserved', why, deleted, uid, result, postAt, postMs }
  }
  timings?.mark('afterPostRead')
  if (racedAdmission(state, after.at)) {
    const deleted = await ports.jobs.delete(namespace, jobName, uid)
    return { kind: 'racedAfter', lastRequestAt: after.at as string, deleted, uid, result, postAt, postMs }
  }
  return { kind: 'created', result, uid, postAt, postMs }
}

function readIdle(ports: AdmissionPorts, entry: IdleEntry) {
  if (entry?.operation !== 'PUT') return null
  const r = parseEntry(entry.text, parseModelIdleState)
  if (r.ok) return r.value
  ports.log.error(
    { revision: entry.revision, error: r.error },
    'unreadable KV value ignored; its object is taken over from Kubernetes',
  )
  return null
}
