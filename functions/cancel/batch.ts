// A preemption burst (a traffic ramp, a gateway failover: a request for every model at once) cost the apiserver two
// requests per Job — the Job's DELETE and its pods' — each one list, delete and watch fan-out of its own, and each
// cancel waited for a DELETE place behind the others. Here the cancels of one namespace that arrive while that
// namespace's DELETEs are in flight are sent together: one DELETE of the Job collection whose set-based selector
// names exactly their attempts, then one of the pods by their Jobs' UIDs. An isolated cancel waits for nothing (no
// timer: a lone cancel goes out at once, as a DELETE by name with the Job's UID as precondition).
//
// Order: first come, first sent. A namespace's queue is FIFO and each send takes its oldest cancels; namespaces
// share the DELETE lane, which is FIFO too, so no model waits behind a later one however big the burst.
//
// The Job's DELETE and its pods' go out together, neither waiting for the other's answer: the pods are what stops
// the work, and waiting for the Job's answer first cost one apiserver round trip on every preemption. The Job
// controller counts pods deleted under a Job as its failures (backoffLimit 0: Failed), and with both in flight it may
// mark the Job Failed before the Job's own deletion shows; decide tells that failure from one of the work's own by the
// foreground request that broke the window coming first (pkg/core/attempt.ts failedByCancel). A Job template with retries
// left gets no replacement pod: the Job controller waits out its back-off (10 s after a first failure) before one,
// and the Job is deleting long before.
import { MAX_COLLECTION_SELECTOR } from '../../pkg/kube/client.js'
import { statusCode } from '../../pkg/kube/errors.js'
import type { KubeApi } from '../../pkg/kube/port.js'
import type { Lane } from '../../pkg/lib/lane.js'

/** One Job to delete, as the refusal check saw it in the watched copy. */
export interface Doomed {
  namespace: string
  jobName: string
  uid: string
  /** Its ai.flexinfer/model-backfill label value (checked: the named backfill's). */
  backfillValue: string
  /** Its ai.flexinfer/attempt label value; a Job without one (made by an older release) is deleted on its own. */
  attemptValue?: string
}

export interface Deleted {
  result: 'deleted' | 'absent' | 'replaced'
  /** Epoch ms: when the DELETE place was had, the Jobs' and the pods' DELETEs answered. */
  sentAt: number
  jobAt: number
  podsAt?: number
  /** How many Jobs went in the same request (1: a DELETE by name). */
  batch: number
}

/** The apiserver calls it makes (pkg/kube/client.ts). */
export type CollectionApi = Pick<KubeApi, 'deleteJob' | 'deleteJobPods' | 'deleteAttemptJobs' | 'deleteJobsPods'>

interface Waiting {
  d: Doomed
  resolve(r: Deleted): void
  reject(err: unknown): void
}

export interface BatchOptions {
  /** Sends in flight per namespace; further cancels of that namespace wait and go together. */
  perNamespace?: number
  /** Jobs per request at most (the selector is in the URL). */
  max?: number
  /** Cancels waiting at most (the transport bounds cancel's in-flight count below this). */
  capacity?: number
  deletePods?: boolean
  now?: () => number
  /** A pods' DELETE failed (best effort: the garbage collector deletes them anyway, later). */
  onPodsError?: (namespace: string, err: unknown) => void
  /** Collection DELETEs were refused (an RBAC without deletecollection on jobs): back to one DELETE per Job. */
  onRefused?: (err: unknown) => void
}

/**
 * The apiserver deletes a collection's items one after another (kube-apiserver --delete-collection-workers, default
 * 1), and the pods wait for the whole Job collection: a big request makes its first Job's pods wait for every other
 * Job, and a large one can run past the request deadline. So cancels go alone while the
 * namespace has DELETE places free, and only what would wait for a place anyway rides together, a few at a time.
 */
const PER_NAMESPACE = 32
const BATCH_MAX = 8

export class DeleteBatcher {
  private readonly queues = new Map<string, Waiting[]>()
  private readonly inFlight = new Map<string, number>()
  private waiting = 0
  private collections = true
  private readonly perNamespace: number
  private readonly max: number
  private readonly capacity: number
  private readonly now: () => number
  /** Requests sent, by kind (tests and the log line read them). */
  readonly stats = { single: 0, collections: 0, collected: 0 }

  constructor(
    private readonly api: CollectionApi,
    private readonly lane: Lane,
    private readonly opts: BatchOptions = {},
  ) {
    this.perNamespace = opts.perNamespace ?? PER_NAMESPACE
    this.max = Math.min(opts.max ?? BATCH_MAX, MAX_COLLECTION_SELECTOR)
    this.capacity = opts.capacity ?? 4096
    this.now = opts.now ?? Date.now
  }

  /** Deletes the Job (and its pods), alone or with others of its namespace. */
  delete(d: Doomed): Promise<Deleted> {
    if (this.waiting >= this.capacity) {
      return Promise.reject(new Error(`more than ${this.capacity} Job deletions waiting`))
    }
    return new Promise<Deleted>((resolve, reject) => {
      let queue = this.queues.get(d.namespace)
      if (!queue) {
        queue = []
        this.queues.set(d.namespace, queue)
      }
      queue.push({ d, resolve, reject })
      this.waiting++
      this.pump(d.namespace)
    })
  }

  private pump(namespace: string) {
    const queue = this.queues.get(namespace)
    while (queue && queue.length > 0 && (this.inFlight.get(namespace) ?? 0) < this.perNamespace) {
      // Taken now, in arrival order; what arrives while they wait for a lane place goes in the next send.
      const taken = queue.splice(0, this.max)
      this.waiting -= taken.length
      this.inFlight.set(namespace, (this.inFlight.get(namespace) ?? 0) + 1)
      void this.lane
        .run(() => this.send(namespace, taken))
        .finally(() => {
          const left = (this.inFlight.get(namespace) ?? 1) - 1
          if (left > 0) this.inFlight.set(namespace, left)
          else this.inFlight.delete(namespace)
          if (queue.length > 0) this.pump(namespace)
          else if (left === 0) this.queues.delete(namespace)
        })
    }
  }

  private async send(namespace: string, taken: Waiting[]) {
    const sentAt = this.now()
    const labelled = this.collections ? taken.filter((w) => w.d.attemptValue) : []
    const alone = taken.filter((w) => !labelled.includes(w))
    if (labelled.length === 1) alone.push(...labelled.splice(0))
    await Promise.all([
      labelled.length > 0 ? this.sendCollection(namespace, labelled, sentAt) : undefined,
      ...alone.map((w) => this.sendOne(w, sentAt)),
    ])
  }

  private async sendOne(w: Waiting, sentAt: number) {
    const { namespace, jobName, uid } = w.d
    try {
      this.stats.single++
      const job = this.api.deleteJob(namespace, jobName, uid)
      // Also when the Job was already gone or replaced: the selector is this Job's UID, so only its pods match.
      const pods = this.deletePods(namespace, [uid])
      const result = await job.catch(async (err) => {
        await pods
        throw err
      })
      const jobAt = this.now()
      w.resolve({ result, sentAt, jobAt, podsAt: await pods, batch: 1 })
    } catch (err) {
      w.reject(err)
    }
  }

  private async sendCollection(namespace: string, ws: Waiting[], sentAt: number) {
    this.stats.collections++
    this.stats.collected += ws.length
    const jobs = this.api.deleteAttemptJobs(
      namespace,
      ws.map((w) => w.d.backfillValue),
      ws.map((w) => w.d.attemptValue as string),
    )
    const pods = this.deletePods(
      namespace,
      ws.map((w) => w.d.uid),
    )
    try {
      await jobs
    } catch (err) {
      await pods
      if (statusCode(err) === 403 && this.collections) {
        // Refused by an RBAC of an older release (no deletecollection on jobs): one DELETE each, from now on (their
        // pods are deleted again: a DELETE of pods already going is answered at once).
        this.collections = false
        this.opts.onRefused?.(err)
        await Promise.all(ws.map((w) => this.sendOne(w, sentAt)))
        return
      }
      for (const w of ws) w.reject(err)
      return
    }
    const jobAt = this.now()
    const podsAt = await pods
    // The apiserver's answer lists what it deleted only in a form the client drops; a Job already gone is reported
    // as deleted too, which is what its cancel needs to know (the reconcile then reads the world).
    for (const w of ws) w.resolve({ result: 'deleted', sentAt, jobAt, podsAt, batch: ws.length })
  }

  /** When the pods' DELETE was answered, undefined when it was not sent or failed (logged). */
  private async deletePods(namespace: string, uids: string[]): Promise<number | undefined> {
    if (this.opts.deletePods === false) return undefined
    try {
      if (uids.length === 1) await this.api.deleteJobPods(namespace, uids[0] as string)
      else await this.api.deleteJobsPods(namespace, uids)
      return this.now()
    } catch (err) {
      this.opts.onPodsError?.(namespace, err)
      return undefined
    }
  }
}
