// lifecycle's resync sweep reads the backfill states from the process's mirror of the bucket (the one the metrics
// exporter keeps current from the republished changes), not with one direct get per backfill (issue 11, item 4: at
// 10,000 backfills those gets made every 30 s sweep 1.2–4.6 s of lifecycle's CPU, 3.6–10% of a core at rest). On the
// real servers, through the runner as deployed: the direct gets for our namespace's states are counted on the wire
// (a subscription on the JetStream API subject) between a sweep's trigger and its log line. Without the mirror: one
// per backfill. The mirror must stay current: a state removed behind lifecycle's back is picked (NoState) by the next
// sweep, and every FULL_STATE_READ_EVERY sweeps one reads the bucket itself.
import type { Subscription } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { FULL_STATE_READ_EVERY, type SweepResult, sweep } from '../../../functions/lifecycle/resync.js'
import { backfillKey } from '../../../pkg/core/names.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const env = useTestEnv()
const N = 40
let world: BackfillWorld
let runner: Runner
let gets: Subscription
const directGets: string[] = []

beforeAll(async () => {
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  await world.template('tpl')
  await world.model('m', { node: `node-${env.namespace}` })
  for (let i = 0; i < N; i++) await world.backfill(`b-${i}`, { modelRef: 'm', templateRef: 'tpl', idleFor: '24h' })
  runner = await startTestRunner(env, { functions: ['lifecycle'] })
  // Every direct get of a state of this namespace, whoever sends it (kv.get asks for the last message on the key's
  // subject: `$JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<namespace>.<backfill>`).
  gets = env.nc.subscribe('$JS.API.DIRECT.GET.KV_flexinfer-backfills.>')
  ;(async () => {
    for await (const m of gets) if (m.subject.includes(`.${env.namespace}.`)) directGets.push(m.subject)
  })()
  await waitUntil(
    `states for all ${N} backfills in the runner's mirror`,
    async () => {
      const keys = [...runner.metrics.states.keys()].filter((k) => k.startsWith(`${env.namespace}.`))
      return keys.length === N ? true : undefined
    },
    120_000,
  )
}, 240_000)

afterAll(async () => {
  gets?.unsubscribe()
  await runner?.stop()
  world?.close()
})

/**
 * One sweep with the runner's Deps (as its lifecycle sweeps, minus the watched copies: the objects are listed) and
 * the direct gets of our states made meanwhile.
 */
async function sweepOnce(): Promise<{ line: SweepResult; gets: number }> {
  const from = directGets.length
  const line = await sweep(runner.deps)
  await runner.deps.bus.nc.flush()
  await env.nc.flush()
  return { line, gets: directGets.length - from }
}

it('a sweep reads the states from the mirror: no direct get per backfill, nothing picked when settled', {
  timeout: 120_000,
}, async () => {
  // Settled: the states' own writes are in; a sweep from the mirror then picks nothing.
  let last = await sweepOnce()
  for (let i = 0; i < 5 && (last.line.statesFrom !== 'mirror' || last.line.picked.length > 0); i++)
    last = await sweepOnce()
  // Failed without the mirror: N direct gets (one per backfill) for every sweep.
  expect(last.gets).toBe(0)
  expect(last.line.statesFrom).toBe('mirror')
  expect(last.line.picked).toEqual([])
})

it('the mirror follows the bucket: a state removed behind its back is picked by the next sweep', {
  timeout: 120_000,
}, async () => {
  const key = backfillKey(env.namespace, 'b-0')
  await runner.deps.bus.kv.backfills.delete(key)
  await waitUntil('the removal in the mirror', async () => (runner.metrics.states.has(key) ? undefined : true))
  // Read from the mirror (a sweep from the bucket would see the removal too).
  let { line } = await sweepOnce()
  if (line.statesFrom !== 'mirror') ({ line } = await sweepOnce())
  expect(line.statesFrom).toBe('mirror')
  expect(line.picked).toContainEqual({ namespace: env.namespace, backfill: 'b-0', reason: 'NoState' })
  // lifecycle re-decides it: the state comes back.
  await waitUntil('b-0 has a state again', async () => (runner.metrics.states.has(key) ? true : undefined), 60_000)
})

it(`every ${FULL_STATE_READ_EVERY} sweeps, one reads the bucket itself`, { timeout: 300_000 }, async () => {
  // Twice the period, back to back: the runner's lifecycle may sweep in between too (its schedule: at most one in
  // these few seconds), taking at most one of the bucket's turns.
  const from: string[] = []
  for (let i = 0; i < 2 * FULL_STATE_READ_EVERY; i++) from.push((await sweepOnce()).line.statesFrom)
  expect(from.filter((f) => f === 'bucket').length).toBeGreaterThanOrEqual(1)
  expect(from.filter((f) => f === 'mirror').length).toBeGreaterThanOrEqual(2 * FULL_STATE_READ_EVERY - 3)
})
