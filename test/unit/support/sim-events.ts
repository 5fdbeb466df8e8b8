// Random histories for the property tests that drive the simulation event by event (support/dst-driven.ts): the events of a two-backfill
// world, weighted as they happen. `coincidences: false` keeps every event delivered on its own (no cancel signal
// coinciding with a Job's end, no lease, no lastActiveTime): what a test of the sweep needs.
import fc from 'fast-check'
import type { Coincident, SimEvent } from './dst-driven.js'
import { MINUTE, SECOND } from './world.js'

const bf = fc.constantFrom(0, 1)
const model = fc.constantFrom(0, 1)
const coincident = fc.constantFrom<Coincident>(
  'none',
  'foreground',
  'gaming',
  'lease',
  'suspend',
  'notReady',
  'specChange',
)

export function simEvents({ coincidences }: { coincidences: boolean }): fc.Arbitrary<SimEvent> {
  const only = <T>(arbitraries: T[]) => (coincidences ? arbitraries : [])
  return fc.oneof(
    {
      weight: 6,
      arbitrary: fc.record({ k: fc.constant('advance'), ms: fc.integer({ min: SECOND, max: 15 * MINUTE }) }),
    },
    { weight: 6, arbitrary: fc.constant({ k: 'tick' } as const) },
    { weight: 4, arbitrary: fc.record({ k: fc.constant('foreground'), model }) },
    ...only([{ weight: 1, arbitrary: fc.record({ k: fc.constant('lastActive'), model }) }]),
    { weight: 4, arbitrary: fc.record({ k: fc.constant('jobStart'), bf }) },
    {
      weight: 4,
      arbitrary: fc.record({
        k: fc.constant('jobFinish'),
        bf,
        outcome: coincidences
          ? fc.constantFrom('Complete' as const, 'Complete' as const, 'Failed' as const)
          : fc.constantFrom('Complete' as const, 'Failed' as const),
        with: coincidences ? coincident : fc.constant('none' as const),
      }),
    },
    { weight: 4, arbitrary: fc.record({ k: fc.constant('reap'), finished: fc.boolean() }) },
    {
      weight: 1,
      arbitrary: fc.record({
        k: fc.constant('gaming'),
        on: fc.boolean(),
        node: fc.constantFrom(0, 1),
        ttlMs: fc.integer({ min: MINUTE, max: 60 * MINUTE }),
        deleting: fc.boolean(),
      }),
    },
    ...only([
      {
        weight: 1,
        arbitrary: fc.record({
          k: fc.constant('lease'),
          on: fc.boolean(),
          by: fc.constantFrom('node' as const, 'group' as const),
          ttlMs: fc.integer({ min: MINUTE, max: 60 * MINUTE }),
        }),
      },
    ]),
    { weight: 1, arbitrary: fc.record({ k: fc.constant('suspend'), bf }) },
    {
      weight: 1,
      arbitrary: fc.record({ k: fc.constant('specChange'), bf, idleForMin: fc.integer({ min: 1, max: 10 }) }),
    },
    { weight: 1, arbitrary: fc.record({ k: fc.constant('ready'), model, ready: fc.boolean() }) },
    { weight: 1, arbitrary: fc.record({ k: fc.constant('move'), model }) },
    { weight: 1, arbitrary: fc.record({ k: fc.constant('delete'), bf }) },
  ) as fc.Arbitrary<SimEvent>
}
