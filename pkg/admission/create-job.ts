// The createJob action of an admitted decision: the Job's POST between the admission's last reads (post() in
// pkg/admission/protocol.ts), and what its outcome means for the decision that made it — decided again (a request
// raced it, the apiserver refused it), a re-check armed (the name held by a predecessor's Job), or created.
import type { V1CronJob } from '@kubernetes/client-node'
import type { ModelBackfill } from '../core/api.js'
import type { Action, Decision, Trigger } from '../core/decision.js'
import { FAILSAFE_REASON } from '../core/fail-safe.js'
import { buildJob } from '../core/job.js'
import { preemptionLatency } from '../observability/ops-metrics.js'
import type { StepTimings } from '../observability/step-timings.js'
import type { Deps } from '../transport/function.js'
import type { AdmissionPorts, Cursor } from './ports.js'
import { type EarlyRead, post } from './protocol.js'

/**
 * What the POST's outcome means for the decision: decide again with `raced` (no Job was created, or admit deleted the
 * one it had just created: a cancel) or with the apiserver's refusal; `predecessor`, a re-check armed; `created`, the
 * Job exists and no request raced it: carry on with the decision's next action.
 */
export type JobCreated =
  | { raced: Trigger }
  | { rejected: { jobName: string; message: string } }
  | 'predecessor'
  | 'created'

export interface CreateOptions {
  /** When the fence answered (Admitted.fencedAt). */
  fencedAt?: number
  /** Up to where the foreground subject is in the idle state read after the fence (Admitted.cursor). */
  cursor?: Cursor
  /** The newest-request read sent with the state write (readBeforePost). */
  early?: EarlyRead
  timings?: StepTimings
}

/** Creates the Job of `action`, a createJob of `d`, for `b` from `template`. */
export async function createAttemptJob(
  deps: Deps,
  ports: AdmissionPorts,
  b: ModelBackfill,
  template: V1CronJob,
  d: Decision,
  action: Extract<Action, { type: 'createJob' }>,
  opts: CreateOptions,
): Promise<JobCreated> {
  const { fencedAt, timings } = opts
  const { kube, log } = deps
  const job = buildJob({
    backfill: b,
    template,
    name: action.jobName,
    node: action.node,
    maxRunDurationMs: action.spec.maxRunDurationMs,
    gate: deps.gate,
    admittedAt: d.state?.startedAt,
    // The committed Starting state's run: persisted before this POST, so a crash after it finds the same identity.
    run: d.state?.runId && d.state.runAttempt ? { id: d.state.runId, attempt: d.state.runAttempt } : undefined,
  })
  const { namespace, name } = b.metadata
  // The POST between two reads of the newest request (pkg/admission/protocol.ts).
  const outcome = await post(
    ports,
    job,
    d.state,
    { namespace, model: b.spec.modelRef, jobName: action.jobName, cursor: opts.cursor },
    timings,
    opts.early,
  )
  if (outcome.kind === 'racedBefore') {
    log.info(
      { namespace, backfill: name, job: action.jobName, lastRequestAt: outcome.lastRequestAt },
      'foreground request newer than the idle window, read before the POST; not creating the Job',
    )
    return { raced: { type: 'raced', jobName: action.jobName } }
  }
  // Refused for good: the rest of this decision (the Started event, its status) never happened; decide
  // again with the refusal, which releases the claims and blocks.
  if (outcome.kind === 'rejected') return { rejected: { jobName: action.jobName, message: outcome.message } }
  if (outcome.kind === 'predecessor') {
    // The name was held by a Job of an earlier ModelBackfill of the same name, now being deleted. The attempt
    // stays Starting (nothing reported as running) and a re-check shortly creates it once the name is free.
    log.warn(
      { namespace, backfill: name, job: action.jobName, result: 'predecessor' },
      'job name held by a predecessor ModelBackfill; deleted it, retrying the attempt',
    )
    await deps.bus.armTimer(b.metadata.namespace, b.metadata.name, new Date(deps.now() + 1000).toISOString())
    return 'predecessor'
  }
  const where = { namespace, backfill: name, job: action.jobName, result: outcome.result }
  log.debug(
    {
      ...where,
      fenceToPostMs: fencedAt === undefined ? undefined : outcome.postAt - fencedAt,
      postMs: outcome.postMs,
    },
    'fence → POST gap',
  )
  if (outcome.kind === 'racedAfter' || outcome.kind === 'unobserved') {
    // Foreground wins at once: admit deleted the Job it had just created (only that one, by its UID) rather than
    // leaving it to demand → cancel, and the attempt is recorded as preempted — by the request that raced the POST,
    // or, when the read after the POST failed and no request could be ruled out, by the fail-safe's reason.
    let cancel: Extract<Trigger, { type: 'cancel' }>
    if (outcome.kind === 'racedAfter') {
      const at = outcome.lastRequestAt
      if (outcome.deleted === 'deleted') {
        preemptionLatency.observe({ reason: 'ForegroundDemand' }, Math.max(0, deps.now() - Date.parse(at)) / 1000)
      }
      log.info(
        { ...where, lastRequestAt: at, deleted: outcome.deleted },
        'foreground request stored while the Job was being created; deleted it at once',
      )
      cancel = { type: 'cancel', reason: 'ForegroundDemand', at }
    } else {
      log.warn(
        { ...where, deleted: outcome.deleted, why: outcome.why },
        'newest-request read after the POST failed; deleted the Job at once (foreground demand not observable)',
      )
      cancel = { type: 'cancel', reason: FAILSAFE_REASON, at: new Date(deps.now()).toISOString() }
    }
    // The DELETE of the Job just created was accepted: the decision made on this trigger records the cancel without
    // ordering that DELETE again (a Job of another UID under the name, or one the DELETE missed, is still deleted).
    if (outcome.deleted === 'deleted' && outcome.uid !== undefined) cancel.deletedUid = outcome.uid
    // The attempt did start (and is about to be recorded as cancelled): the Event that tells its start still belongs.
    for (const e of d.actions) {
      if (e.type === 'recordEvent' && e.startedJob === action.jobName) {
        await kube.recordEvent(b, e.eventType, e.reason, e.message)
      }
    }
    return { raced: cancel }
  }
  log.info(where, 'job created')
  return 'created'
}
