// Poison messages on the JetStream transport, against the real nats-server: every hostile input ends in
// FLEXINFER_DEADLETTER with a specific, header-safe reason and the function keeps handling good events; an event
// that cannot even be dead-lettered stops at the consumer's delivery limit instead of cycling forever (enough of
// them filled max_ack_pending and stopped the consumer); a handler slower than ack_wait keeps its message.
import { randomBytes } from 'node:crypto'
import { Writable } from 'node:stream'
import { AckPolicy, jetstream } from '@nats-io/jetstream'
import type { Msg, Subscription } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { STREAM_EVENTS } from '../../../events/catalog.js'
import type { InboundEvent } from '../../../events/codec.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { DEAD_LETTER_REASON, DEAD_LETTER_TRUNCATED } from '../../../pkg/jetstream/dead-letter-headers.js'
import { consumerName } from '../../../pkg/jetstream/names.js'
import { Kube } from '../../../pkg/kube/client.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { CONSUMER_MAX_DELIVER, ensureConsumers } from '../../../pkg/transport/consumers.js'
import type { Deps, EventFunction } from '../../../pkg/transport/function.js'
import {
  type JetStreamOptions,
  type RunningFunction,
  runOnJetStream,
} from '../../../pkg/transport/jetstream-adapter.js'
import { sleep, waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { HEADER_SAFE, hostileInputs } from './hostile.js'
import { configMapEvent } from './scratch-functions.js'

const env = useTestEnv()
const rand = () => randomBytes(4).toString('hex')

let logLines = ''
const capture = new Writable({
  write(chunk, _enc, done) {
    logLines += chunk.toString()
    done()
  },
})

let bus: Bus
let kube: Kube
const running: RunningFunction[] = []
const consumers: string[] = []
const subscriptions: Subscription[] = []

beforeAll(async () => {
  bus = await Bus.open(env.nc)
  kube = new Kube(env.kc)
})
afterAll(async () => {
  for (const r of running) await r.stop()
  for (const name of consumers) await bus.jsm.consumers.delete(STREAM_EVENTS, name).catch(() => {})
  for (const s of subscriptions) s.unsubscribe()
  kube?.close()
})

/** Waits until the probe's consumer has every message up to stream sequence `seq` acknowledged (or terminated). */
async function ackFloorAt(probe: string, seq: number) {
  await waitFor(
    `${probe}'s ack floor at ${seq}`,
    async () =>
      (await bus.jsm.consumers.info(STREAM_EVENTS, consumerName(probe, STREAM_EVENTS))).ack_floor.stream_seq >= seq,
    { timeoutMs: 10_000 },
  )
}

/** A probe function on a subject of its own (ApiServerSource-shaped events are the only ones it handles). */
async function startProbe(
  handle: (event: InboundEvent) => Promise<void>,
  options: { bus?: Bus } & JetStreamOptions = {},
) {
  const name = `poison-${rand()}`
  const base = `flexinfer.events.k8s.${name}`
  const fn: EventFunction = {
    name,
    subscriptions: [{ stream: STREAM_EVENTS, subjects: [`${base}.>`], deliverNew: true }],
    concurrency: 8,
    handle,
  }
  const log = createLogger('poison-test', capture)
  const deps: Deps = { kube, bus: options.bus ?? bus, log, now: Date.now }
  consumers.push(consumerName(name, STREAM_EVENTS))
  const fnRunning = await runOnJetStream(deps, fn, options)
  running.push(fnRunning)
  const dead: Msg[] = []
  subscriptions.push(
    env.nc.subscribe(`flexinfer.deadletter.${name}`, {
      callback: (_e, m) => {
        dead.push(m)
      },
    }),
  )
  await env.nc.flush()
  return { name, base, running: fnRunning, dead }
}

const good = (name: string) => configMapEvent(name, env.namespace)

it('every hostile event ends in the dead-letter stream with a clean reason; good events are still handled', async () => {
  const handled: string[] = []
  const probe = await startProbe(async (event) => {
    handled.push((event.data as { metadata: { name: string } }).metadata.name)
  })
  const js = jetstream(env.nc)
  const maxBytes = (env.nc.info?.max_payload ?? 1024 * 1024) - 1024
  const hostile = hostileInputs(env.namespace, maxBytes)
  await js.publish(`${probe.base}.good`, good('before'))
  for (const h of hostile) await js.publish(`${probe.base}.${h.name}`, h.body)
  await js.publish(`${probe.base}.good`, good('after'))

  // Both sides of each dead letter: stored in the stream, and the original terminated (counted after the store).
  await waitFor(
    'every hostile event dead-lettered',
    async () => probe.dead.length >= hostile.length && probe.running.stats.deadLettered >= hostile.length,
    { timeoutMs: 20_000 },
  )
  for (const h of hostile) {
    const letter = probe.dead.find((m) => m.headers?.get('Flexinfer-Original-Subject') === `${probe.base}.${h.name}`)
    expect(letter, h.name).toBeDefined()
    const reason = letter?.headers?.get(DEAD_LETTER_REASON) ?? ''
    expect(reason, h.name).toMatch(HEADER_SAFE)
    expect(reason, h.name).toMatch(h.reason)
  }
  // CR/LF kept readable (escaped), never interpreted as a header break.
  const crlf = probe.dead.find((m) => m.headers?.get('Flexinfer-Original-Subject')?.endsWith('.crlf-type'))
  expect(crlf?.headers?.get(DEAD_LETTER_REASON)).toContain('evil\\r\\nX-Injected: 1')
  expect(crlf?.headers?.get('X-Injected')).toBe('')
  // The near-1 MiB body is kept truncated, with its real size.
  const huge = probe.dead.find((m) => m.headers?.get('Flexinfer-Original-Subject')?.endsWith('.huge'))
  expect(Number(huge?.headers?.get(DEAD_LETTER_TRUNCATED))).toBe(maxBytes)
  expect(huge?.data.byteLength).toBeLessThanOrEqual(64 * 1024)

  await waitFor('good events handled', async () => handled.includes('after'), { timeoutMs: 10_000 })
  expect(handled).toEqual(['before', 'after'])
  expect(probe.running.stats).toMatchObject({ handled: 2, deadLettered: hostile.length, dropped: 0 })
  const info = await bus.jsm.consumers.info(STREAM_EVENTS, consumerName(probe.name, STREAM_EVENTS))
  expect(info.num_ack_pending).toBe(0)
  expect(info.num_pending).toBe(0)
  expect(info.config.max_deliver).toBe(CONSUMER_MAX_DELIVER)
})

it('an event that can never be dead-lettered stops at the delivery limit, logged with where it is', async () => {
  // The dead-letter stream refusing every publish (full, or a NATS user without the right).
  class RefusingBus extends Bus {
    override async deadLetter(): Promise<void> {
      throw new Error('dead-letter stream unavailable')
    }
  }
  const refusing = new RefusingBus(bus.nc, bus.jsm, bus.kv)
  const handled: string[] = []
  const probe = await startProbe(
    async (event) => {
      handled.push((event.data as { metadata: { name: string } }).metadata.name)
    },
    { bus: refusing, deadLetterRetryMs: 50 },
  )
  const js = jetstream(env.nc)
  const poison = await js.publish(`${probe.base}.poison`, 'not json\r\n')
  await waitFor('the poison event given up', async () => probe.running.stats.dropped === 1, { timeoutMs: 15_000 })
  const after = await js.publish(`${probe.base}.good`, good('after-poison'))
  await waitFor('a good event handled', async () => handled.includes('after-poison'), { timeoutMs: 10_000 })
  // Not redelivered again: nothing pending, delivered exactly up to the limit — once the server has taken the
  // poison's term and the good event's ack (its ack floor past both), nothing of them can be redelivered.
  await ackFloorAt(probe.name, after.seq)
  const info = await bus.jsm.consumers.info(STREAM_EVENTS, consumerName(probe.name, STREAM_EVENTS))
  expect(info.num_ack_pending).toBe(0)
  expect(info.num_redelivered).toBe(0)
  expect(probe.running.stats.dropped).toBe(1)
  const given = logLines
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .find((l) => /given up/.test(l.msg) && l.subject === `${probe.base}.poison`)
  expect(given).toMatchObject({ seq: poison.seq, stream: STREAM_EVENTS, delivery: CONSUMER_MAX_DELIVER })
  expect(given.err.message).toMatch(/dead-letter stream unavailable/)
})

it('a handler slower than ack_wait keeps its message: not redelivered to a second worker', async () => {
  const starts: string[] = []
  const finished: string[] = []
  const probe = await startProbe(
    async (event) => {
      const name = (event.data as { metadata: { name: string } }).metadata.name
      starts.push(name)
      // Time is the subject: a handler slower than ack_wait (2 s).
      if (name === 'slow') await sleep(5_000)
      finished.push(name)
    },
    { ackWaitMs: 2_000 },
  )
  const info = await bus.jsm.consumers.info(STREAM_EVENTS, consumerName(probe.name, STREAM_EVENTS))
  expect(info.config.ack_wait).toBe(2_000_000_000)
  const js = jetstream(env.nc)
  const slow = await js.publish(`${probe.base}.slow`, good('slow'))
  const fast = await js.publish(`${probe.base}.fast`, good('fast'))
  await waitFor('the slow handler done', async () => finished.includes('slow'), { timeoutMs: 10_000 })
  // Both acked at the server (its ack floor past both): a redelivery of either can no longer come.
  await ackFloorAt(probe.name, Math.max(slow.seq, fast.seq))
  expect(starts.filter((n) => n === 'slow')).toHaveLength(1)
  expect(finished).toEqual(['fast', 'slow'])
  const after = await bus.jsm.consumers.info(STREAM_EVENTS, consumerName(probe.name, STREAM_EVENTS))
  expect(after.num_ack_pending).toBe(0)
  expect(after.num_redelivered).toBe(0)
})

it('a consumer made before the delivery limit existed gets it when the topology is ensured again', async () => {
  const name = `poison-old-${rand()}`
  const durable = consumerName(name, STREAM_EVENTS)
  consumers.push(durable)
  const subjects = [`flexinfer.events.k8s.${name}.>`]
  await bus.jsm.consumers.add(STREAM_EVENTS, {
    durable_name: durable,
    ack_policy: AckPolicy.Explicit,
    filter_subjects: subjects,
  })
  expect((await bus.jsm.consumers.info(STREAM_EVENTS, durable)).config.max_deliver).toBe(-1)
  await ensureConsumers(
    { bus },
    { name, subscriptions: [{ stream: STREAM_EVENTS, subjects }], concurrency: 1, handle: async () => {} },
  )
  expect((await bus.jsm.consumers.info(STREAM_EVENTS, durable)).config.max_deliver).toBe(CONSUMER_MAX_DELIVER)
})
