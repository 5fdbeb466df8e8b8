// What a decision reads and what it answers: the world a function observed (Observed), what woke it (Trigger), and
// the decision (Decision): the next state and status, the actions the functions apply, and the report of every
// check decide() evaluated, in the order `kubectl mbf explain` lists them (CHECKS).
import type { CancelReason, ModelBackfill, ModelBackfillStatus, ResolvedSpec } from './api.js'
import type { GpuViolation } from './job.js'
import type { WorkloadProgress } from './progress.js'
import type { BackfillState, ModelIdleState } from './state.js'
import type { GamingSessionView, GPULeaseView, JobView, ModelView } from './world.js'

export interface Contender {
  namespace: string
  backfill?: string
  jobName: string
  on: 'model' | 'node'
}

export type TemplateObservation =
  | { found: false }
  /** gate: why the background gate this backfill asks for cannot be built (pkg/core/job.ts gateProblem). */
  | { found: true; gpu: GpuViolation[]; gate?: string }

export interface Observed {
  /** null: the ModelBackfill no longer exists. */
  backfill: ModelBackfill | null
  state: BackfillState | null
  /** null: the Model does not exist. */
  model: ModelView | null
  idle: ModelIdleState | null
  /** When NATS stored the model's newest request on its per-model subject (read without demand). */
  lastRequestAt?: string
  /**
   * Set by admission's fence when a Job must not be created now: nothing would cancel it in time (no demand or
   * cancel instance running) or demand has requests it has not processed yet.
   */
  preemptionPath?: { ready: false; why: string }
  gamingSessions: GamingSessionView[]
  leases: GPULeaseView[]
  template: TemplateObservation
  /** The Job named by state.jobName, or null when it does not exist. */
  job: JobView | null
  /** Other active backfill attempts on the same model or node (foreign Jobs and live claims). */
  contenders: Contender[]
  /**
   * This backfill's own active Jobs other than the current attempt's: left by an admission that lost a race
   * with a cancel (the Job was created after the attempt had already ended). They are deleted on sight.
   */
  strays?: JobView[]
}

export type Trigger =
  | { type: 'resource' }
  | { type: 'timer' }
  | { type: 'admit' }
  /**
   * A cancel request (the cancel function has already deleted the Job), with the time of the winning signal.
   * `deletedUid`: the Job whose DELETE the caller had accepted — the decision records the cancel without ordering
   * that DELETE again (a Job of another UID under the name is still deleted).
   */
  | { type: 'cancel'; reason: CancelReason; at: string; deletedUid?: string }
  /**
   * The apiserver refused to create the attempt's Job for good (403: quota or webhook; 400/422: invalid). Retrying
   * at once would not help; holding the attempt would wedge its model and node (the claims never go stale).
   */
  | { type: 'jobRejected'; jobName: string; message: string }
  /**
   * This admission's own read before its POST saw a foreground request stored since its fence: it created no Job.
   * Only this try may take back its Starting attempt for that request at once (another try's POST may be in flight).
   */
  | { type: 'raced'; jobName: string }
  /**
   * An ended attempt's report of its run, its container's termination message (pkg/core/progress.ts); `preempted`:
   * its Job did not complete. Counted once per Job, whenever it comes.
   */
  | { type: 'progress'; jobName: string; progress: WorkloadProgress; preempted: boolean }

export type DeleteWhy = CancelReason | 'Deleted' | 'Cleanup' | 'RepeatCleanup'

export type Action =
  | { type: 'addFinalizer' }
  | { type: 'removeFinalizer' }
  | { type: 'createJob'; jobName: string; attempt: number; node: string; spec: ResolvedSpec }
  | { type: 'deleteJob'; jobName: string; why: DeleteWhy }
  /** Takes the model and node claims for a Job adopted by a takeover (so demand's cancel finds it). */
  | { type: 'takeClaims'; jobName: string; attempt: number; node: string }
  | { type: 'armTimer'; at: string }
  | { type: 'cancelTimer' }
  | { type: 'releaseClaims'; jobName: string }
  | { type: 'deleteState' }
  | {
      type: 'recordEvent'
      eventType: 'Normal' | 'Warning'
      reason: string
      message: string
      /**
       * The Job whose start this Event tells (BackfillStarted): it belongs to that attempt even when a raced admission
       * deletes the Job at once and the rest of the decision is not applied.
       */
      startedJob?: string
    }

export interface Decision {
  /** The next state; null when the state should be deleted. */
  state: BackfillState | null
  /** The status to show, or null when the object is gone. */
  status: ModelBackfillStatus | null
  actions: Action[]
  /** Every check of CHECKS, in that order, as this decision evaluated it. */
  checks: readonly CheckReport[]
}

/**
 * The checks decide() evaluates, in the order a report lists them (admission's order; an attempt in flight is checked
 * against the ones that can cancel it, pkg/core/checks.ts CANCEL_CHECKS). `kubectl mbf explain` shows exactly these,
 * by these names (the operator's word for them is "gates").
 */
export const CHECKS = [
  'generation',
  'spec',
  'suspend',
  'previous run',
  'model',
  'template',
  'gpu request',
  'background gate',
  'model ready',
  'node',
  'idle window',
  'gaming',
  'gpu lease',
  'claims',
  'preemption path',
  'rejected recheck',
] as const
export type CheckName = (typeof CHECKS)[number]

/**
 * pass; wait / blocked: the check holds the backfill (its phase is WaitingForIdle or Succeeded / Blocked, Suspended
 * or Failed); cancels: it ends the attempt in flight; not-reached: not evaluated, because an earlier check decided,
 * the check does not apply (admission's checks while an attempt runs), or what it needs is missing (no Model, no
 * valid spec).
 */
export type CheckVerdict = 'pass' | 'wait' | 'blocked' | 'cancels' | 'not-reached'

export interface CheckReport {
  check: CheckName
  verdict: CheckVerdict
  /** For a check that holds or cancels: decide's own message for it (the status message it sets). */
  evidence: string
  /** idle window: when the window decide measured began (epoch ms). */
  since?: number
  /** When the check passes by itself, epoch ms: the idle window's end, the session's or lease's expiry, when known. */
  until?: number
}
