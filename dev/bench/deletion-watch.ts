// When the benchmarks see a preemption land: the Job's and the pods' deletion, on watches of their own (one module
// for dev/bench/run.ts and dev/bench/scale/run.ts). "Job deleted": the first watch event showing its deletionTimestamp, or
// its removal; "pods deleted": every pod the attempt had shows a deletionTimestamp or is gone. The watches' own
// delivery delay (a few ms on loopback) is included, so these err high. There is no kubelet: pods stay Pending,
// unscheduled, and go at once when deleted.
import { BatchV1Api, CoreV1Api, type KubeConfig, makeInformer, type V1Job, type V1Pod } from '@kubernetes/client-node'

/** What a watch saw, as it saw it (dev/bench/deletion-watch-process.ts streams these from a process of its own). */
export type Seen =
  | { k: 'job-deleted'; name: string; at: number }
  | { k: 'pod'; name: string; job: string }
  | { k: 'pod-deleted'; name: string; at: number }

export class DeletionWatch {
  readonly jobDeletedAt = new Map<string, number>()
  /** Job name → the names of every pod seen with its `job-name` label (of the Job now under that name). */
  readonly podsOfJob = new Map<string, Set<string>>()
  readonly podDeletedAt = new Map<string, number>()
  /**
   * Job name → the uid of the Job last seen under it. A name comes back: a backfill deleted and made again names its
   * attempts as before (the scale run's windows at every size), and the earlier Job's deletion must not be read as
   * the new one's (it made the burst's Job figures negative at the third size).
   */
  private readonly jobUid = new Map<string, string>()
  /** Pods whose Job (by uid) was not seen yet: its watch event may come after its pod's. */
  private readonly podsOfUnseenJob = new Map<string, Set<string>>()
  private readonly informers: { stop(): Promise<void> | void }[] = []

  /**
   * A Job event: `removed` (gone) or showing a deletionTimestamp records its deletion once; an event of a Job newer
   * than the one known under its name forgets the old one's deletion and pods; an event of an older one is ignored.
   * Returns the time recorded, if this event recorded one.
   */
  noteJob(name: string, uid: string | undefined, deleting: boolean, removed: boolean, now = Date.now()) {
    const known = this.jobUid.get(name)
    if (uid && known !== uid) {
      // A removal of a Job other than the one known is an older Job's late event; anything else is a new Job.
      if (removed && known !== undefined) return undefined
      this.jobUid.set(name, uid)
      if (known !== undefined) this.jobDeletedAt.delete(name)
      const early = this.podsOfUnseenJob.get(uid)
      this.podsOfUnseenJob.delete(uid)
      if (known !== undefined || early) this.podsOfJob.set(name, new Set(early))
    }
    if ((removed || deleting) && !this.jobDeletedAt.has(name)) {
      this.jobDeletedAt.set(name, now)
      return now
    }
    return undefined
  }

  /** A pod of `job` (controlled by `controllerUid`); a pod of an earlier Job of that name is ignored. */
  notePod(name: string, job: string, controllerUid: string | undefined, deleting: boolean, now = Date.now()) {
    const known = this.jobUid.get(job)
    let set: Set<string>
    if (controllerUid && controllerUid !== known) {
      // An earlier Job's pod, or the pod of a Job not seen yet: kept aside until that Job shows up (bounded by the
      // pods the namespace makes in one run).
      set = this.podsOfUnseenJob.get(controllerUid) ?? new Set<string>()
      this.podsOfUnseenJob.set(controllerUid, set)
    } else {
      set = this.podsOfJob.get(job) ?? new Set<string>()
      this.podsOfJob.set(job, set)
    }
    const added = !set.has(name)
    set.add(name)
    if (deleting && !this.podDeletedAt.has(name)) {
      this.podDeletedAt.set(name, now)
      return { added, deletedAt: now }
    }
    return { added }
  }

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
      if (!name) return
      const at = w.noteJob(name, job.metadata?.uid, Boolean(job.metadata?.deletionTimestamp), removed)
      if (at !== undefined) onSeen?.({ k: 'job-deleted', name, at })
    }
    jobs.on('add', (j) => seenJob(j))
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
      const controllerUid = pod.metadata?.ownerReferences?.find((r) => r.controller)?.uid
      const seen = w.notePod(name, job, controllerUid, removed || Boolean(pod.metadata?.deletionTimestamp))
      if (seen.added) onSeen?.({ k: 'pod', name, job })
      if (seen.deletedAt !== undefined) onSeen?.({ k: 'pod-deleted', name, at: seen.deletedAt })
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
