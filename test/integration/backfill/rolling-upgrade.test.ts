// A rolling upgrade on the real servers: instances of the release before state versioning keep writing KV values in
// their format (no `v`; shapes of test/fixtures/kv-v1) while this release's functions run beside them under a small
// foreground load. Old writers are played by writing exactly those values: an old admit's backfill state and claim,
// an old demand's idle entries. Nothing may be lost: the new functions read every old value (counters carried on,
// an old claim still excludes, an old idle entry still holds admission back) and foreground still cancels.
import { readFileSync } from 'node:fs'
import { type KV, Kvm } from '@nats-io/kv'
import { afterAll, beforeAll, describe, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { BUCKET_BACKFILLS, BUCKET_CLAIMS, BUCKET_MODEL_IDLE } from '../../../events/catalog.js'
import { backfillKey, jobName, modelKey } from '../../../pkg/core/names.js'
import { sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let world: BackfillWorld
let backfills: KV
let idle: KV
let claims: KV
const fixture = (name: string) =>
  JSON.parse(readFileSync(new URL(`../../fixtures/kv-v1/${name}`, import.meta.url), 'utf8'))

beforeAll(async () => {
  runner = await startTestRunner(env)
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  const kvm = new Kvm(env.nc)
  ;[backfills, idle, claims] = await Promise.all([
    kvm.open(BUCKET_BACKFILLS),
    kvm.open(BUCKET_MODEL_IDLE),
    kvm.open(BUCKET_CLAIMS),
  ])
})
afterAll(async () => {
  world?.close()
  await runner?.stop()
})

/** An old demand instance: the model's idle entry in the old format (no `v`), written as it writes it. */
async function oldIdle(model: string, at: number, requests: number) {
  const value = { ...fixture('model-idle.json'), namespace: env.namespace, model, requests }
  value.lastForegroundAt = new Date(at).toISOString()
  value.updatedAt = new Date().toISOString()
  await idle.put(modelKey(env.namespace, model), JSON.stringify(value))
}

describe('old-format writers beside the new functions', () => {
  it('every old value is read and honoured; nothing is lost', async ({ expect }) => {
    const a = world.names('upg-a') // running when the old admit rewrites its state
    const b = world.names('upg-b') // its model kept busy by an old demand
    const c = world.names('upg-c') // its model claimed by an old admit
    await world.declare(a.backfill)
    await world.waitFor(a.backfill, 'Running', 'JobRunning')

    // Old admit: A's state as the old release writes it (its fields only, no `v`), counters it had counted.
    const counters = { starts: 5, success: 2, failed: 1, preemptions: { foreground: 1 }, usefulSeconds: 321 }
    const running = Object.keys(fixture('backfill-running.json'))
    for (let i = 0; ; i++) {
      // Compare-and-set as the old release writes; a decision of the new functions in between → read again.
      const entry = await backfills.get(backfillKey(env.namespace, a.backfill))
      const current = entry?.json<Record<string, unknown>>() ?? {}
      const oldShape = Object.fromEntries(Object.entries(current).filter(([k]) => running.includes(k)))
      expect('v' in oldShape).toBe(false)
      try {
        await backfills.update(
          backfillKey(env.namespace, a.backfill),
          JSON.stringify({ ...oldShape, counters }),
          entry?.revision ?? 0,
        )
        break
      } catch (err) {
        if (i >= 5) throw err
      }
    }

    // Old admit: a claim on C's model for an attempt of its own (old format).
    const claim = { ...fixture('claim.json'), namespace: env.namespace, backfill: 'old-holder' }
    claim.jobName = jobName('old-holder', 1)
    claim.claimedAt = new Date().toISOString()
    await claims.put(`model.${modelKey(env.namespace, c.model)}`, JSON.stringify(claim))

    // Old demand keeps B's model busy (a request every 300 ms for 6 s) while the new functions decide B.
    await world.declare(b.backfill)
    await world.declare(c.backfill)
    const busyUntil = Date.now() + 6000
    let requests = 0
    const load = (async () => {
      while (Date.now() < busyUntil) {
        await oldIdle(b.model, Date.now(), ++requests)
        await sleep(300)
      }
    })()

    const blocked = await world.waitFor(c.backfill, 'Blocked', 'ConcurrentBackfill')
    expect(blocked.status?.message).toContain(claim.jobName)
    await load
    // B was never admitted while the old demand's entries said the model was busy.
    const bStatus = await world.getBackfill(b.backfill)
    expect(bStatus?.status?.attempts ?? 0).toBe(0)
    expect(await world.jobsOf(b.backfill)).toEqual([])
    // Once quiet for its window, B runs.
    await world.waitFor(b.backfill, 'Running', 'JobRunning')

    // A, decided by the new functions from the old state: still the same attempt; a foreground request cancels
    // it, and the old counters carry on (not reset).
    await world.foreground(a.model)
    const after = await waitUntil('A preempted, counted on from the old counters', async () => {
      const s = await world.state(a.backfill)
      return s?.counters.preemptions.foreground === 2 ? s : undefined
    })
    expect(after.counters).toMatchObject({ starts: 5, success: 2, failed: 1 })
    expect(after.counters.usefulSeconds).toBeGreaterThan(321)
    expect((after as { v?: number }).v).toBe(2) // rewritten by the new release in its format
    const job = await world.job(jobName(a.backfill, 1))
    expect(!job || Boolean(job.metadata?.deletionTimestamp)).toBe(true)
    // No other attempt: the next one needs a fresh window first.
    const others = (await world.jobsOf(a.backfill)).filter((j) => j.metadata?.name !== jobName(a.backfill, 1))
    expect(others).toEqual([])
  }, 120_000)
})
