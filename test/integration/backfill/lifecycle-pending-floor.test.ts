// The sweep does not re-publish a resync that is still queued, however long the backlog (issue 11, bench run E2:
// with 10,000 backfills and ~20,000 events queued, every sweep re-published 400–740 `NoState` resyncs whose first
// ones had outlived the pending set's 15-minute ttl). On the real servers: lifecycle's durable consumer exists but
// nothing pulls from it (lifecycle far behind); one sweep publishes a resync per backfill; with the clock 20 minutes
// on, the next sweep publishes none of them again — the consumer's ack floor shows them queued. Once they are
// acknowledged (another replica handled them), they expire by the ttl as before and a sweep picks them again.
import { jetstream } from '@nats-io/jetstream'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { STREAM_EVENTS, STREAM_TIMERS } from '../../../events/catalog.js'
import { decode, encode, type InboundEvent } from '../../../events/codec.js'
import { lifecycleFunction } from '../../../functions/lifecycle/index.js'
import { consumerName } from '../../../pkg/jetstream/names.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { ensureConsumers } from '../../../pkg/transport/consumers.js'
import { openDeps, scoped } from '../../../pkg/transport/deps.js'
import type { Deps, EventFunction } from '../../../pkg/transport/function.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld } from '../support/backfill-world.js'
import { testInstance } from '../support/runner.js'

const env = useTestEnv()
const N = 30
const instance = testInstance()
let world: BackfillWorld
let opened: Awaited<ReturnType<typeof openDeps>>
let deps: Deps
let fn: EventFunction
let offsetMs = 0

const sweepEvent = (): InboundEvent => {
  const r = decode(encode('ai.flexinfer.resync.due', { intervalMs: 30_000 }))
  if (!r.ok) throw new Error(r.reason)
  return r.event
}
const lastSeq = async () => (await jetstream(env.nc).jetstreamManager()).streams.info(STREAM_EVENTS)

/** Our namespace's `backfill.resync` events stored after sequence `from`. */
async function resyncsSince(from: number): Promise<number> {
  const consumer = await jetstream(env.nc).consumers.get(STREAM_EVENTS, {
    filter_subjects: ['flexinfer.events.backfill.resync'],
    opt_start_seq: from + 1,
  })
  let n = 0
  for (let i = 0; i < 20; i++) {
    let got = 0
    for await (const m of await consumer.fetch({ max_messages: 500, expires: 1000 })) {
      got++
      const r = decode(m.data)
      if (r.ok && (r.event.data as { namespace?: string }).namespace === env.namespace) n++
    }
    if (got === 0) break
  }
  return n
}

beforeAll(async () => {
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  await world.template('tpl')
  await world.model('m', { node: `node-${env.namespace}` })
  for (let i = 0; i < N; i++) await world.backfill(`b-${i}`, { modelRef: 'm', templateRef: 'tpl', idleFor: '24h' })
  opened = await openDeps({
    natsUrl: env.natsUrl,
    functions: ['lifecycle'],
    kubeconfig: env.kc,
    namespaces: [env.namespace],
    name: 'lifecycle-pending-floor-test',
    logger: createLogger('lifecycle-pending-floor-test'),
  })
  deps = { ...opened, instance, now: () => Date.now() + offsetMs }
  fn = lifecycleFunction()
  // lifecycle's own durable consumer (from new messages on), which nothing pulls: lifecycle is behind.
  await ensureConsumers(deps, scoped(fn, [env.namespace], instance))
  await fn.start?.(deps)
}, 120_000)

afterAll(async () => {
  await fn?.stop?.()
  for (const stream of [STREAM_EVENTS, STREAM_TIMERS]) {
    await opened?.bus.jsm.consumers.delete(stream, consumerName(`lifecycle-${instance}`, stream)).catch(() => {})
  }
  await opened?.close()
  world?.close()
})

it('a resync still queued past the ttl is not published again; once acknowledged, the ttl applies again', {
  timeout: 120_000,
}, async () => {
  let from = (await lastSeq()).state.last_seq
  await fn.handle(sweepEvent(), deps)
  expect(await resyncsSince(from)).toBe(N) // NoState, each once

  offsetMs = 20 * 60_000 // past the pending set's 15-minute ttl; the consumer has acknowledged nothing
  from = (await lastSeq()).state.last_seq
  await fn.handle(sweepEvent(), deps)
  expect(await resyncsSince(from)).toBe(0)

  // Another replica takes and handles them (without deciding anything): the floor moves past them.
  const consumer = await jetstream(env.nc).consumers.get(
    STREAM_EVENTS,
    consumerName(`lifecycle-${instance}`, STREAM_EVENTS),
  )
  for (let i = 0; i < 20; i++) {
    const info = await consumer.info()
    if (info.num_pending === 0 && info.num_ack_pending === 0) break
    for await (const m of await consumer.fetch({ max_messages: 500, expires: 1000 })) m.ack()
  }
  offsetMs = 40 * 60_000 // a ttl after the last sweep that saw them queued
  from = (await lastSeq()).state.last_seq
  await fn.handle(sweepEvent(), deps)
  expect(await resyncsSince(from)).toBe(N) // still without a state: picked again, as before the fix after the ttl
})
