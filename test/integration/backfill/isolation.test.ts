// Failure isolation (issue 8, item 2): one ModelBackfill whose reconcile throws must not stop a cluster-wide
// re-decide for the others. `modelRef: "gemma 4"` is accepted by the CRD, and reading its idle state throws
// `invalid key`; named to come first in the list, it used to abort lifecycle's pass over every backfill, so a
// GamingSession never cancelled the Job on its node. The bad one is retried on its own (backfill.resync).
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Runner } from '../../../runtime/runner.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let world: BackfillWorld

beforeAll(async () => {
  runner = await startTestRunner(env)
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  world?.close()
  await runner?.stop()
})

it('a backfill whose reconcile throws does not stop a gaming session from cancelling another one', async () => {
  const n = await world.declare('good')
  await world.waitFor(n.backfill, 'Running', 'JobRunning')
  const job = (await world.getBackfill(n.backfill))?.status?.jobName as string
  // First in name order, so a pass over the namespace's backfills meets it before the good one.
  await world.template('bad-tpl')
  await world.backfill('aaa-bad', { modelRef: 'gemma 4', templateRef: 'bad-tpl', idleFor: '2s' })
  expect((await world.getBackfill('aaa-bad'))?.spec.modelRef).toBe('gemma 4')

  const sessionAt = Date.now()
  await world.gamingSession('game', n.node, { expiresAt: new Date(Date.now() + 3_600_000).toISOString() })
  // Well inside a resync period (30 s): the cancel comes from the session's own event, not a later sweep.
  const cancelled = await world.waitForStatus(
    n.backfill,
    'a GamingIntent cancel',
    (s) => s.reason === 'GamingIntent' && s.phase !== 'Running',
    10_000,
  )
  expect(['Cancelling', 'Blocked', 'WaitingForIdle']).toContain(cancelled.status?.phase)
  const gone = await world.job(job)
  expect(gone === null || Boolean(gone.metadata?.deletionTimestamp)).toBe(true)
  expect(Date.now() - sessionAt).toBeLessThan(10_000)
  expect((await world.state(n.backfill))?.counters.preemptions).toEqual({ gaming: 1 })
})
