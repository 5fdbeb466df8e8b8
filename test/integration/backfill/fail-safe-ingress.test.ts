// Fail safe when the gateway ingress cannot publish: gateways that POST their foreground requests reach the
// preemption path only through the ingress, so an ingress cut off from NATS makes foreground demand invisible even
// though cancel reaches NATS fine. On the real servers: the ingress's NATS connection goes through a TCP relay the
// test cuts (the network between the ingress and NATS, nothing else); cancel's goes straight to nats-server. Cut:
// every running Job is deleted within the bound, the gateway's POST is answered 503, the ingress's /readyz says why
// and its metric is 0. Restored: every backfill resumes through the normal gates, once.
import { randomUUID } from 'node:crypto'
import net from 'node:net'
import { jetstreamManager } from '@nats-io/jetstream'
import { afterAll, beforeAll, expect, it, vi } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { foregroundSubject, STREAM_FOREGROUND_LAST } from '../../../events/catalog.js'
import { PROBE_EVERY_MS } from '../../../functions/cancel/fail-safe.js'
import { INGRESS_TYPES, ingressFunction } from '../../../functions/ingress/index.js'
import { FAILSAFE_REASON } from '../../../pkg/core/fail-safe.js'
import { type HttpFunction, startHttpFunction } from '../../../pkg/transport/http-adapter.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

// A 2 s bound and a sweep every 2 s, read when cancel starts (after the ingress, whose URL it needs).
const SAVED_ENV = vi.hoisted(() => {
  const keys = ['FAILSAFE_BLIND_MS', 'RESYNC_MS', 'INGRESS_READY_URL']
  const saved = Object.fromEntries(keys.map((k) => [k, process.env[k]]))
  Object.assign(process.env, { FAILSAFE_BLIND_MS: '2000', RESYNC_MS: '2000' })
  return saved
})
const BOUND_MS = 2_000
/** RESYNC_MS above: the sweep's period. */
const RESYNC_MS = 2_000
/** Each backfill's idleFor: its timer's period. */
const IDLE_FOR_MS = 2_000
/** The bound, the ingress's probe (1 s), cancel's probe period (1 s) and the DELETEs' round trips. */
const DEADLINE_MS = BOUND_MS + 3_000
const TOKEN = `ingress-${randomUUID()}`

/** A TCP relay to nats-server that the test can cut (existing connections reset, new ones refused) and restore. */
class Relay {
  private server: net.Server | undefined
  private readonly sockets = new Set<net.Socket>()
  port = 0
  constructor(private readonly target: { host: string; port: number }) {}

  async listen() {
    const server = net.createServer((client) => {
      const upstream = net.connect(this.target)
      for (const s of [client, upstream]) {
        this.sockets.add(s)
        s.on('close', () => this.sockets.delete(s))
        s.on('error', () => {})
      }
      client.pipe(upstream).pipe(client)
      client.on('close', () => upstream.destroy())
      upstream.on('close', () => client.destroy())
    })
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen({ host: '127.0.0.1', port: this.port }, () => resolve())
    })
    this.port = (server.address() as net.AddressInfo).port
    this.server = server
  }

  async cut() {
    const server = this.server
    this.server = undefined
    for (const s of this.sockets) s.destroy()
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()))
  }
}

const env = useTestEnv()
const BACKFILLS = ['a', 'b']
let relay: Relay
let ingress: HttpFunction
let runner: Runner
let world: BackfillWorld

beforeAll(async () => {
  const nats = new URL(env.natsUrl.split(',')[0] as string)
  relay = new Relay({ host: nats.hostname, port: Number(nats.port) })
  await relay.listen()
  ingress = await startHttpFunction(ingressFunction(), {
    natsUrl: `nats://127.0.0.1:${relay.port}`,
    port: 0,
    token: TOKEN,
    acceptTypes: INGRESS_TYPES,
  })
  process.env.INGRESS_READY_URL = `${ingress.url}/readyz`
  runner = await startTestRunner(env)
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
}, 120_000)

afterAll(async () => {
  world?.close()
  await runner?.stop().catch(() => {})
  await ingress?.stop().catch(() => {})
  await relay?.cut()
  for (const [k, v] of Object.entries(SAVED_ENV)) {
    if (v === undefined) delete process.env[k]
    else process.env[k] = v
  }
}, 60_000)

const running = async () =>
  (await world.jobs()).filter((j) => !j.metadata?.deletionTimestamp && !j.status?.conditions?.length)

/** A gateway's POST of one foreground request. */
const post = (model: string) =>
  fetch(`${ingress.url}/`, {
    method: 'POST',
    headers: { 'content-type': 'application/cloudevents+json', authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({
      specversion: '1.0',
      id: randomUUID(),
      source: 'test/gateway',
      type: 'ai.flexinfer.foreground.request',
      time: new Date().toISOString(),
      data: { namespace: env.namespace, model },
    }),
    signal: AbortSignal.timeout(15_000),
  })

it('ingress cut off from NATS: every running Job deleted within the bound; ingress back: each resumes once', {
  timeout: 150_000,
}, async () => {
  expect((await fetch(`${ingress.url}/readyz`)).status).toBe(200)
  expect(await (await fetch(`${ingress.url}/metrics`)).text()).toMatch(
    /^flexinfer_model_backfill_ingress_publishing 1$/m,
  )
  await world.template('tpl')
  for (const name of BACKFILLS) {
    await world.model(`m-${name}`, { node: `node-${name}` })
    await world.backfill(name, { modelRef: `m-${name}`, templateRef: 'tpl', idleFor: `${IDLE_FOR_MS / 1_000}s` })
  }
  for (const name of BACKFILLS) await world.waitFor(name, 'Running', 'JobRunning')
  expect(await running()).toHaveLength(BACKFILLS.length)

  const cut = Date.now()
  await relay.cut()
  // A gateway's request now is refused, so the gateway retries (and alerts) rather than believing it delivered.
  const refused = post('m-a')
  await waitUntil(
    'every running Job to be deleted',
    async () => ((await running()).length === 0 ? true : undefined),
    DEADLINE_MS + 5_000,
    async () => JSON.stringify((await running()).map((j) => j.metadata?.name)),
  )
  const deletedAfter = Date.now() - cut
  process.stderr.write(`[fail-safe ingress] every running Job deleted ${deletedAfter} ms after the cut\n`)
  expect((await refused).status).toBe(503)
  // Once the ingress knows, at once.
  const t0 = Date.now()
  expect((await post('m-b')).status).toBe(503)
  expect(Date.now() - t0).toBeLessThan(1_000)
  expect(deletedAfter).toBeGreaterThanOrEqual(BOUND_MS - 1_000)
  expect(deletedAfter).toBeLessThan(DEADLINE_MS)
  for (const name of BACKFILLS) {
    // cancel reaches NATS: the preemption is recorded at once, and the backfill waits, admission closed.
    const events = (await world.events(name)).filter((e) => e.reason === FAILSAFE_REASON)
    expect(events.map((e) => e.message).join('\n'), name).toMatch(/gateway ingress cannot publish/)
    const b = await world.waitForStatus(name, 'admission held back', (s) => /gateway ingress/.test(s.message ?? ''))
    expect(b.status?.phase, name).toBe('WaitingForIdle')
  }
  const readyz = await fetch(`${ingress.url}/readyz`)
  expect(readyz.status).toBe(503)
  expect(((await readyz.json()) as { why: string }).why).toMatch(/cannot publish foreground requests/)
  expect(await (await fetch(`${ingress.url}/metrics`)).text()).toMatch(
    /^flexinfer_model_backfill_ingress_publishing 0$/m,
  )
  const metrics = await runner.metrics.metrics()
  expect(metrics).toMatch(/^flexinfer_model_backfill_failsafe_engaged 1$/m)
  // cancel's own NATS is fine all along: it is the ingress that is blind.
  expect(metrics).toMatch(/^flexinfer_model_backfill_nats_up 1$/m)
  // Held blind: nothing starts within one period of each mechanism that could start an attempt (the sweep's
  // RESYNC_MS, a window's idleFor) and one fail-safe probe: a negative, so bounded by those periods.
  await new Promise((r) => setTimeout(r, Math.max(RESYNC_MS, IDLE_FOR_MS) + PROBE_EVERY_MS))
  expect(await running()).toEqual([])

  await relay.listen()
  const back = Date.now()
  await waitUntil('the ingress to publish again', async () =>
    (await fetch(`${ingress.url}/readyz`)).status === 200 ? true : undefined,
  )
  for (const name of BACKFILLS) {
    const b = await world.waitForStatus(
      name,
      'attempt 2 running',
      (s) => s.phase === 'Running' && s.attempts === 2,
      60_000,
    )
    expect(b.status?.jobName, name).toMatch(new RegExp(`^${name}-2-`))
  }
  expect((await running()).map((j) => j.metadata?.name).sort()).toEqual(
    BACKFILLS.map((name) => expect.stringMatching(new RegExp(`^${name}-2-`))),
  )
  for (const name of BACKFILLS) {
    expect((await world.state(name))?.counters, name).toMatchObject({ starts: 2, preemptions: { other: 1 } })
  }
  // The gauge is the fail-safe's, set by its next probe (one a second) after the path is back; the admissions above
  // run on their own fence and may come first.
  await waitUntil(
    'the fail-safe to disengage',
    async () =>
      /^flexinfer_model_backfill_failsafe_engaged 0$/m.test(await runner.metrics.metrics()) ? true : undefined,
    10_000,
  )
  // The ingress's publish probe, refused by the stream once a second all along, stored nothing demand could read.
  const probe = await jetstreamManager(env.nc).then((jsm) =>
    jsm.streams.getMessage(STREAM_FOREGROUND_LAST, { last_by_subj: foregroundSubject('_probe', '_ingress') }),
  )
  expect(probe).toBeNull()
  process.stderr.write(`[fail-safe ingress] every backfill Running its attempt 2 ${Date.now() - back} ms after\n`)
})
