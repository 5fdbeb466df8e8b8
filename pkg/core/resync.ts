// Which backfills a resync sweep re-decides. Pure: the sweep (functions/lifecycle/resync.ts) lists the world once
// — ModelBackfills, their states, backfill Jobs, Models, stored timer schedules — and asks, per backfill, whether
// its stored state can still be right. Convergence then never depends on any single event being delivered: a
// timer dead-lettered during an outage, a lost gaming/lease/model/job event or a lost status write is caught by
// the next sweep. Only what may be wrong is re-decided, so a sweep over 10,000 settled backfills publishes nothing.
import type { ModelBackfill } from './api.js'
import type { BackfillState } from './state.js'
import { FIRED_EARLY_WITHIN_MS } from './timer-tick.js'
import type { JobView, ModelView } from './world.js'

/** Default period of the resync schedule (env RESYNC_MS). */
export const RESYNC_MS = 30_000
/**
 * A timer this far past its due time, still recorded, fired without being handled (decide() drops a timer it
 * handled and did not re-arm). Twenty scheduler ticks: a busy admit may take that long to get to a fired timer,
 * and re-deciding one it is about to handle costs only a duplicate, idempotent reconcile.
 */
export const TIMER_GRACE_MS = 5_000
/** A schedule fires early and is then removed: only a timer further out must be stored (pkg/core/timer-tick.ts). */
export const TIMER_STORED_AFTER_MS = FIRED_EARLY_WITHIN_MS

export const RESYNC_REASONS = [
  /** The finalizer holds a deleted object: its Job, timer and claims must go and the finalizer with them. */
  'DeletionUnseen',
  /** A ModelBackfill without a state: its first event was lost (or is in flight). */
  'NoState',
  /** An attempt whose Job is gone, finished or being deleted: its job.completed was lost. */
  'AttemptJobGone',
  /** Any other active attempt: re-decided on every sweep so a lost gaming/lease/model event still cancels it. */
  'ActiveAttempt',
  /** The spec changed and no decision has seen it. */
  'GenerationUnseen',
  /** The timer fired and its handling was lost (dead-lettered, say, during an apiserver outage). */
  'TimerLost',
  /** A future timer whose schedule is not stored: nothing would wake the backfill. */
  'TimerNotStored',
  /** Waiting for its Model (no timer) while the Model says otherwise: a model event was lost. */
  'ModelChanged',
  /** status shows another phase or reason than the state: a status write was lost. */
  'StatusStale',
] as const
export type ResyncReason = (typeof RESYNC_REASONS)[number]

export interface ResyncInput {
  backfill: Pick<ModelBackfill, 'metadata' | 'status'>
  state: BackfillState | null
  /** The Job named by state.jobName as the sweep's list shows it; null when the list does not have it. */
  job: JobView | null
  /** The backfill's Model as listed; null when it does not exist. */
  model: Pick<ModelView, 'ready' | 'node'> | null
  /** Whether the backfill's timer schedule is stored in FLEXINFER_TIMERS. */
  timerStored: boolean
}

const ACTIVE = new Set(['Starting', 'Running', 'Cancelling'])

/** Why this backfill must be re-decided now, or null when its stored state is consistent with what was listed. */
export function needsResync(i: ResyncInput, now: number): ResyncReason | null {
  const { backfill: b, state: s } = i
  if (b.metadata.deletionTimestamp) return 'DeletionUnseen'
  if (!s) return 'NoState'
  // An attempt in flight keeps the generation it was admitted for until it ends (a spec change cancels it first).
  if (s.jobName && ACTIVE.has(s.phase)) {
    const job = i.job
    return !job || job.deleting || job.outcome ? 'AttemptJobGone' : 'ActiveAttempt'
  }
  if ((b.metadata.generation ?? 1) !== s.generation) return 'GenerationUnseen'
  const timerAt = s.timerAt ? Date.parse(s.timerAt) : Number.NaN
  if (timerAt <= now - TIMER_GRACE_MS) return 'TimerLost'
  if (timerAt > now + TIMER_STORED_AFTER_MS && !i.timerStored) return 'TimerNotStored'
  if (waitsForModel(s, i.model)) return 'ModelChanged'
  if (b.status?.phase !== s.phase || b.status?.reason !== s.reason) return 'StatusStale'
  return null
}

/** The phases decide() leaves without a timer, to be woken by a model event, and whether that event is overdue. */
function waitsForModel(s: BackfillState, model: ResyncInput['model']): boolean {
  if (s.phase === 'Blocked' && s.reason === 'ModelNotFound') return model !== null
  if (s.phase !== 'WaitingForIdle') return false
  if (s.reason === 'ModelNotReady') return model?.ready !== false
  if (s.reason === 'NodeUnresolved') return !model?.ready || Boolean(model.node)
  return false
}
