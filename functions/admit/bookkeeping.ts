// What an admission does after its attempt is committed and its Job exists — the BackfillStarted Event and the
// status write (pkg/reconcile/apply.ts hands them over) — runs in a lane of its own, off the admission slot: when many
// windows end together, the timers queue for admission slots, and a slot held for this work after `startedAt` is a
// slot another window waits for. Foreground safety does not depend on it: the claims, the fence and the newest-request reads
// around the POST stay on the admission path.
//
// Nothing here is needed for the Job to be cancelled, and nothing is lost if it never runs: the state in KV already
// says Starting with the Job's name, and the next decision on the backfill writes the status from it — lifecycle's,
// when the Job's pods appear (job.completed: Started), and the resync sweep's, which re-decides every active attempt
// every period (pkg/core/resync.ts ActiveAttempt). Only the Started Event is lost then, as it was when a process died
// between the POST and the Event.

import { Lane } from '../../pkg/lib/lane.js'
import { realTimers, type Timers } from '../../pkg/lib/timers.js'
import { describeError, type Logger } from '../../pkg/observability/log.js'

/** Bookkeeping tasks at once: apiserver writes (an Event POST, a status PUT), fewer than admit's 32 slots. */
export const BOOKKEEPING_WIDTH = 16
/** Tasks running or waiting at most; past it an admission waits for a place (its slot held, as if there were no lane). */
export const BOOKKEEPING_QUEUE = 1024
/** Longest one task may hold a place (its calls have their own deadlines; this bounds their sum and retries). */
export const BOOKKEEPING_DEADLINE_MS = 60_000

export interface Where {
  namespace: string
  backfill: string
  job: string
}

export class BookkeepingLane {
  private readonly lane: Lane
  private pending = 0
  private readonly waiting: (() => void)[] = []
  private readonly running = new Set<Promise<void>>()

  constructor(
    readonly width = BOOKKEEPING_WIDTH,
    readonly bound = BOOKKEEPING_QUEUE,
    readonly deadlineMs = BOOKKEEPING_DEADLINE_MS,
  ) {
    this.lane = new Lane(width)
  }

  /** Tasks running or queued. */
  get size() {
    return this.pending
  }

  /**
   * Queues `work`; resolves once it has a place (at once unless `bound` tasks are pending) with `done`, its end,
   * which never rejects: a failure or an overrun deadline (on `timers`) is logged with `where` and left to the next
   * decision.
   */
  async submit(
    work: () => Promise<void>,
    where: Where,
    log: Logger,
    timers: Timers = realTimers,
  ): Promise<{ done: Promise<void> }> {
    while (this.pending >= this.bound) await new Promise<void>((resolve) => this.waiting.push(resolve))
    this.pending++
    const queuedAt = performance.now()
    const done = this.lane
      .run(() => withDeadline(work(), this.deadlineMs, timers))
      .catch((err) =>
        log.error(
          { ...where, error: describeError(err), ms: Math.round(performance.now() - queuedAt) },
          'admission bookkeeping failed (Started Event, status); the next decision on the backfill writes the status',
        ),
      )
      .finally(() => {
        this.pending--
        this.running.delete(done)
        this.waiting.shift()?.()
      })
    this.running.add(done)
    return { done }
  }

  /**
   * Waits up to `maxMs` for every pending task (a graceful stop); returns how many were still pending. Those are
   * not lost: their statuses are written by the next decisions (above).
   */
  async drain(maxMs: number): Promise<number> {
    let timer: NodeJS.Timeout | undefined
    const timeout = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, maxMs)
    })
    await Promise.race([Promise.allSettled([...this.running]), timeout])
    clearTimeout(timer)
    return this.pending
  }
}

/** `op`, or a rejection after `ms` (the operation itself is left to its own deadlines). */
async function withDeadline<T>(op: Promise<T>, ms: number, timers: Timers): Promise<T> {
  let timer: unknown
  const overrun = new Promise<never>((_, reject) => {
    timer = timers.set(() => reject(new Error(`still running after its ${ms} ms deadline`)), ms)
  })
  try {
    return await Promise.race([op, overrun])
  } finally {
    timers.clear(timer)
  }
}
