// demand's bound on the models it tracks (MAX_TRACKED_MODELS) forgets quiet models, never the one a request is
// being handled for: that model's requests must keep sharing one coalesced idle write.
import { describe, expect, it } from 'vitest'
import { COALESCE_MS, Demand } from '../../../functions/demand/index.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { useTestEnv } from '../../env/fixture.js'
import { fakeDeps } from '../../unit/support/deps.js'
import { storedRequest } from '../support/demand.js'

const env = useTestEnv()
const log = createLogger('demand-tracked-models')

const request = (model: string, storedAt: number) => storedRequest(env.namespace, model, storedAt)

describe('demand at its tracked-models bound', () => {
  it('a new model past the bound is tracked: its next request joins the same write', async () => {
    const bus = await Bus.open(env.nc)
    const demand = Demand.overNats(fakeDeps({ bus, now: Date.now, log }), 10)
    const t = Date.now()
    await Promise.all(Array.from({ length: 10 }, (_, i) => demand.handle(request(`quiet-${i}`, t))))
    // All ten are quiet once one coalescing window has passed since their writes (demand forgets a model only then):
    // bounded by that period, COALESCE_MS, and a margin for the timer.
    await new Promise((r) => setTimeout(r, COALESCE_MS + 50))
    const writes = demand.stats.kvWrites
    // Two requests for a new model, the second while the first one's write is in flight.
    const first = demand.handle(request('fresh', t + 1))
    // The quiet ten are forgotten, the new model is not (it was, at once: its next request made a second writer).
    expect(demand.trackedModels).toBe(1)
    const second = demand.handle(request('fresh', t + 2))
    const firstAt = Date.now()
    await first
    await second
    // The second request waits for the trailing write, one coalescing window after the leading one.
    expect(Date.now() - firstAt).toBeGreaterThanOrEqual(COALESCE_MS - 50)
    expect(demand.stats.kvWrites - writes).toBe(2)
    expect(demand.trackedModels).toBe(1)
    await demand.stop()
  })
})
