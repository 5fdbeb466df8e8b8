// A cancel can arrive while the admission it is aimed at is still creating the Job: demand cancels what the claims
// name, and admit takes the claims before its POST (which under load takes seconds). A cancel that found no Job and
// gave up would be spent — demand remembers it was sent, and the Job the POST creates a moment later would run until
// some later decision noticed (or for good, when a decision ended the attempt in between). So a foreground cancel
// that finds no Job waits for it while the claim still stands for that Job on a window the request broke, and
// deletes it the moment it exists.
import type { V1Job } from '@kubernetes/client-node'
import { claimKeys, isObjectName } from '../../pkg/core/names.js'
import { breaksWindow } from '../../pkg/core/window.js'
import type { ObjectCache } from '../../pkg/kube/cache.js'
import { realTimers, sleepOn, type Timers } from '../../pkg/lib/timers.js'
import { readClaim } from '../../pkg/reconcile/read-kv.js'
import type { Deps } from '../../pkg/transport/function.js'

/** Longer than the apiserver request deadline (10 s): by then the POST was answered, or it failed. */
export const ADMISSION_WAIT_MS = 15_000
/** The claim and a GET once a second; the watched copy wakes the wait the moment the Job is in it. */
const RECHECK_MS = 1_000

/** The wait's clock and sleep; unset, Deps' (`now`, `timers`), so that the simulation runs it on virtual time. */
export interface WaitTime {
  now(): number
  sleep(ms: number): Promise<void>
}

/**
 * Wakes a waiting cancel the moment the watched copy of Jobs sees its Job. Looking at the copy every 25 ms instead
 * added up to 25 ms to the one preemption that is already late (the Job created while the cancel waited). One entry
 * per waiting cancel (bounded by cancel's handlers in flight), gone when it wakes or times out.
 */
export class JobArrivals {
  private readonly waiters = new Map<string, Set<() => void>>()

  /** `timers`: what a wait's bound runs on (Deps' timers). */
  constructor(private readonly timers: Timers = realTimers) {}

  /** For the copy's onChange. */
  readonly change = (job: V1Job, removed: boolean) => {
    if (removed) return
    const key = `${job.metadata?.namespace}/${job.metadata?.name}`
    const woken = this.waiters.get(key)
    if (!woken) return
    this.waiters.delete(key)
    for (const wake of woken) wake()
  }

  /** Resolves when `namespace/name` is added to or changed in the copy, or after `ms`. */
  wait(namespace: string, name: string, ms: number): Promise<void> {
    const key = `${namespace}/${name}`
    return new Promise((resolve) => {
      let set = this.waiters.get(key)
      if (!set) {
        set = new Set()
        this.waiters.set(key, set)
      }
      const woken = set
      const wake = () => {
        this.timers.clear(timer)
        woken.delete(wake)
        if (woken.size === 0 && this.waiters.get(key) === woken) this.waiters.delete(key)
        resolve()
      }
      const timer = this.timers.set(wake, ms)
      woken.add(wake)
    })
  }

  /** Jobs waited for now (tests: none left once every wait ended). */
  get size() {
    return this.waiters.size
  }
}

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
 * nothing appeared within `waitMs`. `arrivals` (subscribed to `jobs`) wakes the wait when the Job is in the copy;
 * without them it is found by the GET once a second.
 */
export async function awaitAdmittedJob(
  deps: Deps,
  jobs: ObjectCache<V1Job> | undefined,
  c: AimedCancel,
  opts: { arrivals?: JobArrivals; waitMs?: number; time?: WaitTime } = {},
): Promise<V1Job | null> {
  const timers = deps.timers ?? realTimers
  const time = opts.time ?? { now: deps.now, sleep: (ms: number) => sleepOn(timers, ms) }
  const backfill = await deps.kube.getBackfill(c.namespace, c.backfill)
  const model = backfill?.spec.modelRef
  if (!model || !isObjectName(model)) return null
  const key = claimKeys(c.namespace, model, '').model
  const at = Date.parse(c.at)
  const claimStands = async () => {
    const claim = readClaim(deps.log, await deps.bus.kv.claims.get(key))
    return claim?.jobName === c.jobName && breaksWindow(at, claim.idleSince ?? claim.claimedAt)
  }
  if (!(await claimStands())) return null
  const deadline = time.now() + (opts.waitMs ?? ADMISSION_WAIT_MS)
  const copied = () => jobs?.get(c.namespace, c.jobName) ?? null
  let recheckAt = time.now() + RECHECK_MS
  while (time.now() < deadline) {
    // Looked at right before the wait begins (nothing runs in between): a Job copied during the claim read is seen.
    let job = copied()
    if (!job) {
      const ms = Math.min(recheckAt, deadline) - time.now()
      await (opts.arrivals ? opts.arrivals.wait(c.namespace, c.jobName, ms) : time.sleep(ms))
      job = copied()
    }
    const due = time.now() >= recheckAt
    if (!job && due) job = await deps.kube.getJob(c.namespace, c.jobName)
    // Checked again when it appears: a retried admission may have taken the claim on a window of its own.
    if (job) return (await claimStands()) ? job : null
    if (due) {
      if (!(await claimStands())) return null
      recheckAt = time.now() + RECHECK_MS
    }
  }
  return null
}
