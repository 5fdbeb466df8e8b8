// The one place that knows the server's scheduler fires a timer early. nats-server evaluates message schedules on a
// tick (SCHEDULER_TICK_MS), so a schedule stored for its due time would fire up to a tick late; each timer is stored to
// fire one tick early instead (scheduleAt), admit waits out what is left of it (earlyBy), and whoever asks whether a
// recorded timer's schedule must still be stored allows for one that has already fired (FIRED_EARLY_WITHIN_MS;
// pkg/admission/timer-held.ts then finds its fired event instead).

/** nats-server (2.12–2.14) evaluates message schedules on a 250 ms tick (dev/bench/README.md has the measurement). */
export const SCHEDULER_TICK_MS = 250

/** When to store the schedule of a timer due at `due` (ms): one tick early, never in the past. */
export function scheduleAt(due: number, now: number): number {
  return Math.max(now, due - SCHEDULER_TICK_MS)
}

/**
 * How long before `due` a timer fired at `now` is early: what admit waits before deciding. At most two ticks count
 * (the tick the schedule was stored early by, and one of the scheduler's own jitter); a timer further ahead is not
 * this early firing (a re-armed or hand-published one, a clock step) and is handled at once — decide() re-arms it.
 */
export function earlyBy(due: number, now: number): number {
  const early = due - now
  return early > 0 && early <= 2 * SCHEDULER_TICK_MS ? early : 0
}

/**
 * A recorded timer due within this of now may have fired already (its schedule removed, its fired event waiting for
 * admit): only one further out must have its schedule stored (pkg/core/resync.ts TimerNotStored). Four ticks: the early
 * tick and margin for a busy sweep.
 */
export const FIRED_EARLY_WITHIN_MS = 4 * SCHEDULER_TICK_MS
