// The deterministic simulation of admission (support/dst.ts), a short variant: a few dozen seeded schedules of the
// real reconcile over the in-memory ports; `npm run sim -- --seeds N` runs the long one.
import { expect, it } from 'vitest'
import { searchSeeds, simulate } from './support/dst.js'

const SEEDS = Number(process.env.SIM_SEEDS ?? 16)

it(`${SEEDS} seeded schedules keep every invariant`, { timeout: 120_000 }, async () => {
  const r = await searchSeeds(1, SEEDS, { steps: 300 })
  const f = r.failed
  expect(f, f ? `seed ${f.seed}: ${f.violation}\n${f.schedule.slice(-80).join('\n')}` : '').toBeUndefined()
})

it('a seed replays exactly', async () => {
  const [a, b] = [await simulate({ seed: 7, steps: 150 }), await simulate({ seed: 7, steps: 150 })]
  expect(a.schedule.length).toBeGreaterThan(100)
  expect(b.schedule).toEqual(a.schedule)
})
