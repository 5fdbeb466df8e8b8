// The preemption's fast path. A burst of cancel requests (a traffic ramp, a gateway failover: one per model at once)
// used to take one handler slot each for the whole cancel — DELETE, then the reconcile's reads, KV and status
// writes — so the 100th DELETE waited for ~6 full reconciles per slot (500 Jobs: p99 15.7 s). Now the two halves
// have lanes of their own: the DELETEs (the Job, then its pods; a burst's in collections, batch.ts) go out at once
// through a wide lane that nothing slow ever holds, and the bookkeeping queues behind them in a narrow lane that waits while DELETEs are in flight (the
// apiserver answers a DELETE slower while the bookkeeping's reads and writes load it). Both lanes are bounded: the transport never
// has more than cancel's concurrency in flight, and each lane holds at most that many.
import type { KubeApi } from '../../pkg/kube/port.js'

/**
 * Deletes the pods of the Job with this UID — the attempt's work — without waiting for the garbage collector to
 * follow the Job's deletion (it does, but later: what stops the load on the model is the kubelet's SIGTERM, which
 * follows the pod's deletion). One DELETE of the collection, no read before it. The selector is the Job's UID, so
 * no pod of another Job (a same-named successor included) is ever matched. No grace period is passed: each pod
 * keeps the one its template sets (terminationGracePeriodSeconds), as a Job deletion would.
 */
export function deleteAttemptPods(kube: KubeApi, namespace: string, jobUid: string): Promise<void> {
  return kube.deleteJobPods(namespace, jobUid)
}

/**
 * UIDs of Jobs this instance DELETEd lately (bounded, oldest forgotten first). In a burst, the same attempt is
 * often cancelled twice (demand's request, then lifecycle seeing the Model or Job change): the second needs no
 * second DELETE pair, which would only slow the apiserver's answers to the DELETEs still waiting.
 */
export class RecentlyDeleted {
  private readonly uids = new Set<string>()

  constructor(private readonly max = 4096) {}

  has(uid: string | undefined): boolean {
    return uid !== undefined && this.uids.has(uid)
  }

  add(uid: string | undefined) {
    if (uid === undefined) return
    this.uids.add(uid)
    if (this.uids.size > this.max) this.uids.delete(this.uids.values().next().value as string)
  }
}
