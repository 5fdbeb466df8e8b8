// Disaster recovery on the real servers: the `flexinfer-backfills` and `flexinfer-claims` entries are purged under a
// running workload (one attempt running, one one-shot finished, one waiting). The buckets are shared with the other
// test files, so exactly this namespace's keys are purged — what a lost bucket looks like to these backfills. The
// functions must converge from Kubernetes (status and Jobs) through the resync sweep: no duplicate Job, no rerun of
// the finished one-shot, counters not below what the status proves, and the running Job still preempted by a
// foreground request afterwards.
import { type KV, Kvm } from '@nats-io/kv'
import { afterAll, beforeAll, describe, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { BUCKET_BACKFILLS, BUCKET_CLAIMS } from '../../../events/catalog.js'
import { jobName, modelKey } from '../../../pkg/core/names.js'
import { RESYNC_MS } from '../../../pkg/core/resync.js'
import { SCHEDULER_TICK_MS } from '../../../pkg/core/timer-tick.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, handledAll, waitUntil } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let world: BackfillWorld
let backfills: KV
let claims: KV

beforeAll(async () => {
  runner = await startTestRunner(env)
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  backfills = await new Kvm(env.nc).open(BUCKET_BACKFILLS)
  claims = await new Kvm(env.nc).open(BUCKET_CLAIMS)
})
afterAll(async () => {
  world?.close()
  await runner?.stop()
})

/** Purges every key of this namespace in both buckets; returns how many were purged. */
async function purgeNamespace(): Promise<number> {
  const ns = env.namespace
  let purged = 0
  for (const [kv, mine] of [
    [backfills, (k: string) => k.startsWith(`${ns}.`)],
    [claims, (k: string) => k.startsWith(`model.${ns}.`) || k.endsWith(`-${ns}`)],
  ] as const) {
    const keys: string[] = []
    for await (const k of await kv.keys()) if (mine(k)) keys.push(k)
    for (const k of keys) await kv.purge(k)
    purged += keys.length
  }
  return purged
}

/** BackfillWorld.declare's idleFor. */
const DECLARED_IDLE_FOR_MS = 2_000

describe('flexinfer-backfills and flexinfer-claims purged under a running workload', () => {
  it('converges from Kubernetes: no duplicate Job, no rerun, counters floored, cancel still works', async ({
    expect,
  }) => {
    const run = world.names('run')
    const once = world.names('once')
    const wait = world.names('wait')
    await world.declare(run.backfill)
    await world.declare(once.backfill)
    await world.declare(wait.backfill, { idleFor: '1h' })
    await world.waitFor(run.backfill, 'Running', 'JobRunning')
    await world.waitFor(once.backfill, 'Running', 'JobRunning')
    await world.finishJob(jobName(once.backfill, 1), 'Succeeded')
    await world.waitFor(once.backfill, 'Succeeded', 'JobComplete')
    await world.waitFor(wait.backfill, 'WaitingForIdle', 'IdleWindow')
    const before = await world.state(once.backfill)
    expect(before?.counters.success).toBe(1)

    expect(await purgeNamespace()).toBeGreaterThanOrEqual(5) // 3 states + the running attempt's 2 claims
    expect(await world.state(run.backfill)).toBeNull()

    // The resync sweep finds them without state (NoState) and the decision takes each over.
    const convergence = RESYNC_MS * 2 + 15_000
    const t0 = Date.now()
    await waitUntil(
      'every state rebuilt',
      async () => {
        const states = await Promise.all([run, once, wait].map((n) => world.state(n.backfill)))
        return states.every((s) => s !== null) ? true : undefined
      },
      convergence,
    )
    const converged = Date.now() - t0
    // A negative (no rerun), bounded by the mechanism: a rebuilt state's window (declare's idleFor, 2 s) ends and its
    // timer fires a scheduler tick early at most; then every function has handled what that queued (the positive
    // signal that admit decided), so a rerun would have been admitted by now.
    await new Promise((r) => setTimeout(r, DECLARED_IDLE_FOR_MS + SCHEDULER_TICK_MS))
    await handledAll(runner)
    // No duplicate, no rerun: exactly the Jobs there were.
    expect((await world.jobsOf(run.backfill)).map((j) => j.metadata?.name)).toEqual([jobName(run.backfill, 1)])
    expect((await world.jobsOf(once.backfill)).map((j) => j.metadata?.name)).toEqual([jobName(once.backfill, 1)])
    expect(await world.jobsOf(wait.backfill)).toEqual([])
    const runState = await world.state(run.backfill)
    expect(runState).toMatchObject({ phase: 'Running', jobName: jobName(run.backfill, 1), attempts: 1 })
    expect(runState?.counters.starts).toBe(1)
    const onceState = await world.state(once.backfill)
    expect(onceState).toMatchObject({ phase: 'Succeeded', attempts: 1 })
    expect(onceState?.counters).toMatchObject({ starts: 1, success: 1 })
    expect((await world.state(wait.backfill))?.phase).toBe('WaitingForIdle')

    expect(runState?.takenOver).toBeTruthy()
    const job = await world.job(jobName(run.backfill, 1))
    expect(job?.metadata?.deletionTimestamp).toBeUndefined()
    const claim = await waitUntil('the running attempt’s claim retaken', async () => {
      const e = await claims.get(`model.${modelKey(env.namespace, run.model)}`)
      return e?.operation === 'PUT' ? e.json<{ jobName: string }>() : undefined
    })
    expect(claim.jobName).toBe(jobName(run.backfill, 1))

    // Foreground still wins: demand finds the retaken claim, cancel deletes the Job.
    await world.foreground(run.model)
    await world.waitFor(run.backfill, 'WaitingForIdle', 'IdleWindow')
    expect((await world.state(run.backfill))?.counters.preemptions).toEqual({ foreground: 1 })
    console.log(`disaster recovery: states rebuilt ${converged} ms after the purge (resync period ${RESYNC_MS} ms)`)
  }, 150_000)
})
