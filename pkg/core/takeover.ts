// Takeover: the first decision for an object with no (readable) KV state. That is a declaration made a moment
// ago, one FlexInfer's controller ran until this project replaced it, or one whose `flexinfer-backfills` /
// `flexinfer-claims` entries were lost (purged bucket, disaster recovery). Whichever it is, Kubernetes still says
// what happened: the object's status (written by the FlexInfer reference controller or by us) and the Jobs it owns. Pure, like decide.
//
// What is carried over (same generation, i.e. status.observedGeneration = metadata.generation, or unset):
//   a live Job the backfill owns (status.jobName, else its newest active Job) → adopted: Starting/Running with its
//     node, startedAt and idleSince; its claims are taken again so demand's cancel still finds it;
//   a finished one-shot (Succeeded) or a Failed declaration → stays so (no rerun), nextRunTime kept with repeatAfter;
//   otherwise waiting, with the first window starting at the last known foreground activity (see firstWindowStart);
//   an attempt the status names whose Job is gone → a fresh full window (as after any ended attempt).
// Counters come from KV and cannot be rebuilt from Kubernetes: starts is floored at status.attempts, success /
// failed at 1 for a Succeeded / Failed status; the rest start at 0 (Prometheus reads the drop as a counter reset).
import { type ModelBackfill, type ModelBackfillStatus, type Phase, REASONS } from './api.js'
import { jobName as nameJob } from './names.js'
import { soundRun } from './run.js'
import { type BackfillState, emptyCounters } from './state.js'
import { isActiveJob, type JobView, type ModelView } from './world.js'

/** What takeover reads: the object, its model, the Job status.jobName names and its other active Jobs. */
export interface TakeoverInput {
  backfill: ModelBackfill
  model: ModelView | null
  idleLastForegroundAt?: string
  lastRequestAt?: string
  /** The Job named by status.jobName, when the backfill controls it. */
  job: JobView | null
  /** The backfill's other active Jobs (it controls them). */
  strays: JobView[]
  repeatAfterMs: number
}

export interface Takeover {
  state: BackfillState
  /** The live Job taken over (its claims are to be taken again), if any. */
  adopted?: JobView
  /** What was carried over, for an Event; undefined when there was nothing to carry (a new declaration). */
  summary?: string
}

const ACTIVE: Phase[] = ['Starting', 'Running', 'Cancelling']
const iso = (ms: number) => new Date(ms).toISOString()
const validTime = (t: unknown): string | undefined =>
  typeof t === 'string' && !Number.isNaN(Date.parse(t)) ? new Date(Date.parse(t)).toISOString() : undefined
const ms = (t: string | undefined) => (t ? Date.parse(t) : Number.NaN)

/**
 * Start of a new declaration's first idle window: the last known foreground activity on its model (the idle KV
 * entry, the newest stored request, Model.status.lastActiveTime, a status.idleSince left by the FlexInfer reference controller), so a
 * declaration on a model idle for an hour is admissible at once. Only when nothing is known: now (a full window).
 */
export function firstWindowStart(times: (string | undefined)[], now: number): number {
  let known = Number.NEGATIVE_INFINITY
  for (const t of times) {
    const v = ms(t)
    if (!Number.isNaN(v)) known = Math.max(known, v)
  }
  return Number.isFinite(known) ? known : now
}

/** The attempt number in one of this backfill's Job names (contract naming), or 0. */
function attemptOf(backfill: string, job: string): number {
  const m = /-(\d+)-[0-9a-f]{8}$/.exec(job)
  const n = m ? Number(m[1]) : 0
  return n > 0 && nameJob(backfill, n) === job ? n : 0
}

export function takeover(i: TakeoverInput, now: number): Takeover {
  const b = i.backfill
  const st: ModelBackfillStatus = b.status && typeof b.status === 'object' ? b.status : {}
  const generation = b.metadata.generation ?? 1
  const observed = typeof st.observedGeneration === 'number' ? st.observedGeneration : generation
  const statusPhase = st.phase && (REASONS as Record<string, readonly string[]>)[st.phase] ? st.phase : undefined
  const jobs = [i.job, ...i.strays].filter((j): j is JobView => j !== null)
  const attempts = Math.max(
    Number.isInteger(st.attempts) && (st.attempts as number) > 0 ? (st.attempts as number) : 0,
    ...jobs.map((j) => attemptOf(b.metadata.name, j.name)),
  )
  const s: BackfillState = {
    namespace: b.metadata.namespace,
    name: b.metadata.name,
    uid: b.metadata.uid,
    model: b.spec.modelRef,
    generation,
    phase: 'WaitingForIdle',
    reason: 'IdleWindow',
    message: 'waiting for the first idle window',
    attempts,
    windowStart: iso(now),
    counters: { ...emptyCounters(), starts: attempts },
    updatedAt: iso(now),
  }
  // The run the status names goes on (its Jobs carry its identity), unless it had ended or the spec changed since.
  const run = soundRun(st.runId, st.runAttempt)
  if (run) {
    s.runId = run.runId
    s.runAttempt = run.runAttempt
    if (statusPhase === 'Succeeded' || statusPhase === 'Failed' || observed !== generation) s.runEnded = true
  }
  const known = !!statusPhase || jobs.length > 0
  if (known) s.takenOver = iso(now)

  // A live attempt: the Job named by the status, else the newest active one the backfill owns.
  const named = i.job && !i.job.deleting ? i.job : null
  const live =
    named && isActiveJob(named)
      ? named
      : [...i.strays]
          .filter(isActiveJob)
          .sort((a, b) => ms(b.createdAt) - ms(a.createdAt) || (a.name < b.name ? 1 : -1))[0]
  const sameJob = (j: JobView) => j.name === st.jobName
  if (live || (named?.outcome && statusPhase && ACTIVE.includes(statusPhase))) {
    const job = (live ?? named) as JobView
    s.generation = sameJob(job) ? observed : generation
    s.phase = job.started ? 'Running' : 'Starting'
    s.reason = job.started ? 'JobRunning' : 'JobCreated'
    s.jobName = job.name
    s.nodeName = job.node ?? (typeof st.nodeName === 'string' ? st.nodeName : undefined) ?? i.model?.node
    s.startedAt = (sameJob(job) && validTime(st.startedAt)) || job.createdAt || iso(now)
    s.idleSince = (sameJob(job) && validTime(st.idleSince)) || s.startedAt
    s.runningSince = s.startedAt
    s.message = `took over Job ${job.name}`
    return {
      state: s,
      adopted: live ?? undefined,
      summary: `adopted Job ${job.name} (status phase ${statusPhase ?? 'none'})`,
    }
  }
  if ((statusPhase === 'Succeeded' || statusPhase === 'Failed') && observed === generation) {
    s.phase = statusPhase
    s.completionTime = validTime(st.completionTime)
    s.startedAt = validTime(st.startedAt)
    s.idleSince = validTime(st.idleSince)
    s.nodeName = st.nodeName
    if (named?.outcome) s.jobName = named.name
    else if (st.jobName) s.finishedJobName = st.jobName
    if (statusPhase === 'Failed') {
      s.counters.failed = 1
      s.reason = 'JobFailed'
      s.message = st.message ?? 'the last attempt failed; change the spec to retry'
    } else {
      s.counters.success = 1
      if (i.repeatAfterMs > 0) {
        s.nextRunTime = validTime(st.nextRunTime) ?? iso((ms(s.completionTime) || now) + i.repeatAfterMs)
        s.reason = 'RepeatScheduled'
      } else s.reason = 'JobComplete'
      s.message = st.message ?? 'completed'
    }
    return { state: s, summary: `kept ${statusPhase} from the status` }
  }
  if (statusPhase && ACTIVE.includes(statusPhase)) {
    // The attempt the status names has ended unseen (its Job is gone): the next one needs a fresh full window.
    return {
      state: s,
      summary: `the attempt of the status (${st.jobName ?? 'no Job'}) is gone; starting a fresh window`,
    }
  }
  s.windowStart = iso(
    firstWindowStart([i.idleLastForegroundAt, i.lastRequestAt, i.model?.lastActiveTime, validTime(st.idleSince)], now),
  )
  return { state: s, summary: known ? `status phase ${statusPhase}; waiting for the idle window` : undefined }
}
