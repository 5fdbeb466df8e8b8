// The gateway side: the emitter survives a 30 s NATS outage under load. A backfill Job runs; nats-server
// (one of this file's own, so the shared one never goes down under other files) is stopped for 30 s while a
// gateway keeps emitting; every emit() returns in bounded time, the buffer keeps the newest request per model
// (older ones coalesced, the least recently requested dropped beyond its bound — both counted), and after the
// restart the buffered request and the first one after recovery still cancel the running Job.

import { type EmitOutcome, openForegroundEmitter } from '@flexinfer/gateway-emitter'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { Registry } from 'prom-client'
import { afterAll, beforeAll, expect, it, vi } from 'vitest'
import { type Runner, startRunner } from '../../../cmd/manager/runner.js'
import { jobName } from '../../../pkg/core/names.js'
import { sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { testInstance } from '../support/runner.js'
import { type OwnNats, startOwnNats } from './own-nats.js'

// This file proves the emitter's buffering by the Job its buffered request cancels after the restart. The fail-safe
// would delete that Job 5 s into the outage (test/integration/backfill/fail-safe.test.ts proves that): here its bound
// is past the outage. Read when cancel starts: set before it.
vi.hoisted(() => {
  process.env.FAILSAFE_BLIND_MS = '120000'
})

const env = useTestEnv()
let nats: OwnNats
let nc: NatsConnection
let runner: Runner
let world: BackfillWorld

const OUTAGE_MS = 30_000
const MAX_BUFFERED = 16

beforeAll(async () => {
  nats = await startOwnNats(env.binaries.natsServer as string)
  nc = await connect({ servers: nats.url, maxReconnectAttempts: -1 })
  runner = await startRunner({
    natsUrl: nats.url,
    kubeconfig: env.kc,
    watch: true,
    namespaces: [env.namespace],
    instance: testInstance(),
  })
  world = new BackfillWorld(env.kc, env.namespace, nc)
})
afterAll(async () => {
  world?.close()
  await runner?.stop().catch(() => {})
  await nc?.close().catch(() => {})
  await nats?.destroy()
}, 60_000)

it('a 30 s NATS outage under emitter load: bounded emits, newest request per model kept, the Job still cancelled', {
  timeout: 150_000,
}, async () => {
  const n = await world.declare('outage')
  await world.waitFor(n.backfill, 'Running', 'JobRunning', 45_000)
  const job = jobName(n.backfill, 1)

  const registry = new Registry()
  const dropped: string[] = []
  const emitter = openForegroundEmitter(nats.url, {
    registry,
    maxBuffered: MAX_BUFFERED,
    source: 'outage-test',
    onDrop: (r) => dropped.push(r.model),
  })
  await waitUntil('the emitter to connect', async () => (emitter.connected ? true : undefined))

  await nats.stop()
  const down = Date.now()
  const outcomes: Record<string, number> = {}
  let slowest = 0
  // A gateway under load for the whole outage: most requests for 8 hot models, one in ten for one of 240 cold
  // ones (more models than the buffer holds); the model whose backfill runs is requested at i = 2000 and again
  // during the last 2 s.
  for (let i = 0; i < 6000 && Date.now() - down < OUTAGE_MS; i++) {
    const started = Date.now()
    const model =
      i === 2000 || Date.now() - down > OUTAGE_MS - 2000 ? n.model : i % 10 === 0 ? `cold-${i % 240}` : `hot-${i % 8}`
    const outcome: EmitOutcome = await emitter.emit({ namespace: env.namespace, model })
    slowest = Math.max(slowest, Date.now() - started)
    outcomes[outcome] = (outcomes[outcome] ?? 0) + 1
    await sleep(5)
  }
  expect(outcomes.buffered).toBeGreaterThan(100)
  expect(slowest).toBeLessThan(3000)
  expect(emitter.stats.pending).toBe(MAX_BUFFERED)
  expect(emitter.stats.coalesced).toBeGreaterThan(100)
  expect(emitter.stats.dropped).toBeGreaterThan(0)
  // The model requested last is never the one dropped.
  expect(dropped.at(-1)).not.toBe(n.model)
  expect(await world.job(job)).not.toBeNull()

  await nats.start()
  const up = Date.now()
  // The first request after recovery: published (once reconnected) or buffered and flushed with the rest.
  const after = await emitter.emit({ namespace: env.namespace, model: n.model })
  expect(['published', 'buffered']).toContain(after)
  await waitUntil(
    `Job ${job} to be deleted after NATS came back`,
    async () => {
      const j = await world.job(job)
      return j === null || j.metadata?.deletionTimestamp ? true : undefined
    },
    45_000,
  )
  const cancelledAfterMs = Date.now() - up
  // Recorded as a foreground preemption. Not read from status.reason: cancel deletes the Job's pods with it, so the
  // Job is often gone before the bookkeeping runs, and the status goes Running → WaitingForIdle with no Cancelling
  // in between (decide's preempted(): the counter and the Event carry the reason).
  const preemptions = await waitUntil(
    'the preemption to be recorded',
    async () => {
      const counted = (await world.state(n.backfill))?.counters.preemptions
      return counted && Object.keys(counted).length > 0 ? counted : undefined
    },
    30_000,
  )
  expect(preemptions).toEqual({ foreground: 1 })
  expect(await world.events(n.backfill)).toContainEqual({
    type: 'Normal',
    reason: 'BackfillCancelled',
    message: `Cancelled Job ${job}: ForegroundDemand`,
  })
  await waitUntil('the buffer to be flushed', async () => (emitter.stats.pending === 0 ? true : undefined), 20_000)
  expect(emitter.stats.flushed).toBeGreaterThanOrEqual(MAX_BUFFERED)
  expect(await emitter.emit({ namespace: env.namespace, model: 'hot-0' })).toBe('published')

  const metrics = await registry.metrics()
  expect(metrics).toMatch(/flexinfer_gateway_emitter_dropped_total\{reason="overflow"\} [1-9]/)
  expect(metrics).toMatch(/flexinfer_gateway_emitter_coalesced_total [1-9]/)
  expect(metrics).toMatch(/flexinfer_gateway_emitter_buffered_models 0/)
  await emitter.close()
  process.stderr.write(
    `[emitter-outage] outage ${Math.round((up - down) / 1000)} s, emits ${JSON.stringify(outcomes)}, slowest emit ${slowest} ms, ` +
      `job deleting ${cancelledAfterMs} ms after restart, stats ${JSON.stringify(emitter.stats)}\n`,
  )
})
