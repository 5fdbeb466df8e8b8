// The resync sweep on the shared environment (default period, RESYNC_MS 30 s): a cancel signal whose event never
// reaches lifecycle is still acted on within one period. The "lost" event is a GamingSession in a namespace this
// system does not manage: the namespace scope drops its event, yet the session targets our model's node, and the
// decision (which lists sessions cluster-wide) must cancel the running attempt. Only a sweep re-decides it.
import { CoreV1Api } from '@kubernetes/client-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { RESYNC_MS } from '../../../core/resync.js'
import type { Runner } from '../../../runtime/runner.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let world: BackfillWorld
let elsewhere: BackfillWorld
const other = () => `${env.namespace}-other`

beforeAll(async () => {
  runner = await startTestRunner(env)
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  await env.kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: other() } } })
  elsewhere = new BackfillWorld(env.kc, other(), env.nc)
})
afterAll(async () => {
  world?.close()
  await runner?.stop()
  await env.kc
    .makeApiClient(CoreV1Api)
    .deleteNamespace({ name: other() })
    .catch(() => {})
})

it('a running attempt whose gaming-session event is lost is cancelled by the next resync sweep', {
  timeout: 90_000,
}, async () => {
  const n = await world.declare('lost-event')
  const running = await world.waitFor(n.backfill, 'Running', 'JobRunning')
  const job = running.status?.jobName as string

  const at = Date.now()
  await elsewhere.gamingSession('game', n.node, { expiresAt: new Date(Date.now() + 3_600_000).toISOString() })
  // One sweep period, plus the time to list, publish and cancel.
  const bound = RESYNC_MS + 15_000
  await world.waitForStatus(n.backfill, 'a GamingIntent cancel', (s) => s.reason === 'GamingIntent', bound)
  expect(Date.now() - at).toBeLessThan(bound)
  const gone = await world.job(job)
  expect(gone === null || Boolean(gone.metadata?.deletionTimestamp)).toBe(true)
  expect((await world.state(n.backfill))?.counters.preemptions).toEqual({ gaming: 1 })
})
