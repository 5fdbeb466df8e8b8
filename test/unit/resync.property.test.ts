// needsResync() against decide() under random histories (support/dst-driven.ts: the simulation's real handlers,
// faults off, every event delivered and run out): (1) after every event, a backfill whose events were all handled is never
// picked unless it has an active attempt or is being deleted — a settled cluster publishes no resync; (2) a timer
// whose firing is lost is always picked once its grace period is over, and re-deciding it leaves it settled again.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { needsResync, type ResyncReason, TIMER_GRACE_MS } from '../../pkg/core/resync.js'
import { DrivenSim, type SimConfig } from './support/dst-driven.js'
import { simEvents } from './support/sim-events.js'

const event = simEvents({ coincidences: false })
const config: fc.Arbitrary<SimConfig> = fc.record({
  share: fc.constantFrom('model', 'node'),
  names: fc.constant<[string, string]>(['bf-a', 'bf-b']),
  idleForMin: fc.tuple(fc.integer({ min: 1, max: 10 }), fc.integer({ min: 1, max: 10 })),
  repeatAfterMin: fc.tuple(fc.constantFrom(0, 1, 5), fc.constantFrom(0, 1, 5)),
})

// 400 histories: about 60 of them reach a lost timer (200 gave 20–37 since takeover's first window, so the
// coverage guard below failed now and then at 20).
const RUNS = Number(process.env.SIM_RUNS ?? 400)
/** SIM_SEED (and SIM_PATH) replay the run fast-check reported failing. */
const replay = process.env.SIM_SEED ? { seed: Number(process.env.SIM_SEED), path: process.env.SIM_PATH } : {}
const ACTIVE = new Set(['Starting', 'Running', 'Cancelling'])

/** The sweep's view of backfill i: its object, state, Job and Model as the sim holds them; its timer as stored. */
function reason(sim: DrivenSim, i: number): ResyncReason | null | 'gone' {
  const o = sim.view(i)
  if (!o.backfill) return 'gone'
  const timerAt = sim.timerAt(i)
  return needsResync(
    { backfill: o.backfill, state: o.state, job: o.job, model: o.model, timerStored: timerAt !== undefined },
    sim.now,
  )
}

/** What may be picked although every event was handled: active attempts and deletions waiting for their Job. */
function allowed(sim: DrivenSim, i: number, r: ResyncReason | null | 'gone'): boolean {
  if (r === null || r === 'gone') return true
  const s = sim.state(i)
  if (r === 'ActiveAttempt' || r === 'AttemptJobGone') return Boolean(s && ACTIVE.has(s.phase))
  return r === 'DeletionUnseen'
}

/** The sim lets time pass a stored timer before it ticks (a slow scheduler): that one is overdue, not lost. */
const overdue = (sim: DrivenSim, i: number) => {
  const at = sim.timerAt(i)
  return at !== undefined && at <= sim.now
}

describe('needsResync over random histories', () => {
  const timeout = Math.max(60_000, RUNS * 150)
  it('picks nothing a delivered history left settled, and every lost timer', { timeout }, async () => {
    let checked = 0
    let lost = 0
    await fc.assert(
      fc.asyncProperty(
        config,
        fc.array(event, { minLength: 20, maxLength: 40 }),
        fc.nat(),
        async (cfg, events, seed) => {
          const sim = new DrivenSim(cfg, seed)
          await sim.run([])
          for (const ev of events) {
            await sim.apply(ev)
            for (const i of [0, 1]) {
              if (overdue(sim, i)) continue
              const r = reason(sim, i)
              checked++
              // The trace only for a failure: joined on every check, it was most of the run.
              if (!allowed(sim, i, r)) expect.fail(`${r} for ${sim.names[i]}\n${sim.trace}`)
            }
          }
          // Lose one backfill's stored timer (its firing dead-lettered) and let the grace period pass.
          const i = seed % 2
          const timerAt = sim.timerAt(i)
          // A timer the state still counts on (one it no longer wants, e.g. after the model went away, is moot).
          const wanted = Date.parse(sim.state(i)?.timerAt ?? '')
          if (timerAt === undefined || Number.isNaN(wanted) || !sim.view(i).backfill) return
          lost++
          sim.now = Math.max(sim.now, timerAt, wanted) + TIMER_GRACE_MS
          sim.loseTimer(i)
          const r = reason(sim, i)
          if (r === null || r === 'gone') expect.fail(`a lost timer not picked\n${sim.trace}`)
          // The resync re-decides it; after that it is settled (or an active attempt) again.
          await sim.resync(i, r)
          if (!overdue(sim, i)) expect(allowed(sim, i, reason(sim, i))).toBe(true)
        },
      ),
      { numRuns: RUNS, ...replay },
    )
    expect(checked).toBeGreaterThan(1000)
    expect(lost).toBeGreaterThan(20)
  })
})
