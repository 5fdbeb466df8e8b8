// Provision creates and updates the functions' durable consumers (ensureConsumers) while the cluster may be changing
// a leader: a server crashed or rolling (the JetStream meta leader, through which every consumer is created), a
// consumer's leader moving (after its stream was scaled to 3 replicas, a stepdown). Meanwhile a request is not
// answered (nats.js "TimeoutError: timeout") or answered "JetStream system temporarily unavailable", for longer than
// one request's deadline; each consumer call must ride that out as the stream and bucket steps do
// (pkg/jetstream/streams.ts, buckets.ts).
// Seen failing with the calls bare (3 runs of 3): each test with nats.js's "TimeoutError: timeout" after 5 s, no
// frame of ours — the CI's error in provision-replicas.test.ts.
import { AckPolicy, DeliverPolicy } from '@nats-io/jetstream'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { STREAM_EVENTS, STREAM_TIMERS } from '../../../events/catalog.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { acrossLeaderChange } from '../../../pkg/jetstream/errors.js'
import { consumerName } from '../../../pkg/jetstream/names.js'
import { ACK_WAIT_MS, CONSUMER_MAX_DELIVER, ensureConsumers } from '../../../pkg/transport/consumers.js'
import type { EventFunction } from '../../../pkg/transport/function.js'
import { waitFor } from '../../env/exec.js'
import { type NatsOnly, startNats } from '../../env/nats.js'

let nats: NatsOnly
let bus: Bus

beforeAll(async () => {
  nats = await startNats({ cluster: true })
  bus = await Bus.connect(nats.natsUrl, 'provision-consumers', { replicas: 3 })
}, 120_000)

afterAll(async () => {
  await bus?.close()
  await nats?.stop()
})

/** A function with a consumer on two streams (replicated: 3), each on subjects of its own. */
const probe = (name: string): EventFunction => ({
  name,
  subscriptions: [
    { stream: STREAM_EVENTS, subjects: [`flexinfer.events.k8s.${name}.>`], deliverNew: true },
    { stream: STREAM_TIMERS, subjects: [`flexinfer.events.timer.${name}.>`] },
  ],
  concurrency: 4,
  handle: async () => {},
})

/** The function's consumers as their leaders report them (read across a stepdown still under way). */
const consumers = (fn: EventFunction) =>
  Promise.all(
    fn.subscriptions.map((s) =>
      acrossLeaderChange('reading a consumer', () => bus.jsm.consumers.info(s.stream, consumerName(fn.name, s.stream))),
    ),
  )

/** The consumers' leaders step down ($JS.API.CONSUMER.LEADER.STEPDOWN); resolves once each has answered. */
const stepDown = (fns: EventFunction[]) =>
  Promise.all(
    fns.flatMap((fn) =>
      fn.subscriptions.map(async (s) => {
        const subject = `$JS.API.CONSUMER.LEADER.STEPDOWN.${s.stream}.${consumerName(fn.name, s.stream)}`
        const reply = await bus.nc.request(subject, undefined, { timeout: 5_000 }).catch((err) => err as Error)
        return reply instanceof Error ? String(reply) : JSON.parse(new TextDecoder().decode(reply.data))
      }),
    ),
  )

it('updates consumers, and migrates one to AckAll, while their leaders step down', async () => {
  const updated = probe('updated')
  const migrated = probe('migrated')
  await ensureConsumers({ bus }, updated)
  await ensureConsumers({ bus }, migrated)
  // Every leader steps down just before the calls (each then unanswered or "temporarily unavailable" until a new one
  // is elected), and again every 300 ms while they run (4 times at most), so that later calls meet an election too.
  for (const reply of await stepDown([updated, migrated])) expect(reply, 'stepdown').toMatchObject({ success: true })
  let running = true
  const again = (async () => {
    for (let round = 0; round < 4 && running; round++) {
      await new Promise((r) => setTimeout(r, 300))
      if (running) await stepDown([updated, migrated])
    }
  })()
  const started = Date.now()
  await Promise.all([
    ensureConsumers({ bus }, updated, { ackWaitMs: 20_000 }),
    ensureConsumers({ bus }, { ...migrated, ackAll: true }, { migrationSettleMs: 1_000 }),
  ]).finally(() => {
    running = false
  })
  await again
  console.log(`consumers updated and migrated in ${Date.now() - started} ms across their leaders' stepdowns`)
  for (const info of await consumers(updated))
    expect(info.config).toMatchObject({ ack_policy: AckPolicy.Explicit, ack_wait: 20_000 * 1_000_000 })
  for (const info of await consumers(migrated))
    expect(info.config).toMatchObject({ ack_policy: AckPolicy.All, deliver_policy: DeliverPolicy.StartSequence })
}, 60_000)

it('creates consumers across the loss of the JetStream meta leader', async () => {
  const created = probe('created')
  const leader = await waitFor(
    'a JetStream meta leader',
    async () => {
      for (const s of nats.live()) {
        const r = await fetch(`${s.monitorUrl}/jsz`, { signal: AbortSignal.timeout(2_000) }).catch(() => undefined)
        const jsz = r?.ok ? ((await r.json()) as { meta_cluster?: { leader?: string } }) : undefined
        if (jsz?.meta_cluster?.leader) return jsz.meta_cluster.leader
      }
      return undefined
    },
    { timeoutMs: 30_000 },
  )
  // A crash (kill -9, no hand-off): nothing creates a consumer until the two others have elected a new leader.
  await nats.kill(leader)
  try {
    const started = Date.now()
    await ensureConsumers({ bus }, created)
    console.log(`consumers created ${Date.now() - started} ms after the meta leader ${leader} was killed`)
  } finally {
    await nats.restart(leader)
  }
  const [events, timers] = await consumers(created)
  const common = {
    ack_policy: AckPolicy.Explicit,
    ack_wait: ACK_WAIT_MS * 1_000_000,
    max_deliver: CONSUMER_MAX_DELIVER,
  }
  expect(events?.config).toMatchObject({
    ...common,
    deliver_policy: DeliverPolicy.New,
    filter_subjects: ['flexinfer.events.k8s.created.>'],
  })
  expect(timers?.config).toMatchObject({
    ...common,
    deliver_policy: DeliverPolicy.All,
    filter_subjects: ['flexinfer.events.timer.created.>'],
  })
}, 90_000)
