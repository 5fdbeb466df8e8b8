// The HTTP ingress for gateways that can only POST CloudEvents: bearer token from a mounted-Secret-style file,
// foreground requests only, validated, published to the catalog subject (a JetStream consumer sees them), 202.
import { randomUUID } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { type ConsumerMessages, DeliverPolicy, jetstream } from '@nats-io/jetstream'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { STREAM_FOREGROUND, STREAM_FOREGROUND_LAST } from '../../../events/catalog.js'
import { decode, type InboundEvent } from '../../../events/codec.js'
import { INGRESS_SUBJECT, INGRESS_TYPES, ingressFunction } from '../../../functions/ingress/index.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { type HttpFunction, readToken, startHttpFunction } from '../../../pkg/transport/http-adapter.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
const TOKEN = `ingress-${randomUUID()}`
let dir: string
let served: HttpFunction
const messages: ConsumerMessages[] = []
const seen: { event: InboundEvent; subject: string }[] = []
let logLines = ''

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ingress-'))
  await writeFile(join(dir, 'token'), `${TOKEN}\n`)
  const token = readToken('INGRESS_TOKEN', { INGRESS_TOKEN_FILE: join(dir, 'token') })
  const capture = new Writable({
    write(chunk, _enc, done) {
      logLines += chunk.toString()
      done()
    },
  })
  const logger = createLogger('ingress-test', capture)
  logger.level = 'trace'
  served = await startHttpFunction(ingressFunction(), {
    natsUrl: env.natsUrl,
    kubeconfig: env.kc,
    port: 0,
    token,
    acceptTypes: INGRESS_TYPES,
    logger,
  })
  // What the demand function's consumers get: the foreground subject and the per-model subjects.
  for (const [stream, subject] of [
    [STREAM_FOREGROUND, INGRESS_SUBJECT],
    [STREAM_FOREGROUND_LAST, `${INGRESS_SUBJECT}.>`],
  ] as const) {
    const consumer = await jetstream(env.nc).consumers.get(stream, {
      filter_subjects: [subject],
      deliver_policy: DeliverPolicy.New,
    })
    const consumed = await consumer.consume()
    messages.push(consumed)
    void (async () => {
      for await (const msg of consumed) {
        const decoded = decode(msg.data)
        if (decoded.ok && (decoded.event.data as { namespace?: string }).namespace === env.namespace)
          seen.push({ event: decoded.event, subject: msg.subject })
      }
    })()
  }
})
afterAll(async () => {
  for (const m of messages) await m.close()
  await served?.stop()
  await rm(dir, { recursive: true, force: true })
})

const post = (body: string, headers: Record<string, string>, token: string | null = TOKEN) =>
  fetch(served.url, {
    method: 'POST',
    headers: { ...headers, ...(token === null ? {} : { authorization: `Bearer ${token}` }) },
    body,
  })
const structured = (data: Record<string, unknown>, extra: Record<string, unknown> = {}) => {
  const id = randomUUID()
  const body = JSON.stringify({
    specversion: '1.0',
    id,
    source: 'edge-gateway',
    type: 'ai.flexinfer.foreground.request',
    time: '2026-01-02T03:04:05.000Z',
    datacontenttype: 'application/json',
    data,
    ...extra,
  })
  return { id, body }
}
const CE = { 'content-type': 'application/cloudevents+json' }

async function published(id: string) {
  return waitFor(
    `event ${id} published`,
    () => {
      const found = seen.filter((s) => s.event.id === id)
      return found.length ? found : undefined
    },
    { timeoutMs: 5_000, intervalMs: 50 },
  )
}

it('publishes a valid structured request to its per-model subject, with its request time, and answers 202', async () => {
  const { id, body } = structured({ namespace: env.namespace, model: 'm-ingress' })
  const res = await post(body, CE)
  expect(res.status).toBe(202)
  const [got] = await published(id)
  expect(got?.subject).toBe(`flexinfer.events.foreground.request.${env.namespace}.m-ingress`)
  expect(got?.event).toMatchObject({
    type: 'ai.flexinfer.foreground.request',
    source: 'edge-gateway',
    time: '2026-01-02T03:04:05.000Z',
    data: { namespace: env.namespace, model: 'm-ingress' },
  })
})

it('takes binary mode and a batch; a retried POST is stored once', async () => {
  const id = randomUUID()
  const binary = {
    'content-type': 'application/json',
    'ce-specversion': '1.0',
    'ce-id': id,
    'ce-source': 'edge-gateway',
    'ce-type': 'ai.flexinfer.foreground.request',
    'ce-time': new Date().toISOString(),
  }
  const body = JSON.stringify({ namespace: env.namespace, model: 'm-binary' })
  expect((await post(body, binary)).status).toBe(202)
  expect((await post(body, binary)).status).toBe(202)
  const a = structured({ namespace: env.namespace, model: 'm-batch-a' })
  const b = structured({ namespace: env.namespace, model: 'm-batch-b', workloadClass: 'foreground' })
  const batch = await post(`[${a.body},${b.body}]`, { 'content-type': 'application/cloudevents-batch+json' })
  expect(batch.status).toBe(202)
  await published(a.id)
  await published(b.id)
  // The ingress answers 202 once the event is stored, and a stream's messages reach the consumer in order: a second
  // copy of the retried POST, stored before the batch was even sent, would have been seen before the batch's.
  expect(await published(id)).toHaveLength(1)
})

it('relays the gateway trace context (traceparent/tracestate) unchanged, structured and binary', async () => {
  const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
  const s = structured({ namespace: env.namespace, model: 'm-traced' }, { traceparent, tracestate: 'gw=1' })
  expect((await post(s.body, CE)).status).toBe(202)
  const id = randomUUID()
  const binary = {
    'content-type': 'application/json',
    'ce-specversion': '1.0',
    'ce-id': id,
    'ce-source': 'edge-gateway',
    'ce-type': 'ai.flexinfer.foreground.request',
    'ce-traceparent': traceparent,
  }
  expect((await post(JSON.stringify({ namespace: env.namespace, model: 'm-traced-bin' }), binary)).status).toBe(202)
  expect((await published(s.id))[0]?.event.extensions).toEqual({ traceparent, tracestate: 'gw=1' })
  expect((await published(id))[0]?.event.extensions).toEqual({ traceparent })
})

it('rejects what it must not publish: no or wrong token 401, other types and invalid data 400', async () => {
  const ok = structured({ namespace: env.namespace, model: 'm-reject' })
  expect((await post(ok.body, CE, null)).status).toBe(401)
  expect((await post(ok.body, CE, 'not-the-token')).status).toBe(401)

  const otherType = structured(
    { namespace: env.namespace, name: 's1', nodeName: 'n1', deleted: false },
    { type: 'ai.flexinfer.gaming.session' },
  )
  const wrongType = await post(otherType.body, CE)
  expect(wrongType.status).toBe(400)
  expect(((await wrongType.json()) as { reason: string }).reason).toMatch(/not accepted here/)

  const invalid = structured({ namespace: 'Not A Namespace', model: 'm' })
  const bad = await post(invalid.body, CE)
  expect(bad.status).toBe(400)
  expect(((await bad.json()) as { reason: string }).reason).toMatch(/namespace/)

  expect((await post('model=m', { 'content-type': 'application/x-www-form-urlencoded' })).status).toBe(415)

  // A valid request after them, waited for: the ingress answers once it stored an event, and a stream's messages
  // reach the consumer in order, so a refused request that was stored anyway would have been seen before it.
  const marker = structured({ namespace: env.namespace, model: 'm-reject' })
  expect((await post(marker.body, CE)).status).toBe(202)
  await published(marker.id)
  for (const id of [ok.id, otherType.id, invalid.id]) expect(seen.find((s) => s.event.id === id)).toBeUndefined()
})

it('never logs the token', async () => {
  expect(logLines).toContain('unauthenticated request')
  expect(logLines).not.toContain(TOKEN)
  expect(logLines).not.toMatch(/Bearer /)
})

it('readToken: the env value, or the mounted file; an empty file is an error', async () => {
  expect(readToken('INGRESS_TOKEN', { INGRESS_TOKEN: ' t0k ' })).toBe('t0k')
  expect(readToken('INGRESS_TOKEN', {})).toBeUndefined()
  await writeFile(join(dir, 'empty'), '\n')
  expect(() => readToken('INGRESS_TOKEN', { INGRESS_TOKEN_FILE: join(dir, 'empty') })).toThrow(/empty/)
})
