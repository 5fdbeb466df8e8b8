// The timers a handler waits on, behind a port: a process runs them on setTimeout, the deterministic simulation
// (test/unit/support/dst.ts) on its virtual clock, so that the handlers it runs wait in virtual time and a seed
// replays exactly. The same shape as demand's coalescing timers (functions/demand/ports.ts).

export interface Timers {
  /** Calls `fire` once after `ms`; the handle is for clear(). */
  set(fire: () => void, ms: number): unknown
  clear(timer: unknown): void
}

export const realTimers: Timers = {
  set: (fire, ms) => setTimeout(fire, ms),
  clear: (timer) => clearTimeout(timer as NodeJS.Timeout),
}

/** Resolves after `ms` on `timers`. */
export function sleepOn(timers: Timers, ms: number): Promise<void> {
  return new Promise((resolve) => {
    timers.set(resolve, ms)
  })
}
