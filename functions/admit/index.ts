// admit: when a backfill's timer fires (idle window end, cooldown over, re-check) or another function asks,
// run the gates and create the attempt's Job. The only function that creates Jobs. What follows a created Job (the
// Started Event, the status write) runs in admit's bookkeeping lane, not on the admission's slot (bookkeeping.ts).

import { STREAM_EVENTS, STREAM_TIMERS } from '../../events/catalog.js'
import { earlyBy } from '../../pkg/core/timer-tick.js'
import { Lane } from '../../pkg/lib/lane.js'
import { realTimers, sleepOn, type Timers } from '../../pkg/lib/timers.js'
import { StepTimings } from '../../pkg/observability/step-timings.js'
import type { AfterStart } from '../../pkg/reconcile/apply.js'
import { reconcile } from '../../pkg/reconcile/reconcile.js'
import type { Deps, EventFunction } from '../../pkg/transport/function.js'
import { BookkeepingLane } from './bookkeeping.js'

/** Longest a graceful stop waits for queued bookkeeping (the rest is redone by the next decisions). */
const DRAIN_MS = 10_000

/** Admissions at once: I/O-bound (API reads, KV, Job create); many at once keeps a burst of due timers on time. */
export const ADMISSION_SLOTS = 32
/**
 * Events handled at once: the admission slots and room for timers waiting out their early tick, which hold no slot
 * (a burst of windows ending together would otherwise spend up to a tick of each slot doing nothing).
 */
export const ADMIT_CONCURRENCY = 4 * ADMISSION_SLOTS

/**
 * Waits `waitMs` (a timer's early remainder, on `timers`) without a slot, then runs `admission` in one of `slots`.
 * Returns the admission's result and how long it held its slot.
 */
export async function afterEarlyTick<T>(
  slots: Lane,
  waitMs: number,
  admission: () => Promise<T>,
  timers: Timers = realTimers,
): Promise<{ result: T; slotMs: number }> {
  if (waitMs > 0) await sleepOn(timers, waitMs)
  return slots.run(async () => {
    const heldFrom = performance.now()
    const result = await admission()
    return { result, slotMs: Math.round(performance.now() - heldFrom) }
  })
}

export function admitFunction(): EventFunction {
  const lane = new BookkeepingLane()
  const slots = new Lane(ADMISSION_SLOTS)
  let log: Deps['log'] | undefined
  /** Hands an admission's bookkeeping to the lane; `queued` gets the promise of its end (for the timings line). */
  const handOff =
    (deps: Deps, queued: { done?: Promise<void> }): AfterStart =>
    async (work, where) => {
      queued.done = (await lane.submit(work, where, deps.log, deps.timers)).done
    }
  return {
    name: 'admit',
    concurrency: ADMIT_CONCURRENCY,
    subscriptions: [
      { stream: STREAM_TIMERS, subjects: ['flexinfer.events.timer.>'] },
      { stream: STREAM_EVENTS, subjects: ['flexinfer.events.backfill.admit'] },
    ],
    async start(deps) {
      log = deps.log
    },
    async stop() {
      const left = await lane.drain(DRAIN_MS)
      if (left > 0) {
        log?.warn({ left }, 'stopping with admission bookkeeping queued; the next decisions write those statuses')
      }
    },
    async handle(event, deps) {
      if (event.type === 'ai.flexinfer.timer.fired') {
        const { namespace, backfill, due } = event.data
        const timings = new StepTimings()
        // Timers fire early by the scheduler's tick (pkg/core/timer-tick.ts): wait out that remainder, never more, and
        // without a slot.
        const early = Date.parse(due) - deps.now()
        const queued: { done?: Promise<void> } = {}
        // slotMs: how long this admission held its slot (the steps after it, in the lane, do not).
        const { result: d, slotMs } = await afterEarlyTick(
          slots,
          earlyBy(Date.parse(due), deps.now()),
          () => {
            // 'wait': the early tick and the wait for a slot.
            timings.mark('wait')
            return reconcile(
              deps,
              'admit',
              namespace,
              backfill,
              { type: 'timer' },
              { timings, afterStart: handOff(deps, queued) },
            )
          },
          deps.timers,
        )
        const startedAt = d?.actions.some((a) => a.type === 'createJob') ? d.state?.startedAt : undefined
        if (startedAt) {
          // The lateness profile (dev/bench/README.md): lateMs is what the benchmark measures, startedAt − due. Logged
          // once the bookkeeping is done too, so the line has its steps.
          const line = () =>
            deps.log.info(
              {
                namespace,
                backfill,
                due,
                earlyMs: early,
                lateMs: Date.parse(startedAt) - Date.parse(due),
                slotMs,
                ms: timings.ms,
              },
              'admission timings',
            )
          if (queued.done) void queued.done.then(line)
          else line()
        }
      } else if (event.type === 'ai.flexinfer.backfill.admit') {
        const { namespace, backfill } = event.data
        await slots.run(() =>
          reconcile(deps, 'admit', namespace, backfill, { type: 'admit' }, { afterStart: handOff(deps, {}) }),
        )
      }
    },
  }
}
