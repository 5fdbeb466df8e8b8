// The bridge's handler against an in-process sink: what each answer of the Broker means for the event (acked,
// retried, dead-lettered), the structured CloudEvent it POSTs, and what it never forwards. No NATS here;
// test/integration/transport/bridge.test.ts runs it on JetStream.
import Fastify, { type FastifyInstance } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { decode, type InboundEvent } from '../../events/codec.js'
import { BRIDGE_EVENT_SUBJECTS, createBridge, toStructured } from '../../pkg/transport/bridge.js'
import { PermanentError } from '../../pkg/transport/function.js'
import { fakeDeps } from './support/deps.js'

const deps = fakeDeps()
const event: InboundEvent = {
  type: 'ai.flexinfer.backfill.admit',
  id: 'evt-1',
  source: 'flexinfer/model-backfill',
  time: '2026-01-01T00:00:00.000Z',
  data: { namespace: 'team-a', backfill: 'nightly' },
}

let sink: FastifyInstance
let url: string
let status = 202
let answer = ''
let delayMs = 0
const bodies: { contentType?: string; body: string }[] = []

beforeAll(async () => {
  sink = Fastify({ logger: false })
  sink.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => done(null, body))
  sink.post('/', async (req, reply) => {
    bodies.push({ contentType: req.headers['content-type'], body: String(req.body) })
    if (delayMs) await new Promise((r) => setTimeout(r, delayMs))
    return reply.code(status).send(answer)
  })
  url = await sink.listen({ port: 0, host: '127.0.0.1' })
})
afterAll(() => sink.close())

const post = (opts: Partial<Parameters<typeof createBridge>[0]> = {}, e: InboundEvent = event) =>
  createBridge({ sink: url, ...opts }).handle(e, deps)

describe('the bridge handler', () => {
  it('POSTs the event as a structured CloudEvent with the same attributes and data; a 2xx resolves', async () => {
    status = 202
    bodies.length = 0
    await expect(post()).resolves.toBeUndefined()
    expect(bodies).toHaveLength(1)
    expect(bodies[0]?.contentType).toBe('application/cloudevents+json')
    const decoded = decode(bodies[0]?.body ?? '')
    expect(decoded.ok && decoded.event).toEqual({ ...event, subject: undefined })
    expect(JSON.parse(bodies[0]?.body ?? '{}')).toMatchObject({
      specversion: '1.0',
      datacontenttype: 'application/json',
    })
    expect(toStructured(event)).toBe(bodies[0]?.body)
  })

  it('gives each firing of the repeating resync schedule its own id (the same stored message fires every time)', async () => {
    status = 202
    bodies.length = 0
    const due: InboundEvent = { ...event, type: 'ai.flexinfer.resync.due', data: { intervalMs: 30_000 } }
    await post({}, due)
    await new Promise((r) => setTimeout(r, 2))
    await post({}, due)
    const ids = bodies.map((b) => JSON.parse(b.body).id as string)
    expect(new Set(ids).size).toBe(2)
    expect(ids.every((id) => id.startsWith(`${due.id}.`))).toBe(true)
  })

  it.each([500, 503, 404, 408, 409, 429])('%i is transient (retried, not dead-lettered)', async (code) => {
    status = code
    answer = 'later'
    const err = await post().catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Error)
    expect(err).not.toBeInstanceOf(PermanentError)
    expect(String(err)).toContain(`sink answered ${code}: later`)
  })

  it.each([400, 401, 403, 413, 415, 422])(
    '%i is permanent: dead-lettered with the status and the answer',
    async (code) => {
      status = code
      answer = '{"error":"no"}'
      const err = await post().catch((e: unknown) => e)
      expect(err).toBeInstanceOf(PermanentError)
      expect(String(err)).toContain(`sink answered ${code}: {"error":"no"}`)
    },
  )

  it('an unreachable sink or a timeout is transient', async () => {
    const closed = Fastify({ logger: false })
    const closedUrl = await closed.listen({ port: 0, host: '127.0.0.1' })
    await closed.close()
    const unreachable = await createBridge({ sink: closedUrl })
      .handle(event, deps)
      .catch((e: unknown) => e)
    expect(unreachable).toBeInstanceOf(Error)
    expect(unreachable).not.toBeInstanceOf(PermanentError)
    expect(String(unreachable)).toContain('unreachable')

    status = 202
    delayMs = 300
    try {
      const slow = await post({ timeoutMs: 50 }).catch((e: unknown) => e)
      expect(slow).toBeInstanceOf(Error)
      expect(slow).not.toBeInstanceOf(PermanentError)
    } finally {
      delayMs = 0
    }
  })

  it('skips events about namespaces it does not manage (acknowledged, never POSTed)', async () => {
    status = 202
    // Counted by id: on a loaded machine the timed-out POST of the test above can reach the sink only now.
    const scoped = { ...event, id: 'evt-scope' }
    const received = () => bodies.filter((b) => b.body.includes('"evt-scope"')).length
    await post({ namespaces: ['team-b'] }, scoped)
    expect(received()).toBe(0)
    await post({ namespaces: ['team-a'] }, scoped)
    expect(received()).toBe(1)
  })

  it('consumes what admit and lifecycle take from FLEXINFER_EVENTS (never the preemption path), the fired timers and resync sweeps; named per instance', () => {
    const fn = createBridge({ sink: url })
    expect(fn.name).toBe('bridge')
    expect(fn.subscriptions.map((s) => [s.stream, s.subjects])).toEqual([
      ['FLEXINFER_EVENTS', BRIDGE_EVENT_SUBJECTS],
      ['FLEXINFER_TIMERS', ['flexinfer.events.timer.>', 'flexinfer.events.resync.>']],
    ])
    expect([...BRIDGE_EVENT_SUBJECTS].sort()).toEqual(
      [
        'flexinfer.events.backfill.admit',
        'flexinfer.events.backfill.changed',
        'flexinfer.events.backfill.resync',
        'flexinfer.events.model.ready',
        'flexinfer.events.gaming.session',
        'flexinfer.events.gpu.lease',
        'flexinfer.events.job.completed',
      ].sort(),
    )
    // Foreground and cancel requests go straight from JetStream to demand and cancel, never through the Broker.
    expect(BRIDGE_EVENT_SUBJECTS).not.toContain('flexinfer.events.foreground.request')
    expect(BRIDGE_EVENT_SUBJECTS).not.toContain('flexinfer.events.backfill.cancel')
    const scoped = createBridge({ sink: url, instance: 't1' })
    expect(scoped.name).toBe('bridge-t1')
    expect(scoped.subscriptions.every((s) => s.deliverNew)).toBe(true)
  })
})
