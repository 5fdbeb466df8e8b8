// demand acknowledges a foreground request only once everything it owes that request is done: the idle-state write
// AND the look at the claims that may turn it into a cancel. A failure in between fails the request (it is
// redelivered) instead of acknowledging it and losing the cancel for good.
import { jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { afterAll, describe, expect, it } from 'vitest'
import { Demand } from '../../../functions/demand/index.js'
import { Bus } from '../../../jetstream/bus.js'
import { createLogger } from '../../../observability/log.js'
import type { Deps } from '../../../transport/function.js'
import { useTestEnv } from '../../env/fixture.js'
import { storedRequest } from '../support/demand.js'

const env = useTestEnv()
const log = createLogger('demand-faults')
const bucket = `claims-lost-${Date.now()}`
afterAll(async () => {
  await (await jetstreamManager(env.nc)).streams.delete(`KV_${bucket}`).catch(() => {})
})

const request = (model: string) => storedRequest(env.namespace, model)

describe('demand under faults', () => {
  it('a claims read that fails after the idle write fails the request instead of acknowledging it', async () => {
    const shared = await Bus.open(env.nc)
    const claims = await new Kvm(env.nc).create(bucket, { history: 1 })
    const bus = new Bus(env.nc, shared.jsm, { ...shared.kv, claims })
    const demand = Demand.overNats({ bus, now: Date.now, log } as unknown as Deps)
    // The claims bucket goes away between two requests (a lost stream, a permission change, a server fault).
    await expect(demand.handle(request('m-ok'))).resolves.toBeUndefined()
    await shared.jsm.streams.delete(`KV_${bucket}`)
    await expect(demand.handle(request('m-lost'))).rejects.toThrow()
    // The idle state itself was written: only the acknowledgement is held back.
    const idle = await shared.kv.idle.get(`${env.namespace}.m-lost`)
    expect(idle?.operation).toBe('PUT')
  })

  it('a gateway sending ever-new model names cannot grow demand without bound', async () => {
    const shared = await Bus.open(env.nc)
    const demand = Demand.overNats({ bus: shared, now: Date.now, log } as unknown as Deps, 100)
    for (let round = 0; round < 5; round++) {
      // 200 fresh names a round, each written once; the previous rounds' are quiet by now.
      await Promise.all(Array.from({ length: 200 }, (_, i) => demand.handle(request(`random-${round}-${i}`))))
      await new Promise((r) => setTimeout(r, 300))
    }
    expect(demand.trackedModels).toBeLessThanOrEqual(200 + 100)
  })
})
