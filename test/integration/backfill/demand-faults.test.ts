// demand acknowledges a foreground request only once everything it owes that request is done: the idle-state write
// AND the look at the claims that may turn it into a cancel. A failure in between fails the request (it is
// redelivered) instead of acknowledging it and losing the cancel for good.
import { jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { afterAll, describe, expect, it } from 'vitest'
import { STREAM_EVENTS } from '../../../events/catalog.js'
import { Demand } from '../../../functions/demand/index.js'
import { modelClaimKey } from '../../../pkg/core/names.js'
import { toKv } from '../../../pkg/core/state.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { lastBySubject } from '../../../pkg/jetstream/streams.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { useTestEnv } from '../../env/fixture.js'
import { fakeDeps } from '../../unit/support/deps.js'
import { storedRequest } from '../support/demand.js'

const env = useTestEnv()
const log = createLogger('demand-faults')
const bucket = `claims-lost-${Date.now()}`
const idleBucket = `idle-full-${Date.now()}`
afterAll(async () => {
  const jsm = await jetstreamManager(env.nc)
  for (const b of [bucket, idleBucket]) await jsm.streams.delete(`KV_${b}`).catch(() => {})
})

const request = (model: string) => storedRequest(env.namespace, model)

describe('demand under faults', () => {
  it('a claims read that fails after the idle write fails the request instead of acknowledging it', async () => {
    const shared = await Bus.open(env.nc)
    const claims = await new Kvm(env.nc).create(bucket, { history: 1 })
    const bus = new Bus(env.nc, shared.jsm, { ...shared.kv, claims })
    const demand = Demand.overNats(fakeDeps({ bus, now: Date.now, log }))
    // The claims bucket goes away between two requests (a lost stream, a permission change, a server fault).
    await expect(demand.handle(request('m-ok'))).resolves.toBeUndefined()
    await shared.jsm.streams.delete(`KV_${bucket}`)
    await expect(demand.handle(request('m-lost'))).rejects.toThrow()
    // The idle state itself was written: only the acknowledgement is held back.
    const idle = await shared.kv.idle.get(`${env.namespace}.m-lost`)
    expect(idle?.operation).toBe('PUT')
  })

  it('an idle bucket that refuses writes does not hold back the cancel of a claimed window', async () => {
    // The idle bucket full (its stream at its limit, discarding new writes), as an operator's limit or quota makes
    // it; the admission too recent for the watched claims (demand is not started: no watch), so only the read after
    // the idle write can find it. Failed without the fix: the request failed with the write, and no cancel was sent.
    const shared = await Bus.open(env.nc)
    const idle = await new Kvm(env.nc).create(idleBucket, { history: 1 })
    await idle.put('filler', '{}')
    const jsm = shared.jsm
    const info = await jsm.streams.info(`KV_${idleBucket}`)
    await jsm.streams.update(`KV_${idleBucket}`, { ...info.config, max_msgs: 1 })
    const bus = new Bus(env.nc, jsm, { ...shared.kv, idle })
    const demand = Demand.overNats(fakeDeps({ bus, now: Date.now, log }))
    const jobName = `full-1-${Date.now()}`
    const now = Date.now()
    await shared.kv.claims.put(
      modelClaimKey(env.namespace, 'm-full'),
      toKv({
        namespace: env.namespace,
        backfill: 'full',
        attempt: 1,
        jobName,
        claimedAt: new Date(now - 2_000).toISOString(),
        idleSince: new Date(now - 62_000).toISOString(),
      }),
    )
    await expect(demand.handle(request('m-full'))).rejects.toThrow(/maximum messages/i)
    const cancel = await lastBySubject(jsm, STREAM_EVENTS, 'flexinfer.events.backfill.cancel')
    expect(cancel?.json<{ data: { jobName: string } }>().data.jobName).toBe(jobName)
  })

  it("two demand replicas: a request older than the other's write never moves the idle state back", async () => {
    // Replica A stores the model's newest request; replica B, handling older ones (a redelivery, a lagging
    // consumer), first finds A's newer time on its compare-and-set and leaves it — and then, for a request between
    // the two, wrote over it by compare-and-set on the revision it had just read: the window measured from a request
    // that was not the last (the simulation: a Job created 15.8 s after a request, inside a 16 s window). Failed
    // without the fix: the stored time went back to the middle request's.
    const bus = await Bus.open(env.nc)
    const a = Demand.overNats(fakeDeps({ bus, now: Date.now, log }))
    const b = Demand.overNats(fakeDeps({ bus, now: Date.now, log }))
    const now = Date.now()
    const model = `m-replicas-${now}`
    await a.handle(storedRequest(env.namespace, model, now - 1_000))
    await b.handle(storedRequest(env.namespace, model, now - 5_000))
    await b.handle(storedRequest(env.namespace, model, now - 3_000))
    const stored = await bus.kv.idle.get(`${env.namespace}.${model}`)
    expect(stored?.json<{ lastForegroundAt: string }>().lastForegroundAt).toBe(new Date(now - 1_000).toISOString())
  })

  it('a gateway sending ever-new model names cannot grow demand without bound', async () => {
    const shared = await Bus.open(env.nc)
    const demand = Demand.overNats(fakeDeps({ bus: shared, now: Date.now, log }), 100)
    for (let round = 0; round < 5; round++) {
      // 200 fresh names a round, each written once; the previous rounds' are quiet by now.
      await Promise.all(Array.from({ length: 200 }, (_, i) => demand.handle(request(`random-${round}-${i}`))))
      await new Promise((r) => setTimeout(r, 300))
    }
    expect(demand.trackedModels).toBeLessThanOrEqual(200 + 100)
  })
})
