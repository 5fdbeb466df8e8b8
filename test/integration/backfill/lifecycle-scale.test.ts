// lifecycle at scale (issue 11, item 4), on the real servers: what it sends the apiserver, counted on the wire by a
// proxy in front of it (test/integration/support/counting-proxy.ts), and what its sweeps leave queued. N backfills
// (idleFor 24h) are declared while no lifecycle runs; then one lifecycle instance, talking to the apiserver only
// through the proxy, sweeps twice before handling anything — as one far behind its queue does — then handles what
// the sweeps published, then sweeps the settled population once more.
//
// Before lifecycle had watched copies and the sweep's pending set (2026-12-01): the second sweep published all N
// once more (2N queued; the backlog grew by N per period), each reconcile made six reads (GET backfill, Model and
// CronJob; LIST sessions, leases, own Jobs) and every sweep three LISTs.
import { jetstream } from '@nats-io/jetstream'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { STREAM_EVENTS, STREAM_TIMERS } from '../../../events/catalog.js'
import { decode, encode, type InboundEvent } from '../../../events/codec.js'
import { lifecycleFunction } from '../../../functions/lifecycle/index.js'
import { backfillKey } from '../../../pkg/core/names.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { openDeps } from '../../../pkg/transport/deps.js'
import type { EventFunction } from '../../../pkg/transport/function.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld } from '../support/backfill-world.js'
import { CountingProxy } from '../support/counting-proxy.js'

const env = useTestEnv()
const N = 200
let world: BackfillWorld
let proxy: CountingProxy
let deps: Awaited<ReturnType<typeof openDeps>>
let fn: EventFunction
const queued: InboundEvent[] = []

/** The `backfill.resync` events about our namespace stored since sequence `from` (an ordered read, bounded). */
async function resyncsSince(from: number): Promise<InboundEvent[]> {
  const js = jetstream(env.nc)
  const consumer = await js.consumers.get(STREAM_EVENTS, {
    filter_subjects: ['flexinfer.events.backfill.resync'],
    opt_start_seq: from + 1,
  })
  const out: InboundEvent[] = []
  for (let i = 0; i < 100; i++) {
    const batch = await consumer.fetch({ max_messages: 500, expires: 1000 })
    let got = 0
    for await (const m of batch) {
      got++
      const r = decode(m.data)
      if (r.ok && (r.event.data as { namespace?: string }).namespace === env.namespace) out.push(r.event)
    }
    if (got === 0) break
  }
  return out
}

const lastSeq = async () => (await jetstream(env.nc).jetstreamManager()).streams.info(STREAM_EVENTS)
const sweepEvent = () => {
  const r = decode(encode('ai.flexinfer.resync.due', { intervalMs: 30_000 }))
  if (!r.ok) throw new Error(r.reason)
  return r.event
}

beforeAll(async () => {
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  await world.template('tpl')
  await world.model('m', { node: `node-${env.namespace}` })
  let next = 0
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < N) {
        const i = next++
        await world.backfill(`b-${i}`, { modelRef: 'm', templateRef: 'tpl', idleFor: '24h' })
      }
    }),
  )
  proxy = await CountingProxy.start(env.kc)
  deps = await openDeps({
    natsUrl: env.natsUrl,
    functions: ['lifecycle'],
    kubeconfig: proxy.kc,
    namespaces: [env.namespace],
    name: 'lifecycle-scale-test',
    logger: createLogger('lifecycle-scale-test'),
  })
  fn = lifecycleFunction()
  await fn.start?.(deps)
}, 180_000)

afterAll(async () => {
  await fn?.stop?.()
  await deps?.close()
  await proxy?.stop()
  world?.close()
  // Timers armed for the 24 h windows: not left behind in the shared timer stream.
  const jsm = await jetstream(env.nc).jetstreamManager()
  await jsm.streams.purge(STREAM_TIMERS, { filter: `flexinfer.schedules.${env.namespace}.>` }).catch(() => {})
})

it('a second sweep publishes nothing for backfills whose first resync is still queued, and sweeps send the apiserver nothing', {
  timeout: 120_000,
}, async () => {
  const from = (await lastSeq()).state.last_seq
  const before = proxy.requests.length
  await fn.handle(sweepEvent(), deps)
  await fn.handle(sweepEvent(), deps)
  const sweepReads = proxy.reads(before)
  queued.push(...(await resyncsSince(from)))
  const perBackfill = new Map<string, number>()
  for (const e of queued) {
    const key = backfillKey(env.namespace, (e.data as { backfill: string }).backfill)
    perBackfill.set(key, (perBackfill.get(key) ?? 0) + 1)
  }
  // Every backfill once (NoState: no event of theirs was handled), none twice: the backlog stays N, not 2N.
  expect(perBackfill.size).toBe(N)
  expect(queued.length).toBe(N)
  // Both sweeps read watched copies: not one GET or LIST (before: three LISTs per sweep).
  expect(sweepReads.map((r) => r.path)).toEqual([])
})

it('handling them costs at most two apiserver reads per backfill, and a sweep of the settled population none', {
  timeout: 240_000,
}, async () => {
  expect(queued.length).toBe(N)
  const before = proxy.requests.length
  let next = 0
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < queued.length) await fn.handle(queued[next++] as InboundEvent, deps)
    }),
  )
  const reads = proxy.reads(before)
  const byKind = new Map<string, number>()
  for (const r of reads) {
    const kind = r.path
      .split('/')
      .slice(-2)
      .join('/')
      .replace(/\/[^/]*$/, '')
    byKind.set(kind, (byKind.get(kind) ?? 0) + 1)
  }
  // The fresh reads that stay: the ModelBackfill decided on and its CronJob template (before: six per backfill).
  expect(reads.length, JSON.stringify(Object.fromEntries(byKind))).toBeLessThanOrEqual(2 * N)
  // Every one settled: a state, waiting on its 24 h window.
  for (const name of ['b-0', `b-${N - 1}`]) expect((await world.state(name))?.phase).toBe('WaitingForIdle')

  // Once the watches have the status writes, a sweep finds nothing to re-decide and asks the apiserver nothing.
  let picked = -1
  const sweepFrom = proxy.requests.length
  for (let i = 0; i < 20 && picked !== 0; i++) {
    await new Promise((r) => setTimeout(r, 1000))
    const seq = (await lastSeq()).state.last_seq
    await fn.handle(sweepEvent(), deps)
    picked = (await resyncsSince(seq)).length
  }
  expect(picked).toBe(0)
  expect(proxy.reads(sweepFrom).map((r) => r.path)).toEqual([])
})
