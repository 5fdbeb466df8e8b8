// Fail safe when blind: with nats-server killed under running backfills, nothing can see a foreground request, so
// every running Job must go — through Kubernetes alone — within the fail-safe's bound (functions/cancel/fail-safe.ts);
// with nats-server back, every backfill resumes through the normal gates: one new attempt each, nothing lost (the
// preemption counted once, under `other`), no duplicate attempt. On an environment of its own (nats-server is killed
// and restarted; the shared one is never touched), with every function in one runner, as `npm start` runs them.
import { KubeConfig } from '@kubernetes/client-node'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it, vi } from 'vitest'
import { type Runner, startRunner } from '../../../cmd/manager/runner.js'
import { PROBE_EVERY_MS } from '../../../functions/cancel/fail-safe.js'
import { FAILSAFE_REASON } from '../../../pkg/core/fail-safe.js'
import { type Environment, killServer, restartServer, startEnvironment } from '../../env/environment.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'

// A 2 s bound and a sweep every 2 s, so the test needs seconds, not minutes. Read at start: set before imports.
const SAVED_ENV = vi.hoisted(() => {
  const set = { FAILSAFE_BLIND_MS: '2000', RESYNC_MS: '2000' }
  const saved = Object.fromEntries(Object.keys(set).map((k) => [k, process.env[k]]))
  Object.assign(process.env, set)
  return saved
})
const BOUND_MS = 2_000
/** RESYNC_MS above: the sweep's period. */
const RESYNC_MS = 2_000
/** Each backfill's idleFor: its timer's period. */
const IDLE_FOR_MS = 2_000
/** The bound, one probe period and the DELETEs' round trips. */
const DEADLINE_MS = BOUND_MS + 2_000

const NS = 'failsafe'
const BACKFILLS = ['a', 'b', 'c']
let own: Environment
let runner: Runner
let nc: NatsConnection
let world: BackfillWorld

beforeAll(async () => {
  own = await startEnvironment({ log: () => {} })
  const kc = new KubeConfig()
  kc.loadFromFile(own.kubeconfigPath)
  nc = await connect({ servers: own.natsUrl, maxReconnectAttempts: -1 })
  world = new BackfillWorld(kc, NS, nc)
  await world.core.createNamespace({ body: { metadata: { name: NS } } })
  await waitUntil('the default ServiceAccount', async () =>
    (await world.core.listNamespacedServiceAccount({ namespace: NS })).items.some((s) => s.metadata?.name === 'default')
      ? true
      : undefined,
  )
  runner = await startRunner({ natsUrl: own.natsUrl, kubeconfig: kc, watch: true, namespaces: [NS] })
}, 180_000)

afterAll(async () => {
  world?.close()
  await runner?.stop().catch(() => {})
  await nc?.close()
  await own?.stop()
  for (const [k, v] of Object.entries(SAVED_ENV)) {
    if (v === undefined) delete process.env[k]
    else process.env[k] = v
  }
}, 60_000)

const running = async () =>
  (await world.jobs()).filter((j) => !j.metadata?.deletionTimestamp && !j.status?.conditions?.length)

it('NATS down: every running Job deleted within the bound through Kubernetes; NATS back: each resumes once', {
  timeout: 150_000,
}, async () => {
  await world.template('tpl')
  for (const name of BACKFILLS) {
    await world.model(`m-${name}`, { node: `node-${name}` })
    await world.backfill(name, { modelRef: `m-${name}`, templateRef: 'tpl', idleFor: `${IDLE_FOR_MS / 1_000}s` })
  }
  for (const name of BACKFILLS) await world.waitFor(name, 'Running', 'JobRunning')
  expect(await running()).toHaveLength(BACKFILLS.length)

  // Before the kill: killServer returns once it has seen the process gone, which can be a second later.
  const down = Date.now()
  await killServer(own, 'nats-server')
  await waitUntil(
    'every running Job to be deleted',
    async () => ((await running()).length === 0 ? true : undefined),
    DEADLINE_MS + 5_000,
    async () => JSON.stringify((await running()).map((j) => j.metadata?.name)),
  )
  const deletedAfter = Date.now() - down
  process.stderr.write(`[fail-safe] every running Job deleted ${deletedAfter} ms after nats-server was killed\n`)
  // The bound runs from the last probe that saw the path, up to a probe period (1 s) before the kill: not sooner
  // (a reconnect must not trip it), and within it plus a probe and the DELETEs.
  expect(deletedAfter).toBeGreaterThanOrEqual(BOUND_MS - 1_000)
  expect(deletedAfter).toBeLessThan(DEADLINE_MS)
  for (const name of BACKFILLS) {
    const b = await world.getBackfill(name)
    expect(b?.status, name).toMatchObject({ phase: 'Cancelling', reason: FAILSAFE_REASON })
    expect(b?.status?.message, name).toMatch(/NATS unreachable/)
    // The Warning Event is recorded after the DELETEs (functions/cancel/fail-safe.ts): it may follow them by a moment.
    await waitUntil(`${name}'s ${FAILSAFE_REASON} Event`, async () =>
      (await world.events(name)).some((e) => e.reason === FAILSAFE_REASON) ? true : undefined,
    )
  }
  const metrics = await runner.metrics.metrics()
  expect(metrics).toMatch(/^flexinfer_model_backfill_failsafe_engaged 1$/m)
  expect(metrics).toMatch(/^flexinfer_model_backfill_failsafe_cancellations_total 3$/m)
  expect(metrics).toMatch(/^flexinfer_model_backfill_nats_up 0$/m)
  // Held down: nothing runs, nothing starts within one period of each mechanism that could start an attempt (the
  // sweep's RESYNC_MS, a window's idleFor) and one fail-safe probe: a negative, so bounded by those periods.
  await new Promise((r) => setTimeout(r, Math.max(RESYNC_MS, IDLE_FOR_MS) + PROBE_EVERY_MS))
  expect(await running()).toEqual([])

  restartServer(own, 'nats-server')
  const up = Date.now()
  for (const name of BACKFILLS) {
    // A fresh full window (2 s) after the preemption is decided, then attempt 2 through the fence.
    const b = await world.waitForStatus(
      name,
      'attempt 2 running',
      (s) => s.phase === 'Running' && s.attempts === 2,
      60_000,
    )
    expect(b.status?.jobName, name).toMatch(new RegExp(`^${name}-2-`))
  }
  // No duplicate: one live Job per backfill, attempt 2's; the first attempt's preemption counted once, as `other`.
  const live = await running()
  expect(live.map((j) => j.metadata?.name).sort()).toEqual(
    BACKFILLS.map((name) => expect.stringMatching(new RegExp(`^${name}-2-`))),
  )
  for (const name of BACKFILLS) {
    const s = await world.state(name)
    expect(s?.counters, name).toMatchObject({ starts: 2, preemptions: { other: 1 } })
    expect(s?.attempts, name).toBe(2)
  }
  expect(await runner.metrics.metrics()).toMatch(/^flexinfer_model_backfill_failsafe_engaged 0$/m)
  process.stderr.write(`[fail-safe] every backfill Running its attempt 2 ${Date.now() - up} ms after the restart\n`)
  expect(Date.now() - up).toBeLessThan(60_000)
})

it('a cancel process started during the outage cancels through Kubernetes before it ever reaches NATS', {
  timeout: 120_000,
}, async () => {
  // The attempts of the test above are running; the whole system goes away, then NATS.
  expect(await running()).toHaveLength(BACKFILLS.length)
  await runner.stop()
  const down = Date.now()
  await killServer(own, 'nats-server')
  // A cancel process (re)started now waits for NATS before its function runs.
  const kc = new KubeConfig()
  kc.loadFromFile(own.kubeconfigPath)
  const starting = startRunner({ natsUrl: own.natsUrl, kubeconfig: kc, functions: ['cancel'], namespaces: [NS] })
  starting.catch(() => {})
  await waitUntil(
    'every running Job to be deleted by the waiting cancel process',
    async () => ((await running()).length === 0 ? true : undefined),
    DEADLINE_MS + 5_000,
    async () => JSON.stringify((await running()).map((j) => j.metadata?.name)),
  )
  const deletedAfter = Date.now() - down
  process.stderr.write(`[fail-safe] before NATS: every running Job deleted ${deletedAfter} ms after the kill\n`)
  expect(deletedAfter).toBeLessThan(DEADLINE_MS + 1_000)
  for (const name of BACKFILLS) {
    expect((await world.getBackfill(name))?.status, name).toMatchObject({ reason: FAILSAFE_REASON })
  }
  restartServer(own, 'nats-server')
  runner = await starting
})
