// Issue 8, item 4, scaled down: a kube-apiserver outage long enough that the timers firing during it are
// dead-lettered must not strand a backfill. On an environment of its own (the apiserver is killed and restarted;
// the shared one is never touched), with every function running: a Blocked (TemplateNotFound) backfill and a
// WaitingForIdle one whose window ends during the outage. After it, the missing CronJob is created; both must be
// admitted within a bounded time. Nothing but the resync sweep wakes them: their timers are in the dead-letter
// stream, and neither the template's creation nor the apiserver's return is an event for them.
import { KubeConfig } from '@kubernetes/client-node'
import { jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it, vi } from 'vitest'
import { type Runner, startRunner } from '../../../cmd/manager/runner.js'
import { STREAM_DEAD_LETTER } from '../../../events/catalog.js'
import { type Environment, killServer, restartServer, startEnvironment } from '../../env/environment.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'

// The retry budget shortened from ~62 s to ~1.4 s (3 deliveries, 400 + 800 ms backoff) and a sweep every 2 s, so
// the outage needs only to outlast the timers. Read when the runner starts (cmd/manager/config.ts).
const RETRY_ENV = vi.hoisted(() => {
  const set = { MAX_DELIVER: '3', RETRY_BACKOFF_MS: '200', RETRY_BACKOFF_MAX_MS: '1000', RESYNC_MS: '2000' }
  const saved = Object.fromEntries(Object.keys(set).map((k) => [k, process.env[k]]))
  Object.assign(process.env, set)
  return saved
})

const NS = 'outage'
let own: Environment
let runner: Runner
let nc: NatsConnection
let world: BackfillWorld

beforeAll(async () => {
  own = await startEnvironment({ log: () => {} })
  const kc = new KubeConfig()
  kc.loadFromFile(own.kubeconfigPath)
  await world0(kc)
  runner = await startRunner({ natsUrl: own.natsUrl, kubeconfig: kc, watch: true, namespaces: [NS] })
}, 180_000)

async function world0(kc: KubeConfig) {
  nc = await connect({ servers: own.natsUrl })
  world = new BackfillWorld(kc, NS, nc)
  await world.core.createNamespace({ body: { metadata: { name: NS } } })
  await waitUntil('the default ServiceAccount', async () =>
    (await world.core.listNamespacedServiceAccount({ namespace: NS })).items.some((s) => s.metadata?.name === 'default')
      ? true
      : undefined,
  )
}

afterAll(async () => {
  world?.close()
  await runner?.stop().catch(() => {})
  await nc?.close()
  await own?.stop()
  for (const [k, v] of Object.entries(RETRY_ENV)) {
    if (v === undefined) delete process.env[k]
    else process.env[k] = v
  }
}, 60_000)

/** The timer events admit dead-lettered, by backfill (their subjects end in `<namespace>.<backfill>`). */
async function deadLetteredTimers(): Promise<Set<string>> {
  const jsm = await jetstreamManager(nc)
  const info = await jsm.streams.info(STREAM_DEAD_LETTER, { subjects_filter: 'flexinfer.deadletter.admit' })
  const found = new Set<string>()
  for (let seq = info.state.first_seq; info.state.messages && seq <= info.state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(STREAM_DEAD_LETTER, { seq }).catch(() => null)
    const subject = m?.header.get('Flexinfer-Original-Subject') ?? ''
    if (subject.startsWith(`flexinfer.events.timer.${NS}.`))
      found.add(subject.slice(`flexinfer.events.timer.${NS}.`.length))
  }
  return found
}

it('a timer dead-lettered during an apiserver outage does not strand its backfill: both converge after it', {
  timeout: 150_000,
}, async () => {
  await world.model('m-blocked', { node: 'node-blocked' })
  await world.model('m-waiting', { node: 'node-waiting' })
  await world.template('tpl')
  // Blocked until its CronJob exists: a re-check timer every 15 s is all that would ever notice it.
  await world.backfill('blocked', { modelRef: 'm-blocked', templateRef: 'later', idleFor: '1s' })
  // Its idle window (10 s) ends during the outage.
  await world.backfill('waiting', { modelRef: 'm-waiting', templateRef: 'tpl', idleFor: '10s' })
  await world.waitFor('blocked', 'Blocked', 'TemplateNotFound')
  await world.waitFor('waiting', 'WaitingForIdle', 'IdleWindow')

  await killServer(own, 'kube-apiserver')
  const down = Date.now()
  // Both timers fire while it is down and use up their retry budget: they end in the dead-letter stream.
  await waitUntil(
    'both timers to be dead-lettered',
    async () => ((await deadLetteredTimers()).size === 2 ? true : undefined),
    45_000,
    async () => JSON.stringify([...(await deadLetteredTimers())]),
  )
  restartServer(own, 'kube-apiserver')
  await waitUntil('the apiserver to serve again', async () =>
    (await world.core.readNamespace({ name: NS }).catch(() => null)) ? true : undefined,
  )
  const up = Date.now()
  expect(up - down).toBeGreaterThan(10_000)

  await world.template('later')
  // Bounded: a sweep period (2 s) plus the lost-timer grace (5 s) plus the time to list and admit, with margin.
  const bound = 30_000
  for (const name of ['blocked', 'waiting']) {
    const b = await world.waitForStatus(name, 'admitted', (s) => Boolean(s.jobName) && s.attempts === 1, bound)
    expect(['Starting', 'Running'], name).toContain(b.status?.phase)
    expect(await world.job(b.status?.jobName as string), name).not.toBeNull()
  }
  expect(Date.now() - up).toBeLessThan(bound)
})
