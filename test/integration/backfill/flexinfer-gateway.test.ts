// Drop-in beside FlexInfer's own gateway: it records foreground activity in Model.status.lastActiveTime, which
// counts as a foreground signal exactly like an ai.flexinfer.foreground.request event.
import { afterAll, beforeAll, expect, it } from 'vitest'
import { jobName } from '../../../core/names.js'
import type { Runner } from '../../../runtime/runner.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let world: BackfillWorld

beforeAll(async () => {
  runner = await startTestRunner(env)
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  await runner?.stop()
})

it('a newer Model.status.lastActiveTime preempts the running attempt and restarts the window', async () => {
  await world.model('m-gw', { node: 'node-gw' })
  await world.template('tpl-gw')
  await world.backfill('gw', { modelRef: 'm-gw', templateRef: 'tpl-gw', idleFor: '3s' })
  await world.waitFor('gw', 'Running')
  const activeAt = new Date().toISOString()
  await world.modelStatus('m-gw', { phase: 'Ready', node: 'node-gw', lastActiveTime: activeAt })
  await waitUntil('Job 1 gone', async () => ((await world.job(jobName('gw', 1))) === null ? true : undefined), 15_000)
  const waiting = await world.waitFor('gw', 'WaitingForIdle', 'IdleWindow')
  expect(Date.parse(waiting.status?.idleSince ?? '')).toBeGreaterThanOrEqual(Date.parse(activeAt))
  expect((await world.state('gw'))?.counters.preemptions).toEqual({ foreground: 1 })
  const retry = await world.waitFor('gw', 'Running', 'JobRunning', 20_000)
  expect(Date.parse(retry.status?.startedAt ?? '')).toBeGreaterThanOrEqual(Date.parse(activeAt) + 3000)
})
