// Replicas are a deployment setting: the provision step gives every stream, KV bucket and durable consumer the
// configured replicas, and changes an existing topology in place (1 → 3 here, as when a single server grows into a
// cluster), idempotently. Also: buckets made with direct gets lose them (pkg/jetstream/buckets.ts).
import { jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { provision } from '../../../cmd/manager/provision.js'
import { BUCKET_BACKFILLS, BUCKET_CLAIMS, BUCKET_MODEL_IDLE } from '../../../events/catalog.js'
import { type NatsOnly, startNats } from '../../env/nats.js'

let nats: NatsOnly
let nc: NatsConnection

beforeAll(async () => {
  nats = await startNats({ cluster: true })
  nc = await connect({ servers: nats.natsUrl.split(',') })
}, 120_000)

afterAll(async () => {
  await nc?.close()
  await nats?.stop()
})

/** Replicas per stream and per durable consumer, as the servers report them (peers in the stream's raft group). */
async function replicas() {
  const jsm = await jetstreamManager(nc)
  const streams: Record<string, { replicas: number; peers: number; allowDirect: boolean }> = {}
  const consumers: Record<string, number> = {}
  for await (const s of jsm.streams.list()) {
    streams[s.config.name] = {
      replicas: s.config.num_replicas,
      peers: 1 + (s.cluster?.replicas?.length ?? 0),
      allowDirect: Boolean(s.config.allow_direct),
    }
    for await (const c of jsm.consumers.list(s.config.name)) {
      consumers[`${s.config.name}/${c.name}`] = 1 + (c.cluster?.replicas?.length ?? 0)
    }
  }
  return { streams, consumers }
}

describe('provision: replicas from configuration', () => {
  it('creates with 1, then scales everything to 3 in place, idempotently', async () => {
    // An older release's bucket: created by Kvm with its defaults (direct gets on).
    await new Kvm(nc).create(BUCKET_CLAIMS, { history: 1 })
    const one = await provision({ natsUrl: nats.natsUrl, replicas: 1, resyncMs: 3_600_000 })
    expect(one.replicas).toBe(1)
    let seen = await replicas()
    for (const name of [...one.streams, ...one.buckets.map((b) => `KV_${b}`)]) {
      expect(seen.streams[name], name).toMatchObject({ replicas: 1, peers: 1 })
    }
    expect(seen.streams[`KV_${BUCKET_CLAIMS}`]?.allowDirect).toBe(false)
    expect(Object.keys(seen.consumers).length).toBeGreaterThan(5)

    for (let run = 0; run < 2; run++) {
      const three = await provision({ natsUrl: nats.natsUrl, replicas: 3, resyncMs: 3_600_000 })
      expect(three.replicas).toBe(3)
      seen = await replicas()
      for (const name of [
        ...three.streams,
        ...[BUCKET_MODEL_IDLE, BUCKET_BACKFILLS, BUCKET_CLAIMS].map((b) => `KV_${b}`),
      ]) {
        expect(seen.streams[name], name).toMatchObject({ replicas: 3, peers: 3, allowDirect: false })
      }
      for (const [name, peers] of Object.entries(seen.consumers)) expect(peers, name).toBe(3)
    }
  }, 180_000)
})
