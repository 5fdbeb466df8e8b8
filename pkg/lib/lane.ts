// A concurrency limit with a FIFO queue, shared by cancel's DELETE and bookkeeping lanes, admit's admission slots
// and its bookkeeping lane.
import { realTimers, type Timers } from './timers.js'

/** Bounded by whoever calls it (the transport's in-flight limit). */
export class Lane {
  private free: number
  private readonly waiting: (() => void)[] = []

  constructor(readonly width: number) {
    this.free = width
  }

  /** Tasks running or waiting for a place. */
  get busy() {
    return this.width - this.free + this.waiting.length
  }

  private readonly idleWaiters: (() => void)[] = []

  /**
   * Resolves when nothing runs or waits in this lane, or after `maxWaitMs` (so the lane that waits on it is
   * never starved by a steady trickle); `maxWaitMs` runs on `timers`.
   */
  idle(maxWaitMs: number, timers: Timers = realTimers): Promise<void> {
    if (this.busy === 0) return Promise.resolve()
    return new Promise((resolve) => {
      const timer = timers.set(done, maxWaitMs)
      const waiters = this.idleWaiters
      function done() {
        timers.clear(timer)
        const i = waiters.indexOf(done)
        if (i >= 0) waiters.splice(i, 1)
        resolve()
      }
      waiters.push(done)
    })
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--
    else await new Promise<void>((resolve) => this.waiting.push(resolve))
    try {
      return await task()
    } finally {
      const next = this.waiting.shift()
      if (next) next()
      else this.free++
      if (this.busy === 0) for (const done of [...this.idleWaiters]) done()
    }
  }
}
