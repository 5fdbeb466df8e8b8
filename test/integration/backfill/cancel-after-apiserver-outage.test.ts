// A cancel that arrives while kube-apiserver is down must be done soon after it is back, not whenever the event's
// next redelivery happens to come (its backoff doubles to 16-30 s by then). On an environment of its own
// (kube-apiserver is killed and restarted): one running attempt; then only demand and cancel run (no lifecycle or watcher
// that could ask again after the outage, and demand pulling keeps the fail-safe released: only the cancel event's own
// retries count), the apiserver is killed, a cancel
// request is published, the apiserver restarted 40 s later; measured: the apiserver answering again → the Job
// deleting.
import { KubeConfig } from '@kubernetes/client-node'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { type Runner, startRunner } from '../../../cmd/manager/runner.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { Kube } from '../../../pkg/kube/client.js'
import { type Environment, killServer, restartServer, startEnvironment } from '../../env/environment.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'

const NS = 'apiserver-outage'
// Longer than the event's first seven deliveries (0, 0.5, 1.5, 3.5, 7.5, 15.5, ~32 s): its eighth comes ~30 s later.
const DOWN_MS = 40_000
/**
 * Cancel done within this of the apiserver's restart: its start (a few seconds, up to ~15 s at load 18) and one DELETE.
 * The event's own redelivery, by then 16-32 s apart, would come ~30 s after it.
 */
const BOUND_MS = 20_000

let own: Environment
let runner: Runner
let nc: NatsConnection
let world: BackfillWorld
let kc: KubeConfig

beforeAll(async () => {
  own = await startEnvironment({ log: () => {} })
  kc = new KubeConfig()
  kc.loadFromFile(own.kubeconfigPath)
  nc = await connect({ servers: own.natsUrl, maxReconnectAttempts: -1 })
  world = new BackfillWorld(kc, NS, nc)
  await world.core.createNamespace({ body: { metadata: { name: NS } } })
  runner = await startRunner({ natsUrl: own.natsUrl, kubeconfig: kc, watch: true, namespaces: [NS] })
}, 180_000)

afterAll(async () => {
  world?.close()
  await runner?.stop().catch(() => {})
  await nc?.close()
  await own?.stop()
}, 60_000)

it('a cancel pending through a 40 s apiserver outage is done as soon as the apiserver is back, not at its redelivery', {
  timeout: 180_000,
}, async () => {
  await world.template('tpl')
  await world.model('m', { node: 'node-a' })
  await world.backfill('bf', { modelRef: 'm', templateRef: 'tpl', idleFor: '2s' })
  const running = await world.waitFor('bf', 'Running', 'JobRunning')
  const jobName = running.status?.jobName as string
  await runner.stop()
  runner = await startRunner({
    natsUrl: own.natsUrl,
    kubeconfig: kc,
    functions: ['demand', 'cancel'],
    namespaces: [NS],
  })

  await killServer(own, 'kube-apiserver')
  const down = Date.now()
  const bus = await Bus.open(nc)
  await bus.publish('ai.flexinfer.backfill.cancel', {
    namespace: NS,
    backfill: 'bf',
    jobName,
    reason: 'ForegroundDemand',
    at: new Date().toISOString(),
  })
  await new Promise((r) => setTimeout(r, Math.max(0, DOWN_MS - (Date.now() - down))))
  restartServer(own, 'kube-apiserver')
  const restarted = Date.now()
  const probe = new Kube(kc)
  // The Job deleting: seen with its deletionTimestamp, or gone after it was seen again (right after a restart the
  // apiserver answers 429 "storage is (re)initializing", and a 404 then is no answer about the Job).
  let seen = false
  const deleting = await waitUntil(
    'the Job to be deleting',
    async () => {
      const job = await probe.getJob(NS, jobName).catch(() => undefined)
      if (job?.metadata?.deletionTimestamp) return Date.now()
      if (job) seen = true
      return job === null && seen ? Date.now() : undefined
    },
    90_000,
  )
  probe.close()
  process.stderr.write(
    `[apiserver outage] down ${restarted - down} ms; cancel done ${deleting - restarted} ms after the restart\n`,
  )
  expect(deleting - restarted).toBeLessThan(BOUND_MS)
})
