// The provision step (as the provision user of deploy/nats/auth.conf) moves demand's durable consumer from explicit acks to
// AckAll (pkg/jetstream/consumer-migration.ts): JetStream cannot change the policy in place. An older release's consumer
// with a backlog — some requests handled and acked, some held unacked by an instance still running, the rest never
// delivered — is re-created so that every request is delivered exactly once overall: none lost, none redelivered.
// Seen failing before the migration existed (provision: "ack policy can not be updated").
import { AckPolicy, DeliverPolicy, type JsMsg, jetstream, jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { provision } from '../../../cmd/manager/provision.js'
import { catalog, STREAM_FOREGROUND } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { natsServerOptions } from '../../../pkg/jetstream/connect.js'
import { ensureBinaries } from '../../env/binaries.js'
import { type AuthNats, startAuthNats } from '../support/deploy.js'

const SUBJECT = catalog['ai.flexinfer.foreground.request'].subject
const DURABLE = 'demand-foreground'
let nats: AuthNats
const conns: NatsConnection[] = []
const as = async (user: Parameters<AuthNats['url']>[0]) => {
  const nc = await connect(natsServerOptions(nats.url(user)))
  conns.push(nc)
  return nc
}

beforeAll(async () => {
  nats = await startAuthNats(ensureBinaries().natsServer)
}, 60_000)

afterAll(async () => {
  for (const nc of conns) await nc.close().catch(() => {})
  await nats?.stop()
})

/** Up to `n` messages from the consumer (bounded by count and time). */
async function pull(nc: NatsConnection, n: number, timeoutMs = 10_000): Promise<JsMsg[]> {
  const consumer = await jetstream(nc).consumers.get(STREAM_FOREGROUND, DURABLE)
  const got: JsMsg[] = []
  const deadline = Date.now() + timeoutMs
  while (got.length < n && Date.now() < deadline) {
    const batch = await consumer.fetch({ max_messages: n - got.length, expires: 1_000 })
    for await (const m of batch) got.push(m)
  }
  return got
}

// Batched acks are opt-in (functions/demand/README.md): this deployment asks for them.
beforeAll(() => {
  process.env.DEMAND_ACK_POLICY = 'all'
})
afterAll(() => {
  delete process.env.DEMAND_ACK_POLICY
})

it('provision migrates an explicit-ack demand consumer to AckAll: every backlogged request delivered exactly once', async () => {
  const admin = await as('provision')
  const jsm = await jetstreamManager(admin)
  // An older release's topology: the streams, and demand's consumer with explicit acks (from new messages on).
  await provision({ natsUrl: nats.url('provision'), consumers: [], resyncMs: 3_600_000 })
  // Before the consumer existed: never to be delivered (deliver_policy new).
  const gateway = jetstream(await as('gateway'))
  await gateway.publish(SUBJECT, encode('ai.flexinfer.foreground.request', { namespace: 'mig', model: 'before' }))
  await jsm.consumers.add(STREAM_FOREGROUND, {
    durable_name: DURABLE,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.New,
    ack_wait: 30_000_000_000,
    max_deliver: 11,
    max_ack_pending: 65_536,
    filter_subjects: [SUBJECT],
  })
  const ids: number[] = []
  for (let i = 0; i < 300; i++) {
    const ack = await gateway.publish(
      SUBJECT,
      encode('ai.flexinfer.foreground.request', { namespace: 'mig', model: `m-${i}` }),
    )
    ids.push(ack.seq)
  }
  // The old demand: handled and acked 100 (out of order at the end: 1..90 and 96..100 acked, 91..95 not yet),
  // holds 20 more unacked when provision starts.
  const old = await as('demand')
  const first = await pull(old, 120)
  expect(first).toHaveLength(120)
  const handledByOld = new Set<number>()
  for (const [i, m] of first.entries()) {
    if (i < 90 || (i >= 95 && i < 100)) {
      m.ack()
      handledByOld.add(m.seq)
    }
  }
  await old.flush()
  const holding = first.filter((m) => !handledByOld.has(m.seq))
  // The instance still running the old release finishes what it holds while provision waits for it.
  const finishing = new Promise<void>((resolve) =>
    setTimeout(async () => {
      for (const m of holding) {
        m.ack()
        handledByOld.add(m.seq)
      }
      await old.flush()
      resolve()
    }, 1_500),
  )

  await provision({ natsUrl: nats.url('provision'), resyncMs: 3_600_000, migrationSettleMs: 20_000 })
  await finishing
  const info = await jsm.consumers.info(STREAM_FOREGROUND, DURABLE)
  expect(info.config.ack_policy).toBe(AckPolicy.All)

  // The new release's demand: everything the old one did not handle, once, on its first delivery.
  const fresh = await as('demand')
  const rest = await pull(fresh, 300, 15_000)
  const again = await pull(fresh, 1, 1_500) // nothing more comes
  expect(again).toEqual([])
  const seqs = rest.map((m) => m.seq)
  expect(new Set(seqs).size).toBe(seqs.length)
  expect(rest.every((m) => m.info.deliveryCount === 1)).toBe(true)
  expect(seqs.filter((s) => handledByOld.has(s))).toEqual([])
  expect([...handledByOld, ...seqs].sort((a, b) => a - b)).toEqual(ids)
  rest.at(-1)?.ack()
  await fresh.flush()

  // Provision again: the consumer is left as it is (no second migration, nothing delivered again).
  await provision({ natsUrl: nats.url('provision'), resyncMs: 3_600_000, migrationSettleMs: 20_000 })
  expect(await pull(fresh, 1, 1_500)).toEqual([])
}, 120_000)
