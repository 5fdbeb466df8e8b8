// Drop-in beside FlexInfer's own gateway: it records foreground activity in Model.status.lastActiveTime, which
// counts as a foreground signal exactly like an ai.flexinfer.foreground.request event.
import { expect, it } from 'vitest'
import { jobName } from '../../../pkg/core/names.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env)

it('a newer Model.status.lastActiveTime preempts the running attempt and restarts the window', async () => {
  await sys.world.model('m-gw', { node: 'node-gw' })
  await sys.world.template('tpl-gw')
  await sys.world.backfill('gw', { modelRef: 'm-gw', templateRef: 'tpl-gw', idleFor: '3s' })
  await sys.world.waitFor('gw', 'Running')
  const activeAt = new Date().toISOString()
  await sys.world.modelStatus('m-gw', { phase: 'Ready', node: 'node-gw', lastActiveTime: activeAt })
  await waitUntil(
    'Job 1 gone',
    async () => ((await sys.world.job(jobName('gw', 1))) === null ? true : undefined),
    15_000,
  )
  const waiting = await sys.world.waitFor('gw', 'WaitingForIdle', 'IdleWindow')
  expect(Date.parse(waiting.status?.idleSince ?? '')).toBeGreaterThanOrEqual(Date.parse(activeAt))
  expect((await sys.world.state('gw'))?.counters.preemptions).toEqual({ foreground: 1 })
  const retry = await sys.world.waitFor('gw', 'Running', 'JobRunning', 20_000)
  expect(Date.parse(retry.status?.startedAt ?? '')).toBeGreaterThanOrEqual(Date.parse(activeAt) + 3000)
})
