// cancel: owns Job deletion. A cancel request deletes the attempt's Job first — no apiserver read stands between
// the foreground signal and the DELETE — and only then records the transition (Cancelling, preemption counted).
//
// A cancel request is not trusted: every function that may publish one (demand, admit, lifecycle) could name any
// Job. Only a Job that belongs to the named backfill is deleted — same namespace, our label with that backfill's
// value, and a controller ownerReference to a ModelBackfill of that name — checked against a watched copy of the
// backfill Jobs (one GET only for a Job too new to be in it), and deleted either by name with a precondition on the
// UID checked, or — several cancels of a namespace at once — by a selector on the attempt label the checked copy
// carries (batch.ts), so a same-named replacement is never the one deleted. The attempt's pods are deleted right
// after, by the Job's UID: the garbage collector would get to them later, and the pods are where the work runs.
//
// The DELETEs and the bookkeeping run in lanes of their own (DELETE_WIDTH, BOOKKEEPING_WIDTH below): a burst of
// cancels never queues a DELETE behind earlier cancels' reconciles. The event is acked only after both, so a crash in between redelivers
// it (the DELETEs are idempotent: 'absent').
import type { V1Job } from '@kubernetes/client-node'
import { STREAM_EVENTS } from '../../events/catalog.js'
import type { CancelReason } from '../../pkg/core/api.js'
import { GROUP, REASONS } from '../../pkg/core/api.js'
import { backfillLabelValue, LABEL_ATTEMPT, LABEL_BACKFILL } from '../../pkg/core/names.js'
import { backfillJobsCache, type ObjectCache } from '../../pkg/kube/cache.js'
import { Lane } from '../../pkg/lib/lane.js'
import { describeError } from '../../pkg/observability/log.js'
import { preemptionLatency } from '../../pkg/observability/ops-metrics.js'
import { traced } from '../../pkg/observability/tracing.js'
import { reconcile } from '../../pkg/reconcile/reconcile.js'
import { type EventFunction, PermanentError, type Settings } from '../../pkg/transport/function.js'
import { DeleteBatcher } from './batch.js'
import { RecentlyDeleted } from './deletes.js'
import { type FailSafe, startFailSafe } from './fail-safe.js'
import { awaitAdmittedJob, JobArrivals } from './in-flight.js'

/**
 * Cancels one instance works on at once before their DELETEs are answered. Wide, as each one waiting costs a few
 * hundred bytes; the work itself is limited by the lanes below.
 */
const IN_FLIGHT = 1024
/**
 * Cancels one instance holds unacknowledged (the consumer's max_ack_pending): those whose DELETEs are done and that
 * wait for their bookkeeping (acked after it) count too. A burst of up to this many preemptions has every DELETE
 * sent without waiting for another cancel's bookkeeping; past it the server holds the rest until acks free places.
 * A few kB each while they wait.
 */
const MAX_UNACKED = 10_000
/** DELETEs (Job + pods) at once: enough for a burst, few enough to reuse the pooled keep-alive connections. */
const DELETE_WIDTH = 32
/** Reconciles at once: narrow, since its reads and writes slow the DELETEs' answers while they load the apiserver. */
const BOOKKEEPING_WIDTH = 16
/** Longest a reconcile waits for the DELETE lane to drain (a steady trickle of cancels must not starve it). */
const BOOKKEEPING_YIELD_MAX_MS = 10_000

/** Longest a cancel waits in the handler for an apiserver that does not answer before its event is retried. */
const UNREACHABLE_WAIT_MS = 20_000

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

/**
 * Cancel reads its settings from Deps at start. `tuning` replaces IN_FLIGHT and the bookkeeping lane (tests: a lane
 * they hold shut shows that no DELETE waits for a bookkeeping); `failSafe: false` starts no fail-safe (the
 * deterministic simulation, whose bus has no consumers for its probe to ask about).
 */
export function cancelFunction(
  _settings: Settings = {},
  tuning: { inFlight?: number; bookkeeping?: Lane; failSafe?: false } = {},
): EventFunction {
  let jobs: ObjectCache<V1Job> | undefined
  let own = false
  let arrivals: JobArrivals | undefined
  let failSafe: FailSafe | undefined
  const deletes = new Lane(DELETE_WIDTH)
  const bookkeeping = tuning.bookkeeping ?? new Lane(BOOKKEEPING_WIDTH)
  const deleted = new RecentlyDeleted()
  let batcher!: DeleteBatcher
  return {
    name: 'cancel',
    concurrency: tuning.inFlight ?? IN_FLIGHT,
    maxAckPending: MAX_UNACKED,
    subscriptions: [{ stream: STREAM_EVENTS, subjects: ['flexinfer.events.backfill.cancel'] }],
    async start(deps) {
      // The process's shared watched Jobs (deps.caches) when another of its functions watches them too.
      jobs = deps.caches?.jobs
      if (!jobs) {
        jobs = backfillJobsCache(deps.kube, deps.namespaces)
        own = true
        await jobs.start()
      }
      // Subscribed once per start (the copy has no unsubscribe): a stopped cancel's arrivals see the changes, and
      // nobody waits on them.
      arrivals = new JobArrivals(deps.timers)
      jobs.onChange?.(arrivals.change)
      // The attempt's pods are deleted right after the Job (what stops the work is their deletion, not the Job's);
      // CANCEL_DELETE_PODS=false leaves them to the garbage collector, which is slower.
      batcher = new DeleteBatcher(deps.kube, deletes, {
        capacity: IN_FLIGHT,
        now: deps.now,
        deletePods: deps.settings?.cancelDeletePods ?? true,
        onPodsError: (ns, err) =>
          deps.log.warn({ namespace: ns, error: describeError(err) }, 'cancel: deleting the pods failed; the GC will'),
        onRefused: (err) =>
          deps.log.warn(
            { error: describeError(err) },
            'cancel: deletecollection on jobs refused (RBAC of an older release?); deleting Jobs one by one',
          ),
      })
      // Background does not run while foreground demand cannot be observed (fail-safe.ts): Kubernetes alone.
      if (tuning.failSafe !== false) failSafe = startFailSafe(deps, jobs, { refusal })
    },
    async stop() {
      await failSafe?.stop()
      failSafe = undefined
      if (own) await jobs?.stop()
      jobs = undefined
    },
    async handle(event, deps, ctx) {
      if (event.type !== 'ai.flexinfer.backfill.cancel') return
      const { namespace, backfill, jobName, reason } = event.data
      if (!isCancelReason(reason)) throw new PermanentError(`unknown cancel reason "${reason}"`)
      // The signal's time counts as foreground activity: one from the future (a bad clock, a forged event) must
      // not hold the window open past now.
      const at = new Date(Math.min(Date.parse(event.data.at), deps.now())).toISOString()
      // Timings in the log line: where a slow preemption spent its time (queued in NATS and the transport, waiting
      // for a DELETE place, the apiserver's answers).
      const handledAt = deps.now()
      let deleteFrom = handledAt
      let batchSize: number | undefined
      // When the apiserver answered the Job's DELETE and the pods' (epoch ms; dev/bench/preemption-profile.ts).
      let jobAnswered: number | undefined
      let podsAnswered: number | undefined
      // The Job this cancel had a DELETE accepted for (its own, or this instance's a moment ago): the bookkeeping's
      // decision records the cancel without ordering that DELETE again.
      let deletedUid: string | undefined
      const remove = async (job: V1Job) => {
        const why = refusal(job, backfill)
        if (why) {
          deps.log.warn({ namespace, backfill, job: jobName, reason, why }, 'cancel: refused')
          throw new PermanentError(`refusing to delete Job ${namespace}/${jobName} for backfill ${backfill}: ${why}`)
        }
        const meta = job.metadata ?? {}
        const uid = meta.uid
        // DELETEd by this instance a moment ago, pods included: nothing to send again. (Not skipped for a Job that
        // merely shows a deletionTimestamp: someone may have deleted it orphaning its pods.)
        if (deleted.has(uid)) {
          deletedUid = uid
          return 'deleting' as const
        }
        if (!uid) return deps.kube.deleteJob(namespace, jobName)
        const out = await traced('DELETE Job', { 'k8s.namespace.name': namespace, 'k8s.job.name': jobName }, () =>
          batcher.delete({
            namespace,
            jobName,
            uid,
            backfillValue: meta.labels?.[LABEL_BACKFILL] as string,
            attemptValue: meta.labels?.[LABEL_ATTEMPT],
          }),
        )
        deleteFrom = out.sentAt
        jobAnswered = out.jobAt
        podsAnswered = out.podsAt
        batchSize = out.batch
        if (out.result === 'deleted') {
          deleted.add(uid)
          deletedUid = uid
        }
        return out.result
      }
      // An apiserver that does not answer (an outage): tried again the moment it does, not at the next redelivery.
      let result = await deps.kube.whenReachable(async () => {
        // The watched copy first; a Job created a moment ago may not be in it yet: one GET then.
        const job = jobs?.get(namespace, jobName) ?? (await deps.kube.getJob(namespace, jobName))
        return job ? await remove(job) : ('absent' as const)
      }, UNREACHABLE_WAIT_MS)
      // No Job yet: the admission may still be creating it (in-flight.ts). Waited for outside the DELETE lane.
      let waitedMs: number | undefined
      if (result === 'absent' && reason === 'ForegroundDemand') {
        const from = deps.now()
        const late = await awaitAdmittedJob(deps, jobs, { namespace, backfill, jobName, at }, { arrivals })
        waitedMs = deps.now() - from
        if (late) result = await remove(late)
      }
      const ms = {
        queued: event.storedAt === undefined ? undefined : Math.round(handledAt - event.storedAt),
        lane: deleteFrom - handledAt,
        delete: deps.now() - deleteFrom,
        pods: podsAnswered === undefined || jobAnswered === undefined ? undefined : podsAnswered - jobAnswered,
      }
      const t = { stored: event.storedAt, handled: handledAt, job: jobAnswered, pods: podsAnswered }
      // The signal's time (`at`, capped at now) to the DELETE accepted: what the latency alert watches.
      if (result === 'deleted') preemptionLatency.observe({ reason }, Math.max(0, deps.now() - Date.parse(at)) / 1000)
      deps.log.info(
        { namespace, backfill, job: jobName, reason, result, ms, t, waitedMs, batch: batchSize },
        'cancel: job delete accepted',
      )
      // The DELETEs are answered: this handler's place goes to the next cancel now. Held through the bookkeeping, a
      // burst of more cancels than IN_FLIGHT would leave the later ones' DELETEs waiting for earlier ones' reconciles
      // (BOOKKEEPING_WIDTH at a time). The event is still acked only after the bookkeeping.
      ctx?.release()
      await bookkeeping.run(async () => {
        // DELETEs first: the bookkeeping's apiserver reads and writes wait while a burst of them is in flight.
        await deletes.idle(BOOKKEEPING_YIELD_MAX_MS, deps.timers)
        await reconcile(deps, 'cancel', namespace, backfill, { type: 'cancel', reason, at, deletedUid })
      })
    },
  }
}
