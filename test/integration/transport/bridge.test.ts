// The JetStream → Broker bridge against the real nats-server and a fastify sink standing in for the Broker:
// what the functions and the gateway publish (a foreground request, a backfill.cancel, a fired timer) arrives as a
// structured CloudEvent with the same id and data; a 503 is retried until the sink takes it; a 400 is dead-lettered
// with the status and the answer. The bridge runs on durable consumers of its own (instance-scoped, this namespace).
import type { Msg, Subscription } from '@nats-io/transport-node'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { STREAM_DEAD_LETTER, STREAM_EVENTS, STREAM_TIMERS } from '../../../events/catalog.js'
import { decode, type InboundEvent } from '../../../events/codec.js'
import { createForegroundEmitter } from '../../../events/emitter.js'
import { type RunningBridge, startBridge } from '../../../runtime/bridge.js'
import { Bus, DEAD_LETTER_REASON } from '../../../runtime/nats.js'
import { useTestEnv } from '../../env/fixture.js'
import { waitUntil } from '../support/backfill-world.js'
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
let foreground: Subscription
const published: InboundEvent[] = []

const jobOf = (e: InboundEvent) => (e.data as { jobName?: string }).jobName

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
    if (jobOf(event) === 'flaky-job' && n === 1) return reply.code(503).send({ error: 'warming up' })
    if (jobOf(event) === 'rejected-job') return reply.code(400).send({ error: 'type not accepted by this broker' })
    return reply.code(202).send()
  })
  const sinkUrl = await sink.listen({ port: 0, host: '127.0.0.1' })
  bus = await Bus.open(env.nc)
  // What the gateway publishes, as published (its id is random): read off the subject.
  foreground = env.nc.subscribe('flexinfer.events.foreground.request', {
    callback: (_err, msg: Msg) => {
      const d = decode(msg.data)
      if (d.ok && (d.event.data as { namespace?: string }).namespace === env.namespace) published.push(d.event)
    },
  })
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
  foreground?.unsubscribe()
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

const cancel = (jobName: string) =>
  bus.publish('ai.flexinfer.backfill.cancel', {
    namespace: env.namespace,
    backfill: 'bf',
    jobName,
    reason: 'foreground',
    at: new Date().toISOString(),
  })

it('forwards a foreground request, a backfill.cancel and a fired timer as structured CloudEvents, unchanged', async () => {
  await createForegroundEmitter(env.nc).emit({ namespace: env.namespace, model: 'bridged-model' })
  const ack = await cancel('bridged-job')
  await bus.armTimer(env.namespace, 'bridged-bf', new Date(Date.now() + 1000).toISOString())

  const [fg] = await arrived((e) => e.type === 'ai.flexinfer.foreground.request')
  const [cn] = await arrived((e) => jobOf(e) === 'bridged-job')
  const [tm] = await arrived((e) => e.type === 'ai.flexinfer.timer.fired')

  const sent = await waitUntil('the published foreground request', async () => published[0])
  const cancelStored = await stored(STREAM_EVENTS, { seq: ack.seq })
  const timerStored = await stored(STREAM_TIMERS, {
    last_by_subj: `flexinfer.events.timer.${env.namespace}.bridged-bf`,
  })
  for (const [got, want] of [
    [fg, sent],
    [cn, cancelStored],
    [tm, timerStored],
  ] as const) {
    expect(got?.contentType).toBe('application/cloudevents+json')
    expect(JSON.parse(got?.body ?? '{}').specversion).toBe('1.0')
    expect(got?.event).toEqual(want)
  }
  expect(tm?.event.data).toMatchObject({ namespace: env.namespace, backfill: 'bridged-bf' })
  // Each arrived once (acked after the 2xx).
  for (const a of [fg, cn, tm]) expect(seen.get(a?.event.id ?? '')).toBe(1)
})

it('a 503 from the sink is retried: the event arrives again and is acked once taken', async () => {
  const retriedBefore = bridge.running.stats.retried
  await cancel('flaky-job')
  const [first, second] = await arrived((e) => jobOf(e) === 'flaky-job', 2)
  expect(second?.event).toEqual(first?.event)
  expect(bridge.running.stats.retried).toBeGreaterThan(retriedBefore)
  // Taken on the second delivery: no third.
  await new Promise((r) => setTimeout(r, 1500))
  expect(arrivals.filter((a) => jobOf(a.event) === 'flaky-job')).toHaveLength(2)
})

it('a 400 from the sink dead-letters the event with the status and the answer, never retried', async () => {
  const ack = await cancel('rejected-job')
  const original = await stored(STREAM_EVENTS, { seq: ack.seq })
  const subject = `flexinfer.deadletter.bridge-${instance}`
  const dead = await waitUntil('the dead letter', async () =>
    bus.jsm.streams
      .getMessage(STREAM_DEAD_LETTER, { last_by_subj: subject })
      .then((m) => m ?? undefined)
      .catch(() => undefined),
  )
  const reason = dead?.header.get(DEAD_LETTER_REASON) ?? ''
  expect(reason).toContain('sink answered 400')
  expect(reason).toContain('type not accepted by this broker')
  expect(dead?.header.get('Flexinfer-Original-Subject')).toBe('flexinfer.events.backfill.cancel')
  const kept = decode(dead?.data ?? '')
  expect(kept.ok && kept.event).toEqual(original)
  await new Promise((r) => setTimeout(r, 1000))
  expect(seen.get(original.id)).toBe(1)
})
