// When the benchmarks see a preemption land: the Job's and the pods' deletion, on watches of their own (one module
// for bench/run.ts and bench/scale/run.ts). "Job deleted": the first watch event showing its deletionTimestamp, or
// its removal; "pods deleted": every pod the attempt had shows a deletionTimestamp or is gone. The watches' own
// delivery delay (a few ms on loopback) is included, so these err high. There is no kubelet: pods stay Pending,
// unscheduled, and go at once when deleted.
import { BatchV1Api, CoreV1Api, type KubeConfig, makeInformer, type V1Job, type V1Pod } from '@kubernetes/client-node'

/** What a watch saw, as it saw it (bench/deletion-watch-process.ts streams these from a process of its own). */
export type Seen =
  | { k: 'job-deleted'; name: string; at: number }
  | { k: 'pod'; name: string; job: string }
  | { k: 'pod-deleted'; name: string; at: number }

export class DeletionWatch {
  readonly jobDeletedAt = new Map<string, number>()
  /** Job name → the names of every pod seen with its `job-name` label. */
  readonly podsOfJob = new Map<string, Set<string>>()
  readonly podDeletedAt = new Map<string, number>()
  private readonly informers: { stop(): Promise<void> | void }[] = []

  /** Watches the Jobs and pods of `namespace`; resolves once both initial lists are in. */
  static async start(
    kc: KubeConfig,
    namespace: string,
    log: (line: string) => void = () => {},
    onSeen?: (seen: Seen) => void,
  ) {
    const w = new DeletionWatch()
    const jobs = makeInformer(kc, `/apis/batch/v1/namespaces/${namespace}/jobs`, () =>
      kc.makeApiClient(BatchV1Api).listNamespacedJob({ namespace }),
    )
    const seenJob = (job: V1Job, removed = false) => {
      const name = job.metadata?.name
      if (name && (removed || job.metadata?.deletionTimestamp) && !w.jobDeletedAt.has(name)) {
        w.jobDeletedAt.set(name, Date.now())
        onSeen?.({ k: 'job-deleted', name, at: w.jobDeletedAt.get(name) as number })
      }
    }
    jobs.on('update', (j) => seenJob(j))
    jobs.on('delete', (j) => seenJob(j, true))
    jobs.on('error', (err) => log(`job watch: ${String(err).slice(0, 200)}`))
    const pods = makeInformer(kc, `/api/v1/namespaces/${namespace}/pods`, () =>
      kc.makeApiClient(CoreV1Api).listNamespacedPod({ namespace }),
    )
    const seenPod = (pod: V1Pod, removed = false) => {
      const name = pod.metadata?.name
      const job = pod.metadata?.labels?.['job-name']
      if (!name || !job) return
      const set = w.podsOfJob.get(job) ?? new Set<string>()
      w.podsOfJob.set(job, set)
      if (!set.has(name)) onSeen?.({ k: 'pod', name, job })
      set.add(name)
      if ((removed || pod.metadata?.deletionTimestamp) && !w.podDeletedAt.has(name)) {
        w.podDeletedAt.set(name, Date.now())
        onSeen?.({ k: 'pod-deleted', name, at: w.podDeletedAt.get(name) as number })
      }
    }
    pods.on('add', (p) => seenPod(p))
    pods.on('update', (p) => seenPod(p))
    pods.on('delete', (p) => seenPod(p, true))
    pods.on('error', (err) => log(`pod watch: ${String(err).slice(0, 200)}`))
    w.informers.push(jobs, pods)
    await Promise.all([jobs.start(), pods.start()])
    return w
  }

  /** The pods of `job` seen so far. */
  podsOf(job: string): string[] {
    return [...(this.podsOfJob.get(job) ?? [])]
  }

  /** The pods of `job`, waiting up to `timeoutMs` for the Job controller to make one (none: []). */
  async podsNow(job: string, timeoutMs = 5000): Promise<string[]> {
    const deadline = Date.now() + timeoutMs
    while (!this.podsOfJob.get(job)?.size && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
    return this.podsOf(job)
  }

  /** When the last of `pods` was seen deleted; undefined while one is not, or for none. */
  podsDeletedAt(pods: string[]): number | undefined {
    const times = pods.map((p) => this.podDeletedAt.get(p))
    return pods.length && times.every((t) => t !== undefined) ? Math.max(...(times as number[])) : undefined
  }

  /** When `job` and every one of `pods` (possibly none) were seen deleted; undefined: not yet. */
  goneAt(job: string, pods: string[]): number | undefined {
    const at = this.jobDeletedAt.get(job)
    if (at === undefined) return undefined
    if (!pods.length) return at
    const podsAt = this.podsDeletedAt(pods)
    return podsAt === undefined ? undefined : Math.max(at, podsAt)
  }

  async stop() {
    for (const i of this.informers) await i.stop()
  }
}
