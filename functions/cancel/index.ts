// cancel: owns Job deletion. A cancel request deletes the attempt's Job first — no apiserver read stands between
// the foreground signal and the DELETE — and only then records the transition (Cancelling, preemption counted).
//
// A cancel request is not trusted: every function that may publish one (demand, admit, lifecycle) could name any
// Job. Only a Job that belongs to the named backfill is deleted — same namespace, our label with that backfill's
// value, and a controller ownerReference to a ModelBackfill of that name — checked against a watched copy of the
// backfill Jobs (one GET only for a Job too new to be in it), and deleted with a precondition on the UID checked,
// so a same-named replacement is never the one deleted.
import type { V1Job } from '@kubernetes/client-node'
import type { CancelReason } from '../../core/api.js'
import { GROUP, REASONS } from '../../core/api.js'
import { backfillLabelValue, LABEL_BACKFILL } from '../../core/names.js'
import { STREAM_EVENTS } from '../../events/catalog.js'
import { type EventFunction, PermanentError } from '../../runtime/function.js'
import { backfillJobsCache, type WatchCache } from '../../runtime/kube.js'
import { preemptionLatency } from '../../runtime/ops-metrics.js'
import { reconcile } from '../../runtime/reconcile.js'
import { traced } from '../../runtime/tracing.js'

const isCancelReason = (r: string): r is CancelReason => (REASONS.Cancelling as readonly string[]).includes(r)

/** Why `job` may not be deleted on behalf of backfill `backfill`, or undefined when it is that backfill's. */
export function refusal(job: V1Job, backfill: string): string | undefined {
  const meta = job.metadata ?? {}
  const label = meta.labels?.[LABEL_BACKFILL]
  if (label === undefined) return `it carries no ${LABEL_BACKFILL} label (not a backfill Job)`
  if (label !== backfillLabelValue(backfill)) return `its ${LABEL_BACKFILL} label is not that of backfill ${backfill}`
  const owner = meta.ownerReferences?.find((r) => r.controller)
  if (!owner) return 'it has no controller ownerReference'
  if (owner.kind !== 'ModelBackfill' || !owner.apiVersion?.startsWith(`${GROUP}/`) || owner.name !== backfill) {
    return `its controller is ${owner.kind} ${owner.name}, not ModelBackfill ${backfill}`
  }
  return undefined
}

export function cancelFunction(): EventFunction {
  let jobs: WatchCache<V1Job> | undefined
  let own = false
  return {
    name: 'cancel',
    concurrency: 16,
    subscriptions: [{ stream: STREAM_EVENTS, subjects: ['flexinfer.events.backfill.cancel'] }],
    async start(deps) {
      // Shares admit's watched Jobs when both run in one process.
      jobs = deps.caches?.jobs
      if (!jobs) {
        jobs = backfillJobsCache(deps.kube)
        own = true
        await jobs.start()
      }
    },
    async stop() {
      if (own) await jobs?.stop()
      jobs = undefined
    },
    async handle(event, deps) {
      if (event.type !== 'ai.flexinfer.backfill.cancel') return
      const { namespace, backfill, jobName, reason } = event.data
      if (!isCancelReason(reason)) throw new PermanentError(`unknown cancel reason "${reason}"`)
      // The signal's time counts as foreground activity: one from the future (a bad clock, a forged event) must
      // not hold the window open past now.
      const at = new Date(Math.min(Date.parse(event.data.at), deps.now())).toISOString()
      // The watched copy first; a Job created a moment ago may not be in it yet: one GET then.
      const job = jobs?.get(namespace, jobName) ?? (await deps.kube.getJob(namespace, jobName))
      let result = 'absent'
      if (job) {
        const why = refusal(job, backfill)
        if (why) {
          deps.log.warn({ namespace, backfill, job: jobName, reason, why }, 'cancel: refused')
          throw new PermanentError(`refusing to delete Job ${namespace}/${jobName} for backfill ${backfill}: ${why}`)
        }
        result = await traced('DELETE Job', { 'k8s.namespace.name': namespace, 'k8s.job.name': jobName }, () =>
          deps.kube.deleteJob(namespace, jobName, job.metadata?.uid),
        )
        // The signal's time (`at`, capped at now) to the DELETE accepted: what the latency alert watches.
        if (result === 'deleted') preemptionLatency.observe({ reason }, Math.max(0, deps.now() - Date.parse(at)) / 1000)
      }
      deps.log.info({ namespace, backfill, job: jobName, reason, result }, 'cancel: job delete accepted')
      await reconcile(deps, 'cancel', namespace, backfill, { type: 'cancel', reason, at })
    },
  }
}
