// demand acks in batches (AckAll up to the lowest unfinished request, pkg/transport/ack-floor.ts) and keeps its safety
// rule: a request is acked only after its idle write is stored. A demand process is killed (SIGKILL) while it drains
// a backlog; the oracle reads the stream, the consumer's ack floor and the idle bucket itself — every request at or
// below the floor must be covered by its model's stored idle time. A second process then drains the rest (what the
// first had not acked is delivered again) and every model's idle time is its newest request's. Malformed requests in
// the backlog are dead-lettered and do not hold the floor.
import { type ChildProcess, spawn } from 'node:child_process'
import { join } from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { startRunner } from '../../../cmd/manager/runner.js'
import {
  BUCKET_MODEL_IDLE,
  catalog,
  deadLetterSubject,
  STREAM_DEAD_LETTER,
  STREAM_FOREGROUND,
} from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { ensureBinaries } from '../../env/binaries.js'
import { waitFor } from '../../env/exec.js'
import { type OwnNats, startOwnNats } from './own-nats.js'

const SUBJECT = catalog['ai.flexinfer.foreground.request'].subject
const DURABLE = 'demand-foreground'
const EVENTS = 8_000
const MODELS = 100
const MALFORMED_EVERY = 2_000
const NS = 'batch'
let nats: OwnNats
let nc: NatsConnection
const children: ChildProcess[] = []

beforeAll(async () => {
  nats = await startOwnNats(ensureBinaries().natsServer)
  nc = await connect({ servers: nats.url })
}, 60_000)

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
  await nc?.close()
  await nats?.destroy()
})

/** A demand process; resolves once it pulls. Up to 3 tries: on the loaded machine a start has hit a 5 s deadline. */
async function startDemand(): Promise<ChildProcess> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startDemandOnce()
    } catch (err) {
      if (attempt >= 3) throw err
    }
  }
}

async function startDemandOnce(): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'demand-process.ts'), nats.url], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, DEMAND_ACK_POLICY: 'all' },
  })
  children.push(child)
  await new Promise<void>((resolve, reject) => {
    // Generous: on the shared 2-core machine a tsx process has taken over a minute to start.
    const timer = setTimeout(() => reject(new Error('demand process not ready within 150 s')), 150_000)
    let out = ''
    child.stdout?.on('data', (b: Buffer) => {
      out = (out + b.toString()).slice(-4096)
      if (out.includes('ready\n')) {
        clearTimeout(timer)
        resolve()
      }
    })
    child.once('exit', (code) => reject(new Error(`demand process exited ${code}`)))
  })
  return child
}

const killed = (child: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve()
    else child.once('exit', () => resolve())
  })

/** The stream as the oracle sees it: every request's sequence, model and store time (ms). */
async function readStream(last: number) {
  const consumer = await jetstream(nc).consumers.get(STREAM_FOREGROUND)
  const out = new Map<number, { model?: string; at: number }>()
  const deadline = Date.now() + 60_000
  while (out.size < last && Date.now() < deadline) {
    const batch = await consumer.fetch({ max_messages: 5_000, expires: 2_000 })
    for await (const m of batch) {
      let model: string | undefined
      try {
        model = (m.json() as { data: { model: string } }).data.model
      } catch {
        model = undefined // malformed
      }
      // Whole milliseconds from the exact nanoseconds (a bigint): info.timestampNanos is a float, which past 2^53
      // rounds some store times up to the next millisecond, a time no idle write could cover.
      out.set(m.seq, { model, at: Number(m.timestampNanos / 1_000_000n) })
    }
  }
  return out
}

async function idleTimes() {
  const kv = await new Kvm(nc).open(BUCKET_MODEL_IDLE)
  const out = new Map<string, number>()
  for (let i = 0; i < MODELS; i++) {
    const e = await kv.get(`${NS}.m-${i}`)
    if (e?.operation === 'PUT')
      out.set(`m-${i}`, Date.parse((e.json() as { lastForegroundAt: string }).lastForegroundAt))
  }
  return out
}

it('killed mid-batch: nothing acked whose idle write was not stored; a restart drains the rest', async () => {
  const jsm = await jetstreamManager(nc)
  // The consumer and buckets exist (a first process made them); the backlog accumulates while nothing consumes.
  const kc = new KubeConfig()
  kc.loadFromClusterAndUser({ name: 'none', server: 'https://127.0.0.1:1', skipTLSVerify: false }, { name: 'none' })
  await (await startRunner({ natsUrl: nats.url, kubeconfig: kc, functions: ['demand'] })).stop()
  const js = jetstream(nc)
  let last = 0
  for (let sent = 0; sent < EVENTS; ) {
    const batch = []
    for (let i = 0; i < 200 && sent < EVENTS; i++, sent++)
      batch.push(
        js.publish(
          SUBJECT,
          sent % MALFORMED_EVERY === 17
            ? 'not json'
            : encode('ai.flexinfer.foreground.request', { namespace: NS, model: `m-${sent % MODELS}` }),
          { timeout: 30_000 }, // a loaded machine answers slowly
        ),
      )
    for (const ack of await Promise.all(batch)) last = Math.max(last, ack.seq)
  }

  // Killed while draining: once the floor has moved, before it reaches the end.
  const victim = await startDemand()
  const deadline = Date.now() + 120_000
  let floor = 0
  while (Date.now() < deadline) {
    floor = (await jsm.consumers.info(STREAM_FOREGROUND, DURABLE)).ack_floor.stream_seq
    if (floor > 0) break
    await new Promise((r) => setTimeout(r, 10))
  }
  victim.kill('SIGKILL')
  await killed(victim)
  const afterKill = await jsm.consumers.info(STREAM_FOREGROUND, DURABLE)
  floor = afterKill.ack_floor.stream_seq
  expect(floor).toBeGreaterThan(0)
  expect(floor, 'killed before the end of the backlog').toBeLessThan(last)

  const stream = await readStream(last)
  expect(stream.size).toBe(last)
  let idle = await idleTimes()
  const uncovered: number[] = []
  for (const [seq, { model, at }] of stream) {
    if (seq > floor || !model) continue
    if (!((idle.get(model) ?? 0) >= at)) uncovered.push(seq)
  }
  expect(uncovered, 'acked requests whose idle write was not stored').toEqual([])

  // A fresh process: what the first did not ack is delivered again; the backlog drains to the end.
  const second = await startDemand()
  await waitFor(
    'backlog drained',
    async () => {
      const info = await jsm.consumers.info(STREAM_FOREGROUND, DURABLE)
      if (info.num_pending === 0 && info.num_ack_pending === 0 && info.ack_floor.stream_seq === last) return true
      // What the timeout reports: where the consumer stood when the wait gave up.
      throw new Error(
        `pending ${info.num_pending}, ack pending ${info.num_ack_pending}, redelivered ${info.num_redelivered}, ` +
          `waiting ${info.num_waiting}, floor ${info.ack_floor.stream_seq}, delivered ${info.delivered.stream_seq}, last ${last}, ` +
          `second ${second.exitCode ?? second.signalCode ?? 'running'}`,
      )
    },
    { timeoutMs: 120_000, intervalMs: 100 },
  )
  second.kill('SIGTERM')
  await killed(second)
  const newest = new Map<string, number>()
  for (const { model, at } of stream.values()) if (model) newest.set(model, Math.max(newest.get(model) ?? 0, at))
  idle = await idleTimes()
  for (const [model, at] of newest) expect(idle.get(model), model).toBe(at)
  // The malformed requests went to the dead-letter stream and did not hold the floor.
  const dead = await jsm.streams.info(STREAM_DEAD_LETTER, { subjects_filter: deadLetterSubject('demand') })
  expect(dead.state.subjects?.[deadLetterSubject('demand')]).toBeGreaterThanOrEqual(Math.ceil(EVENTS / MALFORMED_EVERY))
}, 300_000)
