// The fail-safe: foreground always wins, so background does not run while foreground demand cannot be observed.
// Its decisions, pure: when it engages and lets go (failSafe), what it cancels (blindTargets), the status it writes
// through Kubernetes before each DELETE (blindStatus), and how decide reads that status back (cancelledByFailSafe).
// The probes and the DELETEs are functions/cancel/fail-safe.ts.
import type { CancelReason, ModelBackfill, ModelBackfillStatus } from './api.js'
import type { JobView } from './world.js'

const iso = (ms: number) => new Date(ms).toISOString()

/**
 * The fail-safe's bound: foreground demand that cannot be observed for longer than this (NATS unreachable, no demand
 * instance pulling foreground requests) and every running attempt is cancelled through Kubernetes alone
 * (functions/cancel/fail-safe.ts; FAILSAFE_BLIND_MS). Long enough to ride out a NATS reconnect or a demand restart
 * (1–2 s), short against what a foreground request costs while background work shares its model.
 */
export const FAILSAFE_BLIND_MS = 5_000
/** The status reason the fail-safe writes; decide reads it back to count the preemption once NATS is back. */
export const FAILSAFE_REASON = 'ForegroundUnobservable' satisfies CancelReason

/** What one probe of the preemption path saw: foreground demand observable, or why not. */
export type Visibility = { visible: true } | { visible: false; why: string }

export interface Blindness {
  /** When foreground demand was last seen observable (epoch ms; the fail-safe's start before its first probe). */
  lastSeenAt: number
  /** Why it is not now (the latest probe); undefined while it is. */
  why?: string
  /** Blind for longer than the bound: every running attempt is cancelled and none may start. */
  engaged: boolean
}

/**
 * The fail-safe's decision after a probe. `at` is when the probe was sent: a path seen observable answered at some
 * time after it, so that is the latest time it is known to have been. Blind for longer than `boundMs` → engaged; one
 * probe that sees the path again disengages (admission's own fence then decides, per attempt, as always).
 */
export function failSafe(prev: Blindness, probe: Visibility, at: number, boundMs: number): Blindness {
  if (probe.visible) return { lastSeenAt: Math.max(prev.lastSeenAt, at), engaged: false }
  return { lastSeenAt: prev.lastSeenAt, why: probe.why, engaged: at - prev.lastSeenAt > boundMs }
}

/** What the engaged fail-safe cancels: every backfill Job still running (not finished, not already being deleted). */
export const blindTargets = (jobs: readonly JobView[]): JobView[] => jobs.filter((j) => !j.deleting && !j.outcome)

/**
 * The status the fail-safe writes through Kubernetes before it deletes the attempt's Job (NATS, and with it the
 * backfill's state, may be gone): Cancelling/ForegroundUnobservable naming that Job. The next decision reads it back
 * (cancelledByFailSafe) and counts the preemption — under `other` — in the state, where the counters live.
 */
export function blindStatus(b: ModelBackfill, jobName: string, message: string, now: number): ModelBackfillStatus {
  const previous = b.status?.conditions?.find((c) => c.type === 'Ready')
  return {
    ...b.status,
    phase: 'Cancelling',
    reason: FAILSAFE_REASON,
    message,
    jobName,
    conditions: [
      {
        type: 'Ready',
        status: 'False',
        reason: FAILSAFE_REASON,
        message,
        lastTransitionTime:
          previous?.status === 'False' && previous.lastTransitionTime ? previous.lastTransitionTime : iso(now),
        observedGeneration: b.metadata.generation ?? b.status?.observedGeneration,
      },
    ],
  }
}

/**
 * Whether the attempt's Job was deleted by the fail-safe: the status it wrote through Kubernetes names that Job. The
 * state may not say so (NATS, where it lives, may have been gone), so decide reads it back from the status.
 */
export const cancelledByFailSafe = (status: ModelBackfillStatus | undefined, jobName: string | undefined): boolean =>
  status?.reason === FAILSAFE_REASON && status.jobName === jobName
