// cancel's collection DELETEs (functions/cancel/batch.ts) on the real apiserver and Job controller: the cancels of
// one namespace that queue while a DELETE is in flight go as one DELETE of the Job collection (selected by our
// backfill label and their attempt labels) and one of their pods (by the Jobs' UIDs). Exactly those Jobs and pods go:
// never a foreign Job with a similar name or our attempt label copied, never a Job without our backfill label, never
// a same-named successor of a cancelled Job.
import { BatchV1Api, CoreV1Api, type V1Job } from '@kubernetes/client-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DeleteBatcher, type Doomed } from '../../../functions/cancel/batch.js'
import { attemptLabelValue, backfillLabelValue, LABEL_ATTEMPT, LABEL_BACKFILL } from '../../../pkg/core/names.js'
import { Kube } from '../../../pkg/kube/client.js'
import { CONTROLLER_UID_LABEL } from '../../../pkg/kube/resources.js'
import { Lane } from '../../../pkg/lib/lane.js'
import { useTestEnv } from '../../env/fixture.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
let kube: Kube
let batch: BatchV1Api
let core: CoreV1Api

beforeAll(() => {
  kube = new Kube(env.kc)
  batch = env.kc.makeApiClient(BatchV1Api)
  core = env.kc.makeApiClient(CoreV1Api)
})
afterAll(() => kube?.close())

const N = 50

function job(name: string, labels: Record<string, string>): V1Job {
  return {
    metadata: { name, namespace: env.namespace, labels },
    spec: {
      backoffLimit: 0,
      template: { spec: { restartPolicy: 'Never', containers: [{ name: 'w', image: 'busybox' }] } },
    },
  }
}

const ours = (backfill: string, name: string, admittedAt: string) => ({
  [LABEL_BACKFILL]: backfillLabelValue(backfill),
  [LABEL_ATTEMPT]: attemptLabelValue('owner-uid', name, admittedAt),
})

async function create(j: V1Job): Promise<Doomed> {
  const made = await batch.createNamespacedJob({ namespace: env.namespace, body: j })
  const labels = made.metadata?.labels ?? {}
  return {
    namespace: env.namespace,
    jobName: made.metadata?.name as string,
    uid: made.metadata?.uid as string,
    backfillValue: labels[LABEL_BACKFILL] as string,
    attemptValue: labels[LABEL_ATTEMPT],
  }
}

/** Names of the Jobs in the namespace that are not being deleted. */
async function liveJobs(): Promise<Set<string>> {
  const list = await batch.listNamespacedJob({ namespace: env.namespace })
  return new Set(list.items.filter((j) => !j.metadata?.deletionTimestamp).map((j) => j.metadata?.name as string))
}

/** Live (not deleting) pods of these Job UIDs. */
async function livePods(uids: string[]): Promise<number> {
  const list = await core.listNamespacedPod({ namespace: env.namespace })
  const set = new Set(uids)
  return list.items.filter(
    (p) => !p.metadata?.deletionTimestamp && set.has(p.metadata?.labels?.[CONTROLLER_UID_LABEL] ?? ''),
  ).length
}

describe('collection DELETEs of a burst of cancels', () => {
  it(`deletes exactly the ${N} cancelled Jobs and their pods in one request each`, { timeout: 120_000 }, async () => {
    const doomed: Doomed[] = []
    for (let i = 0; i < N; i++) {
      const name = `bf-${i}-1-abcdef12`
      doomed.push(await create(job(name, ours(`bf-${i}`, name, '2026-01-01T00:00:00.000Z'))))
    }
    // Foreign: a similar name without our labels; our attempt label copied onto a Job without our backfill label;
    // ours, of a cancelled backfill, but another attempt (not cancelled).
    const similar = await create(job('bf-0-1-abcdef12-x', {}))
    const copied = await create(job('copied', { [LABEL_ATTEMPT]: doomed[1]?.attemptValue as string }))
    const sibling = await create(job('bf-2-2-abcdef12', ours('bf-2', 'bf-2-2-abcdef12', '2026-01-02T00:00:00.000Z')))
    const kept = [similar, copied, sibling]
    const all = [...doomed, ...kept].map((d) => d.uid)
    await waitUntil(
      'the Job controller made every pod',
      () => livePods(all).then((n) => (n === all.length ? true : undefined)),
      60_000,
    )

    // One send in flight per namespace: the first cancel goes alone (by name), the other 49 queue and go together
    // (one collection: the request's bound raised above them; the default keeps collections small).
    const batcher = new DeleteBatcher(kube, new Lane(8), { perNamespace: 1, max: N })
    const before = kube.requests.write
    const results = await Promise.all(doomed.map((d) => batcher.delete(d)))
    expect(results.every((r) => r.result === 'deleted')).toBe(true)
    expect(batcher.stats).toEqual({ single: 1, collections: 1, collected: N - 1 })
    // Job + pods for the first, one collection of each for the rest.
    expect(kube.requests.write - before).toBe(4)

    const live = await liveJobs()
    for (const d of doomed) expect(live.has(d.jobName), d.jobName).toBe(false)
    for (const k of kept) expect(live.has(k.jobName), k.jobName).toBe(true)
    expect(await livePods(doomed.map((d) => d.uid))).toBe(0)
    expect(await livePods(kept.map((k) => k.uid))).toBe(kept.length)
  })

  it('a cancel whose Job was replaced by a same-named successor deletes neither the successor nor its pods', {
    timeout: 150_000,
  }, async () => {
    const name = 'succ-1-abcdef12'
    const old = await create(job(name, ours('succ', name, '2026-01-01T00:00:00.000Z')))
    // A running attempt has its pod (and the Job controller's expectations for this name are met before it goes).
    await waitUntil('the old pod made', () => livePods([old.uid]).then((n) => (n === 1 ? true : undefined)), 60_000)
    await batch.deleteNamespacedJob({ namespace: env.namespace, name, propagationPolicy: 'Background' })
    await waitUntil('the old Job is gone', async () => ((await gone(name)) ? true : undefined), 30_000)
    // The same name, a later admission (a fresh window reuses the attempt number).
    const successor = await create(job(name, ours('succ', name, '2026-01-01T00:05:00.000Z')))
    const other = await create(job('other-1-abcdef12', ours('other', 'other-1-abcdef12', '2026-01-01T00:00:00.000Z')))
    const third = await create(job('third-1-abcdef12', ours('third', 'third-1-abcdef12', '2026-01-01T00:00:00.000Z')))
    await waitUntil('pods made', () => livePods([successor.uid]).then((n) => (n === 1 ? true : undefined)), 60_000)

    // The watched copy still had the old Job: its UID and attempt label are what the cancel carries.
    const batcher = new DeleteBatcher(kube, new Lane(8), { perNamespace: 1 })
    await Promise.all([third, old, other].map((d) => batcher.delete(d)))
    expect(batcher.stats.collections).toBe(1)
    const live = await liveJobs()
    expect(live.has(name)).toBe(true)
    expect((await batch.readNamespacedJob({ namespace: env.namespace, name })).metadata?.uid).toBe(successor.uid)
    expect(live.has('other-1-abcdef12')).toBe(false)
    expect(await livePods([successor.uid])).toBe(1)
  })
})

async function gone(name: string): Promise<boolean> {
  try {
    await batch.readNamespacedJob({ namespace: env.namespace, name })
    return false
  } catch {
    return true
  }
}
