// cancel gives its handler's place back once its DELETEs are answered, on the real servers: with fewer handlers than
// cancels and every bookkeeping held (a lane this test keeps shut), every Job is still deleted while no cancel has
// ended; each ends once the bookkeeping may run. Held through the bookkeeping, as before, only as many Jobs as handlers went
// — the production failure was a burst of 2,000 preemptions against 1,024 handlers, the later Jobs deleted up to a
// minute late (bench, burst of 2,000).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { cancelFunction } from '../../../functions/cancel/index.js'
import { jobName } from '../../../pkg/core/names.js'
import { Lane } from '../../../pkg/lib/lane.js'
import { scoped } from '../../../pkg/transport/deps.js'
import { type RunningFunction, runOnJetStream } from '../../../pkg/transport/jetstream-adapter.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner, testInstance } from '../support/runner.js'

const N = 6
const HANDLERS = 2

const env = useTestEnv()
const instance = testInstance()
let runner: Runner
let world: BackfillWorld
const started: RunningFunction[] = []
let open = () => {}

beforeAll(async () => {
  runner = await startTestRunner(env, { instance })
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  open()
  for (const f of started) await f.stop()
  world?.close()
  await runner?.stop()
})

describe('cancel with fewer handlers than cancels', () => {
  it(`deletes all ${N} Jobs while every bookkeeping waits, then records each preemption`, {
    timeout: 120_000,
  }, async () => {
    await world.template('release-tpl')
    for (let i = 0; i < N; i++) {
      await world.model(`release-${i}`, { node: `release-${i}-${env.namespace}` })
      await world.backfill(`release-${i}`, { modelRef: `release-${i}`, templateRef: 'release-tpl', idleFor: '2s' })
    }
    const names = Array.from({ length: N }, (_, i) => `release-${i}`)
    await world.waitForStates(`all ${N} backfills Running`, names, (s) => s?.phase === 'Running', 60_000)

    // cancel again, on the same durable consumer: HANDLERS handlers and a bookkeeping lane held shut.
    const index = runner.functions.findIndex((f) => f.name === `cancel-${instance}`)
    const [running] = runner.functions.splice(index, 1)
    await running?.stop()
    const bookkeeping = new Lane(1)
    void bookkeeping.run(
      () =>
        new Promise<void>((resolve) => {
          open = resolve
        }),
    )
    const cancel = cancelFunction({}, { inFlight: HANDLERS, bookkeeping })
    const cancelling = await runOnJetStream(runner.deps, scoped(cancel, [env.namespace], instance))
    started.push(cancelling)

    for (let i = 0; i < N; i++) await world.foreground(`release-${i}`)
    const jobs = Array.from({ length: N }, (_, i) => jobName(`release-${i}`, 1))
    try {
      await waitUntil(
        `all ${N} Jobs deleted, no bookkeeping done`,
        async () => {
          for (const j of jobs) {
            const job = await world.job(j)
            if (job && !job.metadata?.deletionTimestamp) return undefined
          }
          return true
        },
        30_000,
      )
      // No cancel has ended: every one of them still waits for its bookkeeping, so no DELETE waited for one.
      expect(cancelling.stats.handled).toBe(0)
    } finally {
      open()
    }
    await waitUntil('every cancel handled', async () => (cancelling.stats.handled >= N ? true : undefined), 60_000)
    await world.waitForStates('every preemption recorded', names, (s) => Boolean(s?.counters.preemptions?.foreground))
  })
})
