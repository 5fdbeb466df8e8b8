// The real functions (as `npm start` runs them, scoped to this file's namespace) fed the chaos suite's hostile
// inputs on every subject they consume: nothing crashes, nothing is retried or left pending, every one is
// dead-lettered, and a good event is still handled afterwards. ApiServerSource-shaped events pass the envelope
// check with any object inside, so they are sent with the hostile parts (deep nesting, CR/LF, odd names) inside
// an otherwise valid Kubernetes object of this namespace.
import { randomUUID } from 'node:crypto'
import { jetstream } from '@nats-io/jetstream'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { apiserverSubject, STREAM_EVENTS, STREAM_TIMERS } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { consumerName } from '../../../pkg/jetstream/names.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { startTestRunner } from '../support/runner.js'
import { hostileInputs } from './hostile.js'

const env = useTestEnv()
let runner: Runner
beforeAll(async () => {
  runner = await startTestRunner(env, { watch: false })
})
afterAll(async () => {
  await runner?.stop()
})

const RESOURCES = ['modelbackfills', 'models', 'gamingsessions', 'gpuleases', 'jobs', 'cronjobs']
const DEEP = `${'['.repeat(100_000)}${']'.repeat(100_000)}`

/** Valid envelopes around hostile Kubernetes objects in this namespace (the functions act on these). */
function hostileObjects(namespace: string): string[] {
  const event = (verb: string, object: Record<string, unknown>, deep = false) => {
    const body = JSON.stringify({
      specversion: '1.0',
      id: randomUUID(),
      source: 'hostile',
      type: `dev.knative.apiserver.resource.${verb}`,
      time: new Date().toISOString(),
      datacontenttype: 'application/json',
      data: object,
    })
    return deep ? body.replace('"DEEP"', DEEP) : body
  }
  const meta = (name: string) => ({ name, namespace, uid: randomUUID(), resourceVersion: '1' })
  return [
    event('add', { kind: 'ModelBackfill', metadata: meta('deep'), spec: 'DEEP' }, true),
    event('update', { kind: 'ModelBackfill', metadata: meta('deep-status'), spec: {}, status: 'DEEP' }, true),
    event('add', { kind: 'ModelBackfill', metadata: meta('crlf\r\nname'), spec: { modelRef: 'gemma 4\r\n' } }),
    event('add', { kind: 'Model', metadata: meta('m'), status: { nodeName: '\u0000\r\n', ready: 'yes' } }),
    event('delete', { kind: 'Job', metadata: { ...meta('j'), labels: 'DEEP' } }, true),
    event('add', { metadata: { ...meta('x'), ownerReferences: [{ uid: '\r\n' }] }, spec: [1, 2, 3] }),
  ]
}

it('hostile events on every subject the functions consume: all dead-lettered, none crash or wedge a function', async () => {
  const js = jetstream(env.nc)
  const ns = env.namespace
  const subjects = [
    'flexinfer.events.foreground.request',
    'flexinfer.events.backfill.cancel',
    'flexinfer.events.backfill.admit',
    'flexinfer.events.backfill.changed',
    'flexinfer.events.model.ready',
    'flexinfer.events.gaming.session',
    'flexinfer.events.gpu.lease',
    'flexinfer.events.job.completed',
    `flexinfer.events.timer.${ns}.hostile`,
    ...RESOURCES.map(apiserverSubject),
  ]
  const maxBytes = (env.nc.info?.max_payload ?? 1024 * 1024) - 1024
  const hostile = hostileInputs(ns, maxBytes).filter((h) => h.name !== 'huge')
  for (const subject of subjects) for (const h of hostile) await js.publish(subject, h.body)
  // One near-1 MiB body per stream is enough (the stream keeps them).
  await js.publish(subjects[0] as string, hostileInputs(ns, maxBytes).find((h) => h.name === 'huge')?.body)
  for (const resource of RESOURCES)
    for (const body of hostileObjects(ns)) await js.publish(apiserverSubject(resource), body)

  // Every consumer of this runner drains: nothing pending, nothing waiting for an ack.
  const consumers = runner.functions.flatMap((f) =>
    [STREAM_EVENTS, STREAM_TIMERS].map((stream) => ({ stream, name: consumerName(f.name, stream) })),
  )
  await waitFor(
    'every consumer drained',
    async () => {
      for (const c of consumers) {
        const info = await runner.deps.bus.jsm.consumers.info(c.stream, c.name).catch(() => undefined)
        if (info && (info.num_pending > 0 || info.num_ack_pending > 0)) return false
      }
      return true
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  )
  const stats = Object.fromEntries(runner.functions.map((f) => [f.name, { ...f.stats }]))
  const total = (k: 'deadLettered' | 'retried' | 'dropped') => Object.values(stats).reduce((sum, s) => sum + s[k], 0)
  // Hostile bodies are rejected at decode: dead-lettered at once, never retried or dropped.
  expect(total('dropped'), JSON.stringify(stats)).toBe(0)
  expect(total('retried'), JSON.stringify(stats)).toBe(0)
  expect(total('deadLettered')).toBeGreaterThanOrEqual(subjects.length * hostile.length)

  // Still working: a good foreground request is handled by demand.
  const demand = runner.functions.find((f) => f.name.startsWith('demand'))
  const handled = demand?.stats.handled ?? 0
  await js.publish(
    'flexinfer.events.foreground.request',
    encode('ai.flexinfer.foreground.request', { namespace: ns, model: 'after-hostile' }, { source: 'gateway' }),
  )
  await waitFor('demand handles a good event', () => (demand?.stats.handled ?? 0) > handled, { timeoutMs: 10_000 })
}, 120_000)

it('a foreground request whose time is empty (a gateway script with an unset variable) is demand, not a dead letter', async () => {
  // Seen on the real node: the gateway pod's `nats pub` sent "time":"" and demand dead-lettered the request, so the
  // backfill Job it should have stopped ran on until the reconcilers noticed the model busy, 17-32 s later.
  const js = jetstream(env.nc)
  const demand = runner.functions.find((f) => f.name.startsWith('demand'))
  const before = { ...(demand?.stats ?? { handled: 0, deadLettered: 0 }) }
  const body = JSON.parse(
    encode('ai.flexinfer.foreground.request', { namespace: env.namespace, model: 'empty-time' }, { source: 'gateway' }),
  )
  await js.publish('flexinfer.events.foreground.request', JSON.stringify({ ...body, time: '' }))
  await waitFor('demand handles it', () => (demand?.stats.handled ?? 0) > before.handled, { timeoutMs: 10_000 })
  expect(demand?.stats.deadLettered).toBe(before.deadLettered)
  const idle = await runner.deps.bus.kv.idle.get(`${env.namespace}.empty-time`)
  expect(idle?.operation).toBe('PUT')
}, 60_000)
