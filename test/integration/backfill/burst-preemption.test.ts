// A burst of preemptions (a morning traffic ramp, a gateway failover): one foreground request for each of N models
// whose backfills are all Running, published at once. Every Job must be DELETEd — and every pod of every attempt
// deleted — within a bound far under what cancel took when each DELETE waited for a slot that earlier cancels held
// through their whole reconcile (bookkeeping: reads, KV, status, Events). Times are seen on watches of Jobs and
// pods, so they err high by the watch delay; the bound is generous (the machine is shared), the numbers are logged.
import { type V1Job, type V1Pod, Watch } from '@kubernetes/client-node'
import { jetstream } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { BUCKET_BACKFILLS } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { jobName } from '../../../pkg/core/names.js'
import type { BackfillState } from '../../../pkg/core/state.js'
import { inParallel } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const N = 100
/**
 * A sanity bound on the whole burst, far above what the machine's load alone explains. Measured on the shared
 * 2-core machine: before the fast path max 16.1 s (load average ~5) and 29.9 s (~18), 99 of 100 preemptions
 * recorded before the last DELETE; with it max 2.8–8.3 s (load average 18–25), 0 of 100.
 */
const BOUND_MS = 12_000

const env = useTestEnv()
let runner: Runner
let world: BackfillWorld
const stops: (() => void)[] = []

beforeAll(async () => {
  runner = await startTestRunner(env)
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  for (const stop of stops) stop()
  world?.close()
  await runner?.stop()
})

/** Calls `each` for every watch event on `path` (re-opened if it ends) until the file's end. */
async function watch<T>(path: string, each: (type: string, obj: T) => void) {
  let stopped = false
  let controller: AbortController | undefined
  const start = async () => {
    controller = await new Watch(env.kc).watch(path, {}, each, () => {
      if (!stopped) setTimeout(() => start().catch(() => {}), 100)
    })
  }
  await start()
  stops.push(() => {
    stopped = true
    controller?.abort()
  })
}

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.ceil((p / 100) * values.length) - 1)] ?? NaN

describe('a burst of preemptions', () => {
  it(`deletes all ${N} Jobs and their pods within ${BOUND_MS} ms`, { timeout: 240_000 }, async () => {
    const ns = env.namespace
    await world.template('burst-tpl')
    await inParallel(N, 8, (i) => world.model(`burst-${i}`, { node: `burst-${i}-${ns}` }))
    await inParallel(N, 8, (i) =>
      world.backfill(`burst-${i}`, { modelRef: `burst-${i}`, templateRef: 'burst-tpl', idleFor: '2s' }),
    )
    const names = Array.from({ length: N }, (_, i) => `burst-${i}`)
    await world.waitForStates(`all ${N} backfills Running`, names, (s) => s?.phase === 'Running', 90_000)

    // Deletion seen: the first watch event with a deletionTimestamp, or the object's removal.
    const jobDeleted = new Map<string, number>()
    const podsOf = new Map<string, Set<string>>()
    const podDeleted = new Map<string, number>()
    await watch<V1Job>(`/apis/batch/v1/namespaces/${ns}/jobs`, (type, job) => {
      const name = job.metadata?.name ?? ''
      if ((type === 'DELETED' || job.metadata?.deletionTimestamp) && !jobDeleted.has(name))
        jobDeleted.set(name, Date.now())
    })
    await watch<V1Pod>(`/api/v1/namespaces/${ns}/pods`, (type, pod) => {
      const name = pod.metadata?.name ?? ''
      const job = pod.metadata?.labels?.['job-name']
      if (!job) return
      if (!podsOf.has(job)) podsOf.set(job, new Set())
      podsOf.get(job)?.add(name)
      if ((type === 'DELETED' || pod.metadata?.deletionTimestamp) && !podDeleted.has(name))
        podDeleted.set(name, Date.now())
    })
    // When each backfill's bookkeeping recorded the preemption (its state turning Cancelling), from a KV watch.
    const recordedAt = new Map<string, number>()
    const kv = await new Kvm(env.nc).open(BUCKET_BACKFILLS)
    const updates = await kv.watch({ key: `${ns}.>`, include: 'updates' })
    stops.push(() => updates.stop())
    void (async () => {
      for await (const e of updates) {
        if (e.operation !== 'PUT' || recordedAt.has(e.key)) continue
        if (e.json<BackfillState>().phase === 'Cancelling') recordedAt.set(e.key, Date.now())
      }
    })()
    const jobs = Array.from({ length: N }, (_, i) => jobName(`burst-${i}`, 1))
    // A precondition, not part of what is measured: the Job controller makes the pods at its own pace (its client's
    // 20 requests/s shared by 100 pod creates and 100 status writes), and a busy CI machine once took over 30 s.
    await waitUntil(
      'the pods of every attempt',
      async () => (jobs.every((j) => (podsOf.get(j)?.size ?? 0) > 0) ? true : undefined),
      90_000,
      async () => `${jobs.filter((j) => !podsOf.get(j)?.size).length} of ${N} Jobs still without a pod`,
    )

    // The burst: N foreground requests, published together.
    const js = jetstream(env.nc)
    const sentAt = Date.now()
    await Promise.all(
      Array.from({ length: N }, (_, i) =>
        js.publish(
          'flexinfer.events.foreground.request',
          encode('ai.flexinfer.foreground.request', { namespace: ns, model: `burst-${i}` }),
        ),
      ),
    )
    const podsDeletedAt = (job: string) => {
      const times = [...(podsOf.get(job) ?? [])].map((p) => podDeleted.get(p))
      return times.every((t) => t !== undefined) ? Math.max(...(times as number[])) : undefined
    }
    await waitUntil(
      `all ${N} Jobs and their pods deleted`,
      async () => (jobs.every((j) => jobDeleted.has(j) && podsDeletedAt(j) !== undefined) ? true : undefined),
      60_000,
    )
    const jobMs = jobs.map((j) => (jobDeleted.get(j) as number) - sentAt)
    const podMs = jobs.map((j) => (podsDeletedAt(j) as number) - sentAt)
    console.log(
      `burst of ${N}: Job deleted p50 ${percentile(jobMs, 50)} / p99 ${percentile(jobMs, 99)} / max ${Math.max(...jobMs)} ms; ` +
        `pods deleted p50 ${percentile(podMs, 50)} / p99 ${percentile(podMs, 99)} / max ${Math.max(...podMs)} ms`,
    )
    // DELETE first, bookkeeping after: when the last Job's DELETE is seen, few preemptions are recorded yet. When a
    // DELETE waited for a slot held by earlier cancels' reconciles, nearly all of them were (≥ N − 16).
    const lastDelete = sentAt + Math.max(...jobMs)
    const recordedBefore = [...recordedAt.values()].filter((t) => t < lastDelete).length
    console.log(`preemptions recorded before the last DELETE: ${recordedBefore} of ${N}`)
    expect(recordedBefore).toBeLessThan(N / 2)
    expect(Math.max(...jobMs)).toBeLessThan(BOUND_MS)
    expect(Math.max(...podMs)).toBeLessThan(BOUND_MS)

    // The bookkeeping still happens, after the DELETEs: every backfill records its preemption.
    await world.waitForStates('every preemption recorded', names, (s) => Boolean(s?.counters.preemptions?.foreground))
  })
})
