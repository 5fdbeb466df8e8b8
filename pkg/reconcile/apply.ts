// apply(): executes a committed decision's actions — those the role owns (pkg/reconcile/roles.ts), forwarding the
// rest (Job creation to admit, a preempting Job deletion to cancel) — then writes its status, makes sure a live
// attempt holds its claims and that a timer the state records is stored.
import type { V1CronJob } from '@kubernetes/client-node'
import { newClaim, readStateEntry } from '../admission/claims.js'
import { createAttemptJob } from '../admission/create-job.js'
import type { Cursor } from '../admission/ports.js'
import type { EarlyRead } from '../admission/protocol.js'
import { timerHeld } from '../admission/timer-held.js'
import type { ModelBackfill } from '../core/api.js'
import type { Action, Decision, Observed, Trigger } from '../core/decision.js'
import { backfillKey, claimKeys } from '../core/names.js'
import { sameJson } from '../core/same-json.js'
import type { StepTimings } from '../observability/step-timings.js'
import { traced } from '../observability/tracing.js'
import type { Deps } from '../transport/function.js'
import { portsOf, releaseClaimKeys, takeClaimKeys } from './deps.js'
import type { RoleConfig } from './roles.js'

/**
 * Takes what an admission does once its Job exists and no request raced it (the rest of the decision's actions —
 * the Started Event — and the status write) off the admission's path: resolves when `work` is queued, not done.
 * admit's bookkeeping lane (functions/admit/bookkeeping.ts); without one, the work is done in line.
 */
export type AfterStart = (
  work: () => Promise<void>,
  where: { namespace: string; backfill: string; job: string },
) => Promise<void>

/**
 * What applying a decision reported back, to be decided again: a Job the apiserver refused, or an admission a
 * foreground request raced (the trigger to decide with: `raced` when no Job was created, a cancel when admit
 * deleted the one it had just created).
 */
export interface Applied {
  rejected?: { jobName: string; message: string }
  raced?: Trigger
}

/** The deletes no preemption waits for: done by the role that decides them. */
const HOUSEKEEPING = new Set<string>(['Deleted', 'Cleanup', 'RepeatCleanup'])

export interface ApplyOptions {
  /** When the admission's fence answered (pkg/admission/protocol.ts Admitted). */
  fencedAt?: number
  /** Up to where the foreground subject is in the idle state read after the fence. */
  cursor?: Cursor
  /** The newest-request read sent with the state write, for the POST (pkg/admission/protocol.ts). */
  early?: EarlyRead
  timings?: StepTimings
  afterStart?: AfterStart
  /** A timer already armed by the part of this decision applied before (bookkeeping handed over). */
  armed?: boolean
}

/**
 * Executes the actions of `d`, committed at state `revision`, as `role` does: `{}` when done (or the rest handed to
 * afterStart), or what to decide again with.
 */
export async function apply(
  deps: Deps,
  role: RoleConfig,
  o: Observed,
  template: V1CronJob | null,
  d: Decision,
  revision: number,
  trigger: Trigger,
  opts: ApplyOptions = {},
): Promise<Applied> {
  const { timings } = opts
  const { kube, bus, log } = deps
  const b = o.backfill as ModelBackfill | null
  const prior = o.state
  let armed = opts.armed ?? false
  for (let i = 0; i < d.actions.length; i++) {
    const action = d.actions[i] as Action
    switch (action.type) {
      case 'addFinalizer':
        if (b) await kube.setFinalizer(b, true)
        break
      case 'removeFinalizer':
        if (b) await kube.setFinalizer(b, false)
        break
      case 'createJob': {
        if (!b || !template) break
        const { fencedAt, cursor, early, afterStart } = opts
        const created = await createAttemptJob(deps, portsOf(deps), b, template, d, action, {
          fencedAt,
          cursor,
          early,
          timings,
        })
        if (created === 'predecessor') armed = true
        else if (created !== 'created') return created
        else if (afterStart) {
          // The attempt is committed, its Job exists and no request raced the POST: the rest (the Started Event,
          // the status) is bookkeeping no foreground path waits for, done off this admission's slot. Lost with the
          // process, it is redone by the next decision on the backfill (functions/admit/bookkeeping.ts).
          const rest = d.actions.slice(i + 1)
          const wasArmed = armed
          await afterStart(
            async () => {
              timings?.mark('bookkeepingWait')
              const later = { ...d, actions: rest }
              await apply(deps, role, o, template, later, revision, trigger, { timings, armed: wasArmed })
            },
            { namespace: b.metadata.namespace, backfill: b.metadata.name, job: action.jobName },
          )
          return {}
        }
        break
      }
      case 'deleteJob': {
        const namespace = b?.metadata.namespace ?? prior?.namespace ?? ''
        if (action.why === 'Cleanup' && b && (await isCurrentAttempt(deps, b, action.jobName))) break
        // Housekeeping deletes (no preemption latency at stake) are done by whoever decides them.
        if (role.owns.deleteJob(trigger) || HOUSEKEEPING.has(action.why)) {
          // The Job observed (ours by owner UID) is the one deleted, never a same-named successor.
          const uid = [o.job, ...(o.strays ?? [])].find((j) => j?.name === action.jobName)?.uid
          const result = await kube.deleteJob(namespace, action.jobName, uid)
          log.info({ namespace, job: action.jobName, why: action.why, result }, 'job deleted')
        } else {
          await bus.publish('ai.flexinfer.backfill.cancel', {
            namespace,
            backfill: b?.metadata.name ?? prior?.name ?? '',
            jobName: action.jobName,
            reason: action.why,
            at: new Date(deps.now()).toISOString(),
          })
        }
        break
      }
      case 'takeClaims': {
        if (!b) break
        const claim = newClaim(
          {
            namespace: b.metadata.namespace,
            backfill: b.metadata.name,
            attempt: action.attempt,
            jobName: action.jobName,
            idleSince: d.state?.idleSince,
          },
          deps.now(),
        )
        const held = await takeClaimKeys(deps, claimKeys(claim.namespace, b.spec.modelRef, action.node), claim)
        if (held.contender) {
          // Two live attempts on one model or node, both left by a previous controller: keep ours running (the
          // other's cancel path still works) and say so; a foreground request cancels both.
          log.warn(
            { namespace: claim.namespace, backfill: claim.backfill, job: claim.jobName, held: held.contender },
            'adopted Job shares its model or node with another live attempt',
          )
        }
        break
      }
      case 'armTimer':
        await bus.armTimer(b?.metadata.namespace ?? '', b?.metadata.name ?? '', action.at)
        armed = true
        break
      case 'cancelTimer':
        if (prior) await bus.cancelTimer(prior.namespace, prior.name)
        break
      case 'releaseClaims':
        if (prior?.nodeName) {
          await releaseClaimKeys(deps, claimKeys(prior.namespace, prior.model, prior.nodeName), action.jobName)
        }
        break
      case 'deleteState':
        break // committed with the state (null)
      case 'recordEvent':
        if (b) await kube.recordEvent(b, action.eventType, action.reason, action.message)
        timings?.mark('event')
        break
    }
  }
  if (b && d.status) {
    const where = { 'k8s.namespace.name': b.metadata.namespace, 'flexinfer.backfill': b.metadata.name }
    await traced('write ModelBackfill status', where, () => writeStatus(deps, b, d, revision))
    timings?.mark('status')
  }
  await ensureClaims(deps, b, d)
  // decide() re-arms lazily: a future timerAt in the state means "armed". But the state is committed before the
  // actions run, so an action that failed (a 409 on the finalizer, say) or a crash in between can leave a timerAt
  // whose schedule was never stored, and nothing would wake the backfill again. Each decision makes sure it is.
  const timerAt = d.state?.timerAt
  if (!armed && b && timerAt && Date.parse(timerAt) > deps.now()) {
    const { namespace, name } = b.metadata
    // A timer that fired (up to a tick early) and waits for admit is not armed again: that is a second admission.
    if (!(await timerHeld(bus, namespace, name, timerAt))) {
      log.warn({ namespace, backfill: name, timerAt }, 'timer recorded but not stored; arming it')
      await bus.armTimer(namespace, name, timerAt)
    }
  }
  return {}
}

/**
 * A live attempt holds its claims; if they are gone (the claims bucket lost or purged), demand could no longer find
 * it to cancel and admit could no longer see it: retake them. One KV read per decision on a live attempt.
 *
 * The decision may be stale by now (this runs after its actions and status write, and a decision that changed
 * nothing committed nothing): a preemption committed since has released the claims. Retaking them for the ended
 * attempt would hold the model and node for a dead Job for CLAIM_GRACE_MS, and no next attempt could be admitted.
 * So the state is read fresh before taking and again after (the preempter commits its state before it releases,
 * so one of the two reads sees it): the claims are retaken only for the attempt the state still calls live.
 */
export async function ensureClaims(deps: Deps, b: ModelBackfill | null, d: Decision) {
  const s = d.state
  if (!b || !s?.jobName || !s.nodeName || (s.phase !== 'Starting' && s.phase !== 'Running')) return
  if (d.actions.some((a) => a.type === 'createJob' || a.type === 'takeClaims')) return
  const keys = claimKeys(s.namespace, b.spec.modelRef, s.nodeName)
  const ports = portsOf(deps)
  const held = await ports.claims.get(keys.model)
  if (held?.operation === 'PUT') return
  const stillLive = async () => {
    const fresh = await readStateEntry(ports, s.namespace, s.name)
    return fresh?.jobName === s.jobName && (fresh?.phase === 'Starting' || fresh?.phase === 'Running')
  }
  if (!(await stillLive())) return
  deps.log.warn(
    { namespace: s.namespace, backfill: s.name, job: s.jobName },
    'live attempt without its claims; retaking them',
  )
  const retaken = await takeClaimKeys(
    deps,
    keys,
    newClaim(
      { namespace: s.namespace, backfill: s.name, attempt: s.attempts, jobName: s.jobName, idleSince: s.idleSince },
      deps.now(),
    ),
  )
  // Ended between the read and the take (its release may have come before our take): give them back.
  if (retaken.claim && !(await stillLive())) await releaseClaimKeys(deps, keys, retaken.claim)
}

/** Admit names the Job in KV before creating it, so a fresh read tells a stray from an attempt just admitted. */
async function isCurrentAttempt(deps: Deps, b: ModelBackfill, jobName: string): Promise<boolean> {
  const fresh = await readStateEntry(portsOf(deps), b.metadata.namespace, b.metadata.name)
  return fresh?.jobName === jobName
}

async function writeStatus(deps: Deps, backfill: ModelBackfill, d: Decision, revision: number) {
  const { namespace, name } = backfill.metadata
  let current: ModelBackfill | null = backfill
  for (let i = 0; i < 4 && current; i++) {
    if (sameStatus(current, d)) return
    if (await deps.kube.writeStatus(current, d.status ?? {})) return
    // A conflict: the object changed since it was read, maybe by the status write of a decision committed after
    // this one. Retrying then would put an older status back over a newer one (status walking backwards, and
    // staying there until the next event); the newer decision writes its own status, so leave it to that one.
    const latest = await deps.bus.kv.backfills.get(backfillKey(namespace, name))
    if ((latest?.revision ?? 0) !== revision) return
    current = await deps.kube.getBackfill(namespace, name)
  }
}

function sameStatus(b: ModelBackfill, d: Decision): boolean {
  return sameJson(b.status ?? {}, d.status ?? {})
}
