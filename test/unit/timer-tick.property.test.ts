// The timer's early firing, compensated in one place (pkg/core/timer-tick.ts): a schedule stored by scheduleAt() and
// fired anywhere within the scheduler's tick is waited out by earlyBy() to exactly its due time, never past it.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { TIMER_STORED_AFTER_MS } from '../../pkg/core/resync.js'
import { earlyBy, FIRED_EARLY_WITHIN_MS, SCHEDULER_TICK_MS, scheduleAt } from '../../pkg/core/timer-tick.js'

const T0 = Date.parse('2026-12-03T10:00:00Z')

describe('the timer tick', () => {
  it('a timer fired within a tick of its schedule is waited out to its due time exactly', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: SCHEDULER_TICK_MS, max: 86_400_000 }),
        fc.integer({ min: 0, max: SCHEDULER_TICK_MS }),
        (ahead, jitter) => {
          const due = T0 + ahead
          const firedAt = scheduleAt(due, T0) + jitter
          expect(firedAt + earlyBy(due, firedAt)).toBe(Math.max(due, firedAt))
        },
      ),
    )
  })

  it('never schedules in the past; never waits for a timer due now or already late', () => {
    expect(scheduleAt(T0 + 100, T0)).toBe(T0)
    expect(earlyBy(T0, T0)).toBe(0)
    expect(earlyBy(T0 - 5, T0)).toBe(0)
  })

  it('a timer far ahead of its firing is not waited for (decide() re-arms it)', () => {
    expect(earlyBy(T0 + 2 * SCHEDULER_TICK_MS + 1, T0)).toBe(0)
    expect(earlyBy(T0 + 2 * SCHEDULER_TICK_MS, T0)).toBe(2 * SCHEDULER_TICK_MS)
  })

  it("the sweep's stored-schedule check allows for the early firing", () => {
    expect(TIMER_STORED_AFTER_MS).toBe(FIRED_EARLY_WITHIN_MS)
    expect(FIRED_EARLY_WITHIN_MS).toBeGreaterThan(SCHEDULER_TICK_MS)
  })
})
