// A cancel can arrive while the admission it is aimed at is still creating the Job: demand cancels what the claims
// name, and admit takes the claims before its POST (which under load takes seconds). Finding no Job then, the
// cancel used to be spent — demand remembers it was sent, and the Job that the POST created a moment later ran
// until some later decision noticed (a failover run: 1.8 s; a decision that ended the attempt in between left it
// running). So a foreground cancel that finds no Job waits for it while the claim still stands for that Job on a
// window the request broke, and deletes it the moment it exists.
import type { V1Job } from '@kubernetes/client-node'
import { readClaim } from '../../admission/reconcile.js'
import { claimKeys, isObjectName } from '../../core/names.js'
import type { ObjectCache } from '../../kube/kube.js'
import type { Deps } from '../../transport/function.js'

/** Longer than the apiserver request deadline (10 s): by then the POST was answered, or it failed. */
export const ADMISSION_WAIT_MS = 15_000
/** The watched copy is looked at this often (in memory), the claim and a GET once a second. */
const POLL_MS = 25
const RECHECK_MS = 1_000

export interface AimedCancel {
  namespace: string
  backfill: string
  jobName: string
  /** The request's time: it breaks the window of a claim whose window began before it. */
  at: string
}

/**
 * The Job `c` names once it exists, or null: the backfill or its claim is gone, the claim names another Job or a
 * window that began at or after the request (a retried admission on a fresh window is not this cancel's), or
 * nothing appeared within `waitMs`.
 */
export async function awaitAdmittedJob(
  deps: Deps,
  jobs: ObjectCache<V1Job> | undefined,
  c: AimedCancel,
  waitMs = ADMISSION_WAIT_MS,
): Promise<V1Job | null> {
  const backfill = await deps.kube.getBackfill(c.namespace, c.backfill)
  const model = backfill?.spec.modelRef
  if (!model || !isObjectName(model)) return null
  const key = claimKeys(c.namespace, model, '').model
  const at = Date.parse(c.at)
  const claimStands = async () => {
    const claim = readClaim(deps.log, await deps.bus.kv.claims.get(key))
    return claim?.jobName === c.jobName && at > Date.parse(claim.idleSince ?? claim.claimedAt)
  }
  if (!(await claimStands())) return null
  const deadline = Date.now() + waitMs
  let recheckAt = Date.now() + RECHECK_MS
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, POLL_MS))
    const due = Date.now() >= recheckAt
    const job = jobs?.get(c.namespace, c.jobName) ?? (due ? await deps.kube.getJob(c.namespace, c.jobName) : null)
    // Checked again when it appears: a retried admission may have taken the claim on a window of its own.
    if (job) return (await claimStands()) ? job : null
    if (due) {
      if (!(await claimStands())) return null
      recheckAt = Date.now() + RECHECK_MS
    }
  }
  return null
}
