// The resync sweep on the shared environment (default period, RESYNC_MS 30 s): a cancel signal whose event never
// reaches lifecycle is still acted on within one period. The event is lost the way a drop-oldest stream or a bad
// acknowledgement loses it: while lifecycle is down, its consumer's messages (the GamingSession's among them) are
// taken and acknowledged unhandled. The session targets our model's node, and the decision (which lists sessions
// cluster-wide) must cancel the running attempt. Only a sweep re-decides it.

import { CoreV1Api } from '@kubernetes/client-node'
import { jetstream } from '@nats-io/jetstream'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { STREAM_EVENTS } from '../../../events/catalog.js'
import { lifecycleFunction } from '../../../functions/lifecycle/index.js'
import { RESYNC_MS } from '../../../pkg/core/resync.js'
import { scoped } from '../../../pkg/transport/deps.js'
import { runOnJetStream } from '../../../pkg/transport/jetstream-adapter.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld } from '../support/backfill-world.js'
import { startTestRunner, testInstance } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let world: BackfillWorld
let elsewhere: BackfillWorld
const other = () => `${env.namespace}-other`

const instance = testInstance()

beforeAll(async () => {
  runner = await startTestRunner(env, { instance })
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

  // lifecycle goes down; the session's event reaches its consumer and is acknowledged without being handled.
  const index = runner.functions.findIndex((f) => f.name === `lifecycle-${instance}`)
  await runner.functions.splice(index, 1)[0]?.stop()
  const at = Date.now()
  await elsewhere.gamingSession('game', n.node, { expiresAt: new Date(Date.now() + 3_600_000).toISOString() })
  const consumer = await jetstream(env.nc).consumers.get(STREAM_EVENTS, `lifecycle-${instance}`)
  let lost = false
  for (let i = 0; i < 20 && !lost; i++) {
    const batch = await consumer.fetch({ max_messages: 100, expires: 1000 })
    for await (const msg of batch) {
      if (msg.subject === 'flexinfer.events.gaming.session') lost = true
      msg.ack()
    }
  }
  expect(lost).toBe(true)
  runner.functions.push(await runOnJetStream(runner.deps, scoped(lifecycleFunction(), [env.namespace], instance)))
  // One sweep period, plus the time to list, publish and cancel.
  const bound = RESYNC_MS + 15_000
  await world.waitForStatus(n.backfill, 'a GamingIntent cancel', (s) => s.reason === 'GamingIntent', bound)
  expect(Date.now() - at).toBeLessThan(bound)
  const gone = await world.job(job)
  expect(gone === null || Boolean(gone.metadata?.deletionTimestamp)).toBe(true)
  expect((await world.state(n.backfill))?.counters.preemptions).toEqual({ gaming: 1 })
})

it('a GamingSession in a namespace the deployment does not manage cancels at once (its event, not a sweep)', async () => {
  const n = await world.declare('session-elsewhere')
  await world.waitFor(n.backfill, 'Running', 'JobRunning')
  const at = Date.now()
  await elsewhere.gamingSession('game-now', n.node, { expiresAt: new Date(Date.now() + 3_600_000).toISOString() })
  // Sessions and leases target nodes: a scoped deployment watches and takes them from every namespace.
  await world.waitForStatus(n.backfill, 'a GamingIntent cancel', (s) => s.reason === 'GamingIntent', 10_000)
  expect(Date.now() - at).toBeLessThan(10_000)
})
