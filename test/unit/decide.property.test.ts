// decide() under random histories: two backfills sharing a model or a node, driven step by step the way the
// functions drive them (support/dst-driven.ts: the simulation's real handlers, faults off, each event run out), with
// the contract's invariants checked on every single decision (support/dst-decisions.ts): never admit inside an idle window (nor within idleFor of
// a cancelled Job being gone); Failed is left only by a generation bump; attempts = distinct Job names POSTed; a
// completed Job observed with a cancel condition yields Succeeded and no preemption; every reason belongs to its
// phase; the finalizer goes only after the Job; deciding again on the result is a no-op. And on the world after
// every delivery: never two active Jobs per model or node; the claims held are exactly the live attempts'; the
// status shows the state.
// SIM_COVERAGE=1 prints what the histories exercised; SIM_RUNS=5000 runs a longer search; SIM_SEED (SIM_PATH)
// replays a failure.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { DrivenSim, type SimConfig } from './support/dst-driven.js'
import { simEvents } from './support/sim-events.js'

const event = simEvents({ coincidences: true })
const LONG = 'x'.repeat(70)
const config: fc.Arbitrary<SimConfig> = fc.record({
  share: fc.constantFrom('model', 'node'),
  names: fc.constantFrom<[string, string]>(['bf-a', 'bf-b'], [`${LONG}-a`, `${LONG}-b`]),
  idleForMin: fc.tuple(fc.integer({ min: 1, max: 10 }), fc.integer({ min: 1, max: 10 })),
  repeatAfterMin: fc.tuple(fc.constantFrom(0, 1, 5, 30), fc.constantFrom(0, 1, 5, 30)),
})

const RUNS = Number(process.env.SIM_RUNS ?? 200)
/** SIM_SEED (and SIM_PATH) replay the run fast-check reported failing. */
const replay = process.env.SIM_SEED ? { seed: Number(process.env.SIM_SEED), path: process.env.SIM_PATH } : {}

describe('decide: invariants over random histories', () => {
  // About 2–4 seconds for the default 200 histories (10–20 ms each on the shared machine, the real reconcile deciding);
  // the generous timeout is for slow CI machines and SIM_RUNS.
  const timeout = Math.max(60_000, RUNS * 150)
  it('hold for every decision (idle window, exclusivity, Failed, attempts, completion wins, reasons, idempotence)', {
    timeout,
  }, async () => {
    let decisions = 0
    let admissions = 0
    const seen = new Map<string, number>()
    await fc.assert(
      fc.asyncProperty(
        config,
        fc.array(event, { minLength: 20, maxLength: 40 }),
        fc.nat(),
        async (cfg, events, seed) => {
          const sim = new DrivenSim(cfg, seed)
          await sim.run(events)
          decisions += sim.decisions
          admissions += sim.created(0).size + sim.created(1).size
          for (const [k, n] of sim.seen) seen.set(k, (seen.get(k) ?? 0) + n)
        },
      ),
      { numRuns: RUNS, ...replay },
    )
    if (process.env.SIM_COVERAGE) console.log(decisions, admissions, [...seen].sort())
    // The histories are not degenerate: they decide a lot, admit often and reach the interesting outcomes.
    expect(decisions).toBeGreaterThan(2000)
    expect(admissions).toBeGreaterThan(100)
    for (const outcome of [
      'Cancelling/ForegroundDemand',
      'Cancelling/SpecChanged',
      'Blocked/ConcurrentBackfill',
      'Failed/JobFailed',
      'Succeeded/JobComplete',
      'Succeeded/RepeatScheduled',
      'Succeeded/RepeatCleanup',
      'gone',
    ]) {
      expect(seen.get(outcome) ?? 0, outcome).toBeGreaterThan(0)
    }
  })
})
