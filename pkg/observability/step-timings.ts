// Where one admission's milliseconds go: admit logs one line per Job it creates with
// the time of each step, so a profile comes from the log of a real run rather than from reading the path.

/** Milliseconds per named step of one handling, rounded to 0.1 ms; a step met twice (a CAS retry) adds up. */
export class StepTimings {
  readonly ms: Record<string, number> = {}
  private last: number

  constructor(private readonly clock: () => number = () => performance.now()) {
    this.last = clock()
  }

  /** Charges the time since the previous mark (or the start) to `step`. */
  mark(step: string) {
    const t = this.clock()
    this.add(step, t - this.last)
    this.last = t
  }

  /** Times one of several concurrent operations on its own; the sequential marks are not moved by it. */
  async time<T>(step: string, op: Promise<T> | T): Promise<T> {
    const t0 = this.clock()
    try {
      return await op
    } finally {
      this.add(step, this.clock() - t0)
    }
  }

  private add(step: string, ms: number) {
    this.ms[step] = Math.round(((this.ms[step] ?? 0) + ms) * 10) / 10
  }
}

/** `op` timed under `step` when there is a `timings`, untouched otherwise (no extra promise on other paths). */
export function timed<T>(timings: StepTimings | undefined, step: string, op: Promise<T> | T): Promise<T> | T {
  return timings ? timings.time(step, op) : op
}
