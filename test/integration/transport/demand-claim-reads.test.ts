// demand's claim read after each idle write (functions/demand/claim-reads.ts) on a nats-server of the test's own:
// it stays linearizable — a claim stored before the read is seen, a model read unclaimed is read again once anything
// was stored in the claims stream — but a busy, unclaimed model no longer costs a STREAM.MSG.GET per idle write:
// the JetStream API requests are counted by a subscription on $JS.API.> (what the server was asked, not demand's
// own counters).
import { KubeConfig } from '@kubernetes/client-node'
import { jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { startRunner } from '../../../cmd/manager/runner.js'
import { catalog, STREAM_FOREGROUND } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { ClaimReads } from '../../../functions/demand/claim-reads.js'
import { toKv } from '../../../pkg/core/state.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { JsRequests } from '../../../pkg/jetstream/js-requests.js'
import { ensureBinaries } from '../../env/binaries.js'
import { sleep, waitFor } from '../../env/exec.js'
import { type OwnNats, startOwnNats } from './own-nats.js'

const SUBJECT = catalog['ai.flexinfer.foreground.request'].subject
let nats: OwnNats
let nc: NatsConnection

beforeAll(async () => {
  nats = await startOwnNats(ensureBinaries().natsServer)
  nc = await connect({ servers: nats.url })
}, 60_000)

afterAll(async () => {
  await nc?.close()
  await nats?.destroy()
})

const claim = (model: string, jobName: string) =>
  toKv({
    namespace: 'reads',
    backfill: model,
    attempt: 1,
    jobName,
    claimedAt: new Date(Date.now() - 60_000).toISOString(),
    idleSince: new Date(Date.now() - 60_000).toISOString(),
  })

/** Counts the JetStream API requests the server is sent, by subject (from the moment the server has the SUB). */
async function sniff() {
  const counts = new Map<string, number>()
  const sub = nc.subscribe('$JS.API.>', {
    callback: (_err, m) => {
      counts.set(m.subject, (counts.get(m.subject) ?? 0) + 1)
    },
  })
  // The requests come on other connections: without the flush the first one could reach the server before the SUB.
  await nc.flush()
  return {
    count: (subject: string) => counts.get(subject) ?? 0,
    /**
     * Every request `sender` sent so far is counted: its flush returns once the server has processed (and routed)
     * them, and this connection's flush once the server's deliveries queued before it have arrived.
     */
    async heard(sender: NatsConnection) {
      await sender.flush()
      await nc.flush()
    },
    /**
     * Requests a process sends on its own timers (demand's coalesced idle writes and their claim reads, after the
     * events were acked) have no event to wait on: wait until the counts stay put for 300 ms.
     */
    async settle() {
      const deadline = Date.now() + 5_000
      for (let last = ''; Date.now() < deadline; ) {
        await nc.flush()
        await sleep(300)
        const now = JSON.stringify([...counts])
        if (now === last) return
        last = now
      }
    },
    stop: () => sub.unsubscribe(),
  }
}

it('a claim read is answered by the stream leader as of after the call, and repeated only when the stream changed', async () => {
  const bus = await Bus.connect(nats.url, 'claim-reads') // provisions the buckets
  const js = new JsRequests(bus.nc)
  const reads = new ClaimReads(js)
  const api = await sniff()
  try {
    expect(await reads.read('model.reads.a')).toBeNull()
    expect(await reads.read('model.reads.a')).toBeNull()
    expect(reads.stats).toMatchObject({ reads: 1, remembered: 1 })
    // Stored behind the reader's back (no watch involved): the next read sees it.
    await bus.kv.claims.put('model.reads.a', claim('a', 'a-1'))
    const held = await reads.read('model.reads.a')
    expect(held?.operation).toBe('PUT')
    expect(JSON.parse(held?.text ?? '{}').jobName).toBe('a-1')
    // A held model is read every time.
    expect((await reads.read('model.reads.a'))?.operation).toBe('PUT')
    expect(reads.stats.reads).toBe(3)
    // Released (a delete marker), then an unrelated claim elsewhere: the model is read again, and found free.
    await bus.kv.claims.delete('model.reads.a')
    expect((await reads.read('model.reads.a'))?.operation).toBe('DEL')
    await bus.kv.claims.put('node.n-1', claim('b', 'b-1'))
    expect((await reads.read('model.reads.a'))?.operation).toBe('DEL')
    expect(reads.stats.reads).toBe(5)
    // Many at once share one version request.
    const before = reads.stats.versions
    await Promise.all(Array.from({ length: 50 }, () => reads.read('model.reads.a')))
    expect(reads.stats.versions - before).toBeLessThanOrEqual(2)
    await api.heard(bus.nc)
    expect(api.count('$JS.API.STREAM.MSG.GET.KV_flexinfer-claims')).toBe(reads.stats.reads)
  } finally {
    api.stop()
    js.close()
    await bus.close()
  }
})

it('demand: idle writes of unclaimed models cost no claim read each; a claimed model is still cancelled', async () => {
  const kc = new KubeConfig()
  kc.loadFromClusterAndUser({ name: 'none', server: 'https://127.0.0.1:1', skipTLSVerify: false }, { name: 'none' })
  const runner = await startRunner({ natsUrl: nats.url, kubeconfig: kc, functions: ['demand'] })
  const jsm = await jetstreamManager(nc)
  const api = await sniff()
  const writes = { n: 0 }
  const writeSub = nc.subscribe('$KV.flexinfer-model-idle.>', {
    callback: () => {
      writes.n++
    },
  })
  const cancels: string[] = []
  const cancelSub = nc.subscribe(catalog['ai.flexinfer.backfill.cancel'].subject, {
    callback: (_e, m) => {
      cancels.push(m.string())
    },
  })
  const MODELS = 10
  const ROUNDS = 6
  try {
    // Time is the subject: six rounds 300 ms apart (longer than demand's 250 ms coalescing): about one idle write per model per round.
    for (let round = 0; round < ROUNDS; round++) {
      for (let i = 0; i < MODELS; i++)
        nc.publish(SUBJECT, encode('ai.flexinfer.foreground.request', { namespace: 'reads', model: `m-${i}` }))
      await sleep(300)
    }
    await waitFor(
      'demand to drain',
      async () => {
        const info = await jsm.consumers.info(STREAM_FOREGROUND, 'demand-foreground')
        return info.num_pending + info.num_ack_pending === 0 && info.delivered.stream_seq > 0
      },
      { timeoutMs: 60_000 },
    )
    await api.settle()
    const reads = api.count('$JS.API.STREAM.MSG.GET.KV_flexinfer-claims')
    // Several writes per model (the rounds), but at most the first read of each model (and a few spare).
    expect(writes.n).toBeGreaterThanOrEqual(MODELS * 3)
    expect(reads).toBeLessThanOrEqual(MODELS + 2)

    // Safety: a model claimed since its last write is read again and its attempt cancelled.
    const bus = await Bus.connect(nats.url, 'claim-writer', { provision: false })
    await bus.kv.claims.put('model.reads.m-3', claim('m-3', 'm-3-job'))
    await bus.close()
    nc.publish(SUBJECT, encode('ai.flexinfer.foreground.request', { namespace: 'reads', model: 'm-3' }))
    await waitFor('the cancel of m-3-job', () => cancels.some((c) => c.includes('m-3-job')), { timeoutMs: 30_000 })
    expect(cancels.some((c) => c.includes('m-3-job'))).toBe(true)
  } finally {
    api.stop()
    writeSub.unsubscribe()
    cancelSub.unsubscribe()
    await runner.stop()
  }
}, 120_000)
