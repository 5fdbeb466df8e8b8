// A decision that saw the attempt live must not retake its claims after a preemption ended it. ensureClaims runs
// after a decision's actions and status write, and a decision that changed nothing committed nothing: by then the
// attempt may have been cancelled and its claims released. Retaking them held the model for the dead Job for the
// claim grace period (30 s), so the next attempt could not be admitted ("repeatedly preempted" timed out).
import { expect, it } from 'vitest'
import { claimKeys, jobName } from '../../../pkg/core/names.js'
import { ensureClaims } from '../../../pkg/reconcile/apply.js'
import { reconcile } from '../../../pkg/reconcile/reconcile.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env)

it('a stale decision on a cancelled attempt does not retake its released claims', { timeout: 90_000 }, async () => {
  const n = await sys.world.declare('stale-claims')
  await sys.world.waitFor(n.backfill, 'Running', 'JobRunning', 45_000)
  const job = jobName(n.backfill, 1)
  // A decision taken while the attempt ran (nothing to change, so nothing committed): it calls the attempt live.
  const stale = await reconcile(sys.runner.deps, 'lifecycle', env.namespace, n.backfill, { type: 'resource' })
  expect(stale?.state).toMatchObject({ phase: 'Running', jobName: job })
  const backfill = await sys.world.getBackfill(n.backfill)

  // Suspending cancels it: the state moves on and the claims are released (and nothing is admitted again).
  await sys.world.patchBackfillSpec(n.backfill, { suspend: true })
  await sys.world.waitFor(n.backfill, 'Suspended', 'Suspended', 45_000)
  const keys = claimKeys(env.namespace, n.model, n.node)
  const claimed = async () => (await sys.runner.deps.bus.kv.claims.get(keys.model))?.operation === 'PUT'
  await waitUntil('the claims to be released', async () => ((await claimed()) ? undefined : true), 30_000)

  // The stale decision's tail runs now, as it would after a slow status write.
  await ensureClaims(sys.runner.deps, backfill, stale as NonNullable<typeof stale>)
  expect(await claimed()).toBe(false)
  expect((await sys.runner.deps.bus.kv.claims.get(keys.node))?.operation === 'PUT').toBe(false)
})
