// cancel's coalescing of a burst's DELETEs (functions/cancel/batch.ts), its pure part: a lone cancel goes at once by
// name; what queues meanwhile in a namespace goes in one collection, oldest first and at most `max` per request;
// a Job's DELETE and its pods' sent together, neither waiting for the other's answer; Jobs without an attempt label alone; a refused collection (an older
// RBAC) falls back to one DELETE per Job. The apiserver side is test/integration/backfill/cancel-batch.test.ts.
import { describe, expect, it } from 'vitest'
import { type CollectionApi, DeleteBatcher, type Doomed } from '../../functions/cancel/batch.js'
import { Lane } from '../../pkg/lib/lane.js'

type Call = { kind: string; namespace: string; values: string[] }

/** An API whose calls wait until released, in the order they were sent. */
function fakeApi(opts: { refuseCollections?: boolean } = {}) {
  const calls: Call[] = []
  const pending: (() => void)[] = []
  const record = (kind: string, namespace: string, values: string[]) => {
    calls.push({ kind, namespace, values })
    return new Promise<void>((resolve) => pending.push(resolve))
  }
  const api: CollectionApi = {
    deleteJob: async (namespace, name) => {
      await record('job', namespace, [name])
      return 'deleted'
    },
    deleteJobPods: (namespace, uid) => record('pods', namespace, [uid]),
    deleteAttemptJobs: async (namespace, _backfills, attempts) => {
      if (opts.refuseCollections) throw Object.assign(new Error('forbidden'), { code: 403 })
      await record('jobs', namespace, attempts)
    },
    deleteJobsPods: (namespace, uids) => record('podsOf', namespace, uids),
  }
  const releaseAll = async () => {
    for (let i = 0; i < 1000 && pending.length > 0; i++) {
      for (const r of pending.splice(0)) r()
      await new Promise((r) => setTimeout(r, 0))
    }
  }
  return { api, calls, releaseAll }
}

const doomed = (namespace: string, i: number, labelled = true): Doomed => ({
  namespace,
  jobName: `j${i}`,
  uid: `u${i}`,
  backfillValue: `b${i}`,
  attemptValue: labelled ? `a${i}` : undefined,
})

describe('DeleteBatcher', () => {
  it('sends a lone cancel at once by name, and coalesces what queues behind it, oldest first', async () => {
    const { api, calls, releaseAll } = fakeApi()
    const b = new DeleteBatcher(api, new Lane(8), { perNamespace: 1, max: 3 })
    const results = [0, 1, 2, 3, 4, 5].map((i) => b.delete(doomed('ns', i)))
    await new Promise((r) => setTimeout(r, 0))
    // The Job's DELETE and its pods' at once: the pods' does not wait for the Job's answer.
    expect(calls).toEqual([
      { kind: 'job', namespace: 'ns', values: ['j0'] },
      { kind: 'pods', namespace: 'ns', values: ['u0'] },
    ])
    await releaseAll()
    const done = await Promise.all(results)
    expect(calls.map((c) => `${c.kind}:${c.values.join(',')}`)).toEqual([
      'job:j0',
      'pods:u0',
      'jobs:a1,a2,a3',
      'podsOf:u1,u2,u3',
      'jobs:a4,a5',
      'podsOf:u4,u5',
    ])
    expect(done.map((d) => d.batch)).toEqual([1, 3, 3, 3, 2, 2])
    expect(done.every((d) => d.result === 'deleted' && d.podsAt !== undefined)).toBe(true)
  })

  it('keeps namespaces apart, and sends each Job and its pods together, the Job first', async () => {
    const { api, calls, releaseAll } = fakeApi()
    const b = new DeleteBatcher(api, new Lane(8), { perNamespace: 1 })
    const all = [b.delete(doomed('a', 0)), b.delete(doomed('b', 1)), b.delete(doomed('a', 2)), b.delete(doomed('a', 3))]
    await new Promise((r) => setTimeout(r, 0))
    expect(calls.map((c) => `${c.namespace}:${c.kind}`)).toEqual(['a:job', 'a:pods', 'b:job', 'b:pods'])
    await releaseAll()
    await Promise.all(all)
    const a = calls.filter((c) => c.namespace === 'a').map((c) => `${c.kind}:${c.values.join(',')}`)
    expect(a).toEqual(['job:j0', 'pods:u0', 'jobs:a2,a3', 'podsOf:u2,u3'])
  })

  it('deletes a Job without an attempt label on its own, by name', async () => {
    const { api, calls, releaseAll } = fakeApi()
    const b = new DeleteBatcher(api, new Lane(8), { perNamespace: 1 })
    const all = [0, 1, 2, 3].map((i) => b.delete(doomed('ns', i, i !== 2)))
    await releaseAll()
    await Promise.all(all)
    const kinds = calls.map((c) => `${c.kind}:${c.values.join(',')}`)
    expect(kinds).toContain('job:j2')
    expect(kinds).toContain('jobs:a1,a3')
  })

  it('falls back to one DELETE per Job when the collection is refused, from then on', async () => {
    const { api, calls, releaseAll } = fakeApi({ refuseCollections: true })
    const refused: unknown[] = []
    const b = new DeleteBatcher(api, new Lane(8), { perNamespace: 1, onRefused: (e) => refused.push(e) })
    const first = [0, 1, 2].map((i) => b.delete(doomed('ns', i)))
    await releaseAll()
    expect((await Promise.all(first)).map((d) => d.result)).toEqual(['deleted', 'deleted', 'deleted'])
    const second = [3, 4, 5].map((i) => b.delete(doomed('ns', i)))
    await releaseAll()
    await Promise.all(second)
    expect(refused).toHaveLength(1)
    expect(calls.filter((c) => c.kind === 'job').map((c) => c.values[0])).toEqual(['j0', 'j1', 'j2', 'j3', 'j4', 'j5'])
  })

  it('refuses more waiting deletions than its capacity', async () => {
    const { api, releaseAll } = fakeApi()
    const b = new DeleteBatcher(api, new Lane(1), { perNamespace: 1, capacity: 2 })
    const ok = [b.delete(doomed('ns', 0)), b.delete(doomed('ns', 1)), b.delete(doomed('ns', 2))]
    await expect(b.delete(doomed('ns', 3))).rejects.toThrow(/more than 2/)
    await releaseAll()
    await Promise.all(ok)
  })
})
