// The HTTP (Knative) transport against the real nats-server: the status code for every kind of delivery, so a
// Broker retries what should be retried and never a malformed event; rejected events are dead-lettered with the
// reason; the bearer token is checked and never logged; closing drains in-flight requests.
import { randomUUID } from 'node:crypto'
import { Writable } from 'node:stream'
import type { Msg, Subscription } from '@nats-io/transport-node'
import type { FastifyInstance } from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { InboundEvent } from '../../../events/codec.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { DEAD_LETTER_REASON } from '../../../pkg/jetstream/dead-letter-headers.js'
import { Kube } from '../../../pkg/kube/client.js'
import { createLogger } from '../../../pkg/observability/log.js'
import type { Deps } from '../../../pkg/transport/function.js'
import { type EventFunction, PermanentError } from '../../../pkg/transport/function.js'
import { buildHttpApp } from '../../../pkg/transport/http-adapter.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { HEADER_SAFE, hostileInputs } from './hostile.js'

const env = useTestEnv()
const TYPE = 'ai.flexinfer.foreground.request'
const TOKEN = `s3cret-${randomUUID()}`
const fnName = `probe-${randomUUID().slice(0, 8)}`

let logLines = ''
const capture = new Writable({
  write(chunk, _enc, done) {
    logLines += chunk.toString()
    done()
  },
})

const handled: InboundEvent[] = []
let gate: Promise<void> | undefined
let slowEntered: (() => void) | undefined
/**
 * Behaviour by model name: `transient` throws, `permanent` throws PermanentError, `slow` calls `slowEntered` and
 * waits for `gate`.
 */
const probe: EventFunction = {
  name: fnName,
  subscriptions: [],
  concurrency: 16,
  async handle(event) {
    const model = (event.data as { model?: string }).model
    if (model === 'transient') throw new Error('backend unavailable')
    if (model === 'permanent') throw new PermanentError('can never work')
    if (model === 'slow') {
      slowEntered?.()
      await gate
    }
    handled.push(event)
  },
}

let deps: Deps
let open: FastifyInstance
let guarded: FastifyInstance
let deadLetters: Subscription
const dead: Msg[] = []

beforeAll(async () => {
  const log = createLogger('http-test', capture)
  log.level = 'trace'
  deps = { kube: new Kube(env.kc), bus: await Bus.open(env.nc), log, now: Date.now }
  open = buildHttpApp(probe, deps)
  guarded = buildHttpApp(probe, deps, { token: TOKEN })
  deadLetters = env.nc.subscribe(`flexinfer.deadletter.${fnName}`, {
    callback: (_err, msg) => {
      dead.push(msg)
    },
  })
})
afterAll(async () => {
  deadLetters?.unsubscribe()
  await open?.close()
  await guarded?.close()
})

const data = (model: string) => ({ namespace: env.namespace, model })
const structured = (model: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    specversion: '1.0',
    id: randomUUID(),
    source: 'gateway',
    type: TYPE,
    time: new Date().toISOString(),
    datacontenttype: 'application/json',
    data: data(model),
    ...extra,
  })
const binaryHeaders = (id = randomUUID()) => ({
  'content-type': 'application/json',
  'ce-specversion': '1.0',
  'ce-id': id,
  'ce-source': 'gateway',
  'ce-type': TYPE,
  'ce-time': new Date().toISOString(),
})
const post = (app: FastifyInstance, headers: Record<string, string>, payload: string) =>
  app.inject({ method: 'POST', url: '/', headers, payload })

async function deadLetterFor(text: string): Promise<Msg> {
  return waitFor(`a dead letter containing ${text}`, () => dead.find((m) => m.string().includes(text)), {
    timeoutMs: 5_000,
    intervalMs: 50,
  })
}

describe('status codes', () => {
  it('binary mode: 202 and the function got the validated event', async () => {
    const id = randomUUID()
    const res = await post(open, binaryHeaders(id), JSON.stringify(data('m-binary')))
    expect(res.statusCode).toBe(202)
    const event = handled.find((e) => e.id === id)
    expect(event).toMatchObject({
      type: TYPE,
      source: 'gateway',
      data: { namespace: env.namespace, model: 'm-binary' },
    })
  })

  it('structured mode (with a charset): 202', async () => {
    const body = structured('m-structured')
    const res = await post(open, { 'content-type': 'application/cloudevents+json; charset=utf-8' }, body)
    expect(res.statusCode).toBe(202)
    expect(handled.find((e) => e.id === JSON.parse(body).id)?.data).toMatchObject({ model: 'm-structured' })
  })

  it('batch mode: 202 for all of them', async () => {
    const batch = `[${structured('m-b1')},${structured('m-b2')}]`
    const res = await post(open, { 'content-type': 'application/cloudevents-batch+json' }, batch)
    expect(res.statusCode).toBe(202)
    // Empty: a Broker reads a 2xx body as a reply event (and fails the delivery if it is not a CloudEvent).
    expect(res.body).toBe('')
    expect(res.headers['x-accepted-events']).toBe('2')
  })

  it('malformed: 400 naming the reason, and dead-lettered with it', async () => {
    const badData = structured('m-x', { data: { namespace: env.namespace } })
    const res = await post(open, { 'content-type': 'application/cloudevents+json' }, badData)
    expect(res.statusCode).toBe(400)
    expect(res.json()).toMatchObject({ error: 'malformed event', deadLettered: true })
    expect(res.json().reason).toMatch(/model/)
    const letter = await deadLetterFor(JSON.parse(badData).id)
    expect(letter.headers?.get(DEAD_LETTER_REASON)).toMatch(/invalid data/)

    const notJson = await post(open, { 'content-type': 'application/cloudevents+json' }, '{ nope')
    expect(notJson.statusCode).toBe(400)
    expect(notJson.json().reason).toMatch(/not JSON/)

    const noId = await post(
      open,
      { 'content-type': 'application/cloudevents+json' },
      structured('m', { id: undefined }),
    )
    expect(noId.statusCode).toBe(400)
    expect(noId.json().reason).toMatch(/missing id/)

    const unknown = await post(
      open,
      { 'content-type': 'application/cloudevents+json' },
      structured('m', { type: 'x.y' }),
    )
    expect(unknown.statusCode).toBe(400)
    expect(unknown.json().reason).toMatch(/unknown event type/)

    const id = randomUUID()
    const { 'ce-source': _, ...noSource } = binaryHeaders(id)
    const binaryNoSource = await post(open, noSource, JSON.stringify(data('m')))
    expect(binaryNoSource.statusCode).toBe(400)
    expect(binaryNoSource.json().reason).toMatch(/source/)
    // Binary mode keeps its ce-* headers in the dead letter (the body alone would lose the envelope).
    expect(JSON.parse((await deadLetterFor(id)).string()).headers['ce-id']).toBe(id)
  })

  it('one bad event in a batch: 400 for the batch, nothing handled', async () => {
    const good = structured('m-batch-good')
    const res = await post(
      open,
      { 'content-type': 'application/cloudevents-batch+json' },
      `[${good},${structured('m', { source: '' })}]`,
    )
    expect(res.statusCode).toBe(400)
    expect(res.json().reason).toMatch(/^\[1\]/)
    expect(handled.find((e) => e.id === JSON.parse(good).id)).toBeUndefined()
  })

  it('not a CloudEvent, or binary mode with non-JSON data: 415', async () => {
    const plain = await post(open, { 'content-type': 'text/plain' }, 'hello')
    expect(plain.statusCode).toBe(415)
    const json = await post(open, { 'content-type': 'application/json' }, JSON.stringify(data('m')))
    expect(json.statusCode).toBe(415)
    const binaryText = await post(open, { ...binaryHeaders(), 'content-type': 'text/plain' }, 'hello')
    expect(binaryText.statusCode).toBe(415)
  })

  it('transient handler failure: 503 (the Broker retries)', async () => {
    const res = await post(open, binaryHeaders(), JSON.stringify(data('transient')))
    expect(res.statusCode).toBe(503)
    expect(res.headers['retry-after']).toBe('1')
  })

  it('PermanentError: 422 (never retried) and dead-lettered', async () => {
    const id = randomUUID()
    const res = await post(open, binaryHeaders(id), JSON.stringify(data('permanent')))
    expect(res.statusCode).toBe(422)
    expect(res.json()).toMatchObject({ deadLettered: true })
    expect((await deadLetterFor(id)).headers?.get(DEAD_LETTER_REASON)).toMatch(/can never work/)
  })

  it('bearer token: 401 when missing or wrong, 202 when right', async () => {
    const body = JSON.stringify(data('m-auth'))
    expect((await post(guarded, binaryHeaders(), body)).statusCode).toBe(401)
    const wrong = await post(guarded, { ...binaryHeaders(), authorization: `Bearer ${TOKEN}x` }, body)
    expect(wrong.statusCode).toBe(401)
    expect(wrong.headers['www-authenticate']).toBe('Bearer')
    const basic = await post(guarded, { ...binaryHeaders(), authorization: `Basic ${TOKEN}` }, body)
    expect(basic.statusCode).toBe(401)
    const right = await post(guarded, { ...binaryHeaders(), authorization: `Bearer ${TOKEN}` }, body)
    expect(right.statusCode).toBe(202)
  })

  it('health and readiness', async () => {
    expect((await open.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200)
    expect((await open.inject({ method: 'GET', url: '/readyz' })).json()).toEqual({ ok: true, function: fnName })
  })
})

it('never logs the token or the Authorization header', async () => {
  await post(guarded, { ...binaryHeaders(), authorization: `Bearer ${TOKEN}` }, JSON.stringify(data('transient')))
  await post(guarded, { ...binaryHeaders(), authorization: `Bearer wrong-${TOKEN}` }, JSON.stringify(data('m')))
  // Even a careless log call with the request headers is redacted.
  deps.log.warn({ headers: { authorization: `Bearer ${TOKEN}` }, token: TOKEN }, 'careless')
  expect(logLines).toContain('unauthenticated request')
  expect(logLines).toContain('careless')
  expect(logLines).toContain('backend unavailable')
  expect(logLines).not.toContain(TOKEN)
  expect(logLines).not.toMatch(/Bearer /)
})

it('closing drains in-flight requests: the slow one still gets its 202', async () => {
  const app = buildHttpApp(probe, deps)
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  let release = () => {}
  gate = new Promise<void>((resolve) => {
    release = resolve
  })
  // Close only once the request is really in the handler: a fixed sleep was not enough under load (the first
  // fetch had not reached the server yet, so close() found nothing in flight and finished at once).
  let entered = false
  slowEntered = () => {
    entered = true
  }
  let closed = false
  let closing: Promise<void> | undefined
  try {
    const id = randomUUID()
    const inFlight = fetch(url, { method: 'POST', headers: binaryHeaders(id), body: JSON.stringify(data('slow')) })
    inFlight.catch(() => {}) // awaited below; never an unhandled rejection if an assertion fails first
    await waitFor('the slow request in the handler', () => entered, { timeoutMs: 20_000 })
    closing = app.close().then(() => {
      closed = true
    })
    // The handler is held by the gate, so close() cannot finish however long we wait: time is the subject (a
    // moment in which a close that did not wait for the handler would have finished).
    await new Promise((r) => setTimeout(r, 200))
    expect(closed).toBe(false)
    release()
    const res = await inFlight
    expect(res.status).toBe(202)
    await closing
    expect(handled.find((e) => e.id === id)).toBeDefined()
  } finally {
    slowEntered = undefined
    release()
    await (closing ?? app.close())
  }
})

it('a handler that releases its place lets the next event in while it finishes; each answered when its handler ends', async () => {
  let open!: () => void
  const gate = new Promise<void>((r) => {
    open = r
  })
  let started = 0
  const releasing: EventFunction = {
    ...probe,
    concurrency: 1,
    async handle(_e, _d, ctx) {
      started++
      ctx?.release()
      await gate
    },
  }
  const app = buildHttpApp(releasing, deps)
  const answered: number[] = []
  const responses = Promise.all(
    [1, 2, 3].map((i) =>
      post(app, binaryHeaders(), JSON.stringify(data('m-release'))).then((r) => {
        answered.push(i)
        return r
      }),
    ),
  )
  try {
    // One place, yet all three started: each released it; none answered while its handler waits.
    await waitFor('all three handlers started', () => (started === 3 ? true : undefined), { timeoutMs: 10_000 })
    expect(answered).toEqual([])
  } finally {
    open()
  }
  expect((await responses).map((r) => r.statusCode)).toEqual([202, 202, 202])
  await app.close()
})

it('at most fn.concurrency events in the handler at once; the others wait their turn', async () => {
  let inFlight = 0
  let most = 0
  const serial: EventFunction = {
    ...probe,
    concurrency: 1,
    async handle() {
      inFlight++
      most = Math.max(most, inFlight)
      await new Promise((r) => setTimeout(r, 50)) // time is the subject: a handler that takes a while, to overlap
      inFlight--
    },
  }
  const app = buildHttpApp(serial, deps)
  const responses = await Promise.all([1, 2, 3].map(() => post(app, binaryHeaders(), JSON.stringify(data('m-serial')))))
  expect(responses.map((r) => r.statusCode)).toEqual([202, 202, 202])
  expect(most).toBe(1)
  await app.close()
})

describe('hostile input (what the chaos suite sends)', () => {
  it('each is answered 400 and dead-lettered with a specific, header-safe reason', async () => {
    // Bodies up to NATS's max_payload (fastify's own 1 MiB body limit answers 413 beyond it).
    for (const h of hostileInputs(env.namespace, 1024 * 1024 - 1024)) {
      const before = dead.length
      const body = typeof h.body === 'string' ? h.body : Buffer.from(h.body)
      const res = await post(open, { 'content-type': 'application/cloudevents+json' }, body as string)
      expect(res.statusCode, h.name).toBe(400)
      expect(res.json().reason, h.name).toMatch(h.httpReason ?? h.reason)
      await waitFor(`${h.name} dead-lettered`, () => dead.length > before, { timeoutMs: 5_000 })
      const reason = dead[dead.length - 1]?.headers?.get(DEAD_LETTER_REASON) ?? ''
      expect(reason, h.name).toMatch(HEADER_SAFE)
      expect(reason, h.name).toMatch(h.httpReason ?? h.reason)
    }
    // Still serving.
    expect((await post(open, binaryHeaders(), JSON.stringify(data('m-after-hostile')))).statusCode).toBe(202)
  })

  it('a PermanentError on an event too deep to serialise is still dead-lettered (422), not a 500', async () => {
    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`
    const id = randomUUID()
    const body = structured('x', {
      id,
      type: 'dev.knative.apiserver.resource.add',
      data: { metadata: { name: 'deep', namespace: env.namespace }, model: 'permanent', spec: 'DEEP' },
    }).replace('"DEEP"', deep)
    const res = await post(open, { 'content-type': 'application/cloudevents+json' }, body)
    expect(res.statusCode).toBe(422)
    expect((await deadLetterFor(id)).headers?.get(DEAD_LETTER_REASON)).toMatch(/can never work/)
  })
})
