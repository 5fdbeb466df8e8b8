// The JetStream → Broker bridge against the real nats-server and a fastify sink standing in for the Broker:
// what the Broker-served functions take (a model.ready, a backfill.admit, a fired timer) arrives as a structured
// CloudEvent with the same id and data, and what the preemption path pulls itself (foreground and cancel requests)
// never does; a 503 is retried until the sink takes it; a 400 is dead-lettered with the status and the answer. The
// bridge runs on durable consumers of its own (instance-scoped, this namespace).

import { createForegroundEmitter } from '@flexinfer/gateway-emitter'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { STREAM_DEAD_LETTER, STREAM_EVENTS, STREAM_TIMERS } from '../../../events/catalog.js'
import { decode, type InboundEvent } from '../../../events/codec.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { DEAD_LETTER_REASON } from '../../../pkg/jetstream/dead-letter-headers.js'
import { type RunningBridge, startBridge } from '../../../pkg/transport/bridge.js'
import { useTestEnv } from '../../env/fixture.js'
import { handledAll, waitUntil } from '../support/backfill-world.js'
import { testInstance } from '../support/runner.js'

const env = useTestEnv()
const instance = testInstance()

interface Arrival {
  contentType: string | undefined
  body: string
  event: InboundEvent
}
const arrivals: Arrival[] = []
/** How often the sink has seen each event id (the 503-then-200 case answers by it). */
const seen = new Map<string, number>()

let sink: FastifyInstance
let bridge: RunningBridge
let bus: Bus

const backfillOf = (e: InboundEvent) => (e.data as { backfill?: string }).backfill

beforeAll(async () => {
  sink = Fastify({ logger: false })
  sink.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => done(null, body))
  sink.post('/', async (req, reply) => {
    const body = String(req.body)
    const decoded = decode(body)
    if (!decoded.ok) return reply.code(500).send({ error: decoded.reason })
    const event = decoded.event
    const n = (seen.get(event.id) ?? 0) + 1
    seen.set(event.id, n)
    arrivals.push({ contentType: req.headers['content-type'], body, event })
    if (backfillOf(event) === 'flaky-bf' && n === 1) return reply.code(503).send({ error: 'warming up' })
    if (backfillOf(event) === 'rejected-bf') return reply.code(400).send({ error: 'type not accepted by this broker' })
    return reply.code(202).send()
  })
  const sinkUrl = await sink.listen({ port: 0, host: '127.0.0.1' })
  bus = await Bus.open(env.nc)
  bridge = await startBridge({
    natsUrl: env.natsUrl,
    kubeconfig: env.kc,
    sink: sinkUrl,
    instance,
    namespaces: [env.namespace],
    concurrency: 8,
  })
})

afterAll(async () => {
  await bridge?.stop()
  await sink?.close()
})

const arrived = (pred: (e: InboundEvent) => boolean, count = 1) =>
  waitUntil(
    'events at the sink',
    async () => {
      const got = arrivals.filter((a) => pred(a.event))
      return got.length >= count ? got : undefined
    },
    15_000,
    async () => JSON.stringify(arrivals.map((a) => a.event.type)),
  )

/** The event exactly as JetStream stored it. */
async function stored(stream: string, query: { seq: number } | { last_by_subj: string }): Promise<InboundEvent> {
  const msg = await bus.jsm.streams.getMessage(stream, query)
  const d = decode(msg?.data ?? '')
  if (!d.ok) throw new Error(d.reason)
  return d.event
}

const admitRequest = (backfill: string) =>
  bus.publish('ai.flexinfer.backfill.admit', { namespace: env.namespace, backfill })

it('forwards a model.ready, a backfill.admit and a fired timer as structured CloudEvents, unchanged', async () => {
  const ready = await bus.publish('ai.flexinfer.model.ready', {
    namespace: env.namespace,
    model: 'bridged-model',
    ready: true,
    deleted: false,
  })
  const ack = await admitRequest('bridged-bf')
  await bus.armTimer(env.namespace, 'bridged-timer', new Date(Date.now() + 1000).toISOString())

  const [mr] = await arrived((e) => e.type === 'ai.flexinfer.model.ready')
  const [ad] = await arrived((e) => backfillOf(e) === 'bridged-bf')
  const [tm] = await arrived((e) => e.type === 'ai.flexinfer.timer.fired')

  const readyStored = await stored(STREAM_EVENTS, { seq: ready.seq })
  const admitStored = await stored(STREAM_EVENTS, { seq: ack.seq })
  const timerStored = await stored(STREAM_TIMERS, {
    last_by_subj: `flexinfer.events.timer.${env.namespace}.bridged-timer`,
  })
  for (const [got, want] of [
    [mr, readyStored],
    [ad, admitStored],
    [tm, timerStored],
  ] as const) {
    expect(got?.contentType).toBe('application/cloudevents+json')
    expect(JSON.parse(got?.body ?? '{}').specversion).toBe('1.0')
    expect(got?.event).toEqual(want)
  }
  expect(tm?.event.data).toMatchObject({ namespace: env.namespace, backfill: 'bridged-timer' })
  // Each arrived once (acked after the 2xx).
  for (const a of [mr, ad, tm]) expect(seen.get(a?.event.id ?? '')).toBe(1)
})

it('never forwards what the preemption path pulls itself: foreground requests and cancel requests', async () => {
  await createForegroundEmitter(env.nc).emit({ namespace: env.namespace, model: 'not-bridged' })
  await bus.publish('ai.flexinfer.backfill.cancel', {
    namespace: env.namespace,
    backfill: 'not-bridged',
    jobName: 'not-bridged-1',
    reason: 'ForegroundDemand',
    at: new Date().toISOString(),
  })
  // Published after them on the same stream: once it has arrived, the bridge has passed them by.
  await admitRequest('after-the-preemption-path')
  await arrived((e) => backfillOf(e) === 'after-the-preemption-path')
  const types = new Set(arrivals.map((a) => a.event.type))
  expect(types.has('ai.flexinfer.foreground.request')).toBe(false)
  expect(types.has('ai.flexinfer.backfill.cancel')).toBe(false)
})

it('a 503 from the sink is retried: the event arrives again and is acked once taken', async () => {
  const retriedBefore = bridge.running.stats.retried
  await admitRequest('flaky-bf')
  const [first, second] = await arrived((e) => backfillOf(e) === 'flaky-bf', 2)
  expect(second?.event).toEqual(first?.event)
  expect(bridge.running.stats.retried).toBeGreaterThan(retriedBefore)
  // Taken on the second delivery: no third. Once the bridge has every event it was sent acknowledged at the
  // server, none can be delivered again.
  await handledAll({ deps: bridge.deps, functions: [bridge.running] })
  expect(arrivals.filter((a) => backfillOf(a.event) === 'flaky-bf')).toHaveLength(2)
})

it('a 400 from the sink dead-letters the event with the status and the answer, never retried', async () => {
  const ack = await admitRequest('rejected-bf')
  const original = await stored(STREAM_EVENTS, { seq: ack.seq })
  const subject = `flexinfer.deadletter.bridge-${instance}`
  // The newest dead letter on the bridge's subject may still be an earlier test's until this one's is stored.
  const dead = await waitUntil('the dead letter', async () =>
    bus.jsm.streams
      .getMessage(STREAM_DEAD_LETTER, { last_by_subj: subject })
      .then((m) => {
        const kept = m ? decode(m.data) : undefined
        return kept?.ok && kept.event.id === original.id ? m : undefined
      })
      .catch(() => undefined),
  )
  const reason = dead?.header.get(DEAD_LETTER_REASON) ?? ''
  expect(reason).toContain('sink answered 400')
  expect(reason).toContain('type not accepted by this broker')
  expect(dead?.header.get('Flexinfer-Original-Subject')).toBe('flexinfer.events.backfill.admit')
  const kept = decode(dead?.data ?? '')
  expect(kept.ok && kept.event).toEqual(original)
  // Dead-lettered and terminated: once the server has it (nothing unacknowledged left), it cannot come again.
  await handledAll({ deps: bridge.deps, functions: [bridge.running] })
  expect(seen.get(original.id)).toBe(1)
})
