// What cancel deletes besides the Job — the attempt's pods — and the Jobs it remembers having deleted, so that the
// DELETE lane (index.ts) sends each attempt's DELETEs once. The lanes keep the DELETEs apart from the bookkeeping: a
// burst's DELETEs go out through a wide lane that nothing slow holds, and the bookkeeping waits behind them in a
// narrow one, since its reads and writes slow the apiserver's answers to the DELETEs still in flight.
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
