// Failure isolation (issue 8, item 2): one ModelBackfill whose reconcile throws must not stop a cluster-wide
// re-decide for the others. `modelRef: "gemma 4"` is accepted by the CRD, and reading its idle state throws
// `invalid key`; named to come first in the list, it used to abort lifecycle's pass over every backfill, so a
// GamingSession never cancelled the Job on its node. The bad one is retried on its own (backfill.resync).
import { expect, it } from 'vitest'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'

const env = useTestEnv()
const sys = useBackfillSystem(env)

it('a backfill whose reconcile throws does not stop a gaming session from cancelling another one', async () => {
  const n = await sys.world.declare('good')
  await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
  const job = (await sys.world.getBackfill(n.backfill))?.status?.jobName as string
  // First in name order, so a pass over the namespace's backfills meets it before the good one.
  await sys.world.template('bad-tpl')
  await sys.world.backfill('aaa-bad', { modelRef: 'gemma 4', templateRef: 'bad-tpl', idleFor: '2s' })
  expect((await sys.world.getBackfill('aaa-bad'))?.spec.modelRef).toBe('gemma 4')

  const sessionAt = Date.now()
  await sys.world.gamingSession('game', n.node, { expiresAt: new Date(Date.now() + 3_600_000).toISOString() })
  // Well inside a resync period (30 s): the cancel comes from the session's own event, not a later sweep.
  const cancelled = await sys.world.waitForStatus(
    n.backfill,
    'a GamingIntent cancel',
    (s) => s.reason === 'GamingIntent' && s.phase !== 'Running',
    10_000,
  )
  expect(['Cancelling', 'Blocked', 'WaitingForIdle']).toContain(cancelled.status?.phase)
  const gone = await sys.world.job(job)
  expect(gone === null || Boolean(gone.metadata?.deletionTimestamp)).toBe(true)
  expect(Date.now() - sessionAt).toBeLessThan(10_000)
  expect((await sys.world.state(n.backfill))?.counters.preemptions).toEqual({ gaming: 1 })
})
