// A watch of the test's own on a namespace's Jobs — an oracle that does not trust the functions: when each Job was
// first seen (ADDED) and when it was first seen marked for deletion (or gone). Re-opened if the apiserver closes it.
import { randomBytes } from 'node:crypto'
import { BatchV1Api, type KubeConfig, Watch } from '@kubernetes/client-node'
import { waitFor } from '../../env/exec.js'

export interface SeenJob {
  /** The name of its first ownerReference (the ModelBackfill, for ours). */
  owner?: string
  addedAt: number
  deletingAt?: number
}

type JobMeta = { metadata?: { uid?: string; deletionTimestamp?: string; ownerReferences?: { name: string }[] } }

/** Watches the namespace's Jobs until stop(); `seen` is keyed by UID. */
export async function watchJobs(kc: KubeConfig, namespace: string) {
  const seen = new Map<string, SeenJob>()
  let stopped = false
  let controller: AbortController | undefined
  const start = async (): Promise<void> => {
    controller = await new Watch(kc).watch(
      `/apis/batch/v1/namespaces/${namespace}/jobs`,
      {},
      (type, job: JobMeta) => {
        const uid = job.metadata?.uid
        if (!uid) return
        let entry = seen.get(uid)
        if (!entry) {
          entry = { owner: job.metadata?.ownerReferences?.[0]?.name, addedAt: Date.now() }
          seen.set(uid, entry)
        }
        if ((job.metadata?.deletionTimestamp || type === 'DELETED') && entry.deletingAt === undefined) {
          entry.deletingAt = Date.now()
        }
      },
      () => {
        if (!stopped) setTimeout(() => start().catch(() => {}), 100)
      },
    )
  }
  await start()
  return {
    seen,
    /** The Jobs seen whose owner is `backfill`. */
    of: (backfill: string) => [...seen.values()].filter((j) => j.owner === backfill),
    /**
     * Resolves once the watch has seen every Job change made before the call: a suspended marker Job (no pods, no
     * labels the functions select) is created and waited for, the watch delivering changes in their order; then
     * deleted.
     */
    async caughtUp(timeoutMs = 10_000) {
      const batch = kc.makeApiClient(BatchV1Api)
      const name = `watch-marker-${randomBytes(4).toString('hex')}`
      const marker = await batch.createNamespacedJob({
        namespace,
        body: {
          metadata: { name },
          spec: {
            suspend: true,
            template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox' }] } },
          },
        },
      })
      const uid = marker.metadata?.uid as string
      await waitFor(`the Job watch to see its marker ${name}`, () => seen.has(uid), { timeoutMs, intervalMs: 20 })
      await batch.deleteNamespacedJob({ name, namespace, propagationPolicy: 'Background' }).catch(() => {})
    },
    stop() {
      stopped = true
      controller?.abort()
    },
  }
}

/**
 * Replaces `obj[key]` with `wrap(original)` (a slowed or filtered real call: the servers stay real) and returns the
 * undo, for the test's afterAll.
 */
export function hook<T extends object, K extends keyof T>(obj: T, key: K, wrap: (original: T[K]) => T[K]): () => void {
  const original = obj[key]
  obj[key] = wrap((original as (...a: unknown[]) => unknown).bind(obj) as T[K])
  return () => {
    obj[key] = original
  }
}
