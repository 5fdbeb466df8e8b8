// The compare-and-set loop of a reconcile: read the ModelBackfill and its state, observe, decide, commit the state in
// KV by compare-and-set (a conflict decides again on the newer state), apply the decision (pkg/reconcile/apply.ts).
// Each function runs it in its role (pkg/reconcile/roles.ts).
import type { V1CronJob } from '@kubernetes/client-node'
import { type ConfirmingReads, confirmCopies, sameBackfill, sameTemplate } from '../admission/copies-unchanged.js'
import { type Admitted, giveBack, readBeforePost } from '../admission/protocol.js'
import type { ModelBackfill } from '../core/api.js'
import { decide, sameState } from '../core/decide.js'
import type { Decision, Trigger } from '../core/decision.js'
import { backfillKey, isObjectName } from '../core/names.js'
import { toKv } from '../core/state.js'
import { isCasConflict } from '../jetstream/errors.js'
import type { StepTimings } from '../observability/step-timings.js'
import type { Deps } from '../transport/function.js'
import { type AfterStart, apply } from './apply.js'
import { type AdmissionDeps, portsOf } from './deps.js'
import { type EventReads, observe, readClaimsOfCachedModel, readModelSignals } from './observe.js'
import { readState } from './read-kv.js'
import { ROLES, type Role } from './roles.js'

const MAX_CAS_RETRIES = 8

/** Reconciles one backfill: converges whatever event woke it, however often, in whatever order. */
export async function reconcile(
  deps: Deps,
  roleName: Role,
  namespace: string,
  name: string,
  initialTrigger: Trigger,
  /**
   * What lifecycle's event is about, read fresh; admit's profile of this admission (a log line per Job created);
   * admit's lane for what follows a created Job.
   */
  extra: { fresh?: EventReads; timings?: StepTimings; afterStart?: AfterStart } = {},
): Promise<Decision | null> {
  const { fresh, timings, afterStart } = extra
  const role = ROLES[roleName]
  let trigger = initialTrigger
  const kv = deps.bus.kv.backfills
  const key = backfillKey(namespace, name)
  // A role that decides on watched copies does so when it has them, checked against fresh GETs before it commits
  // anything (pkg/admission/copies-unchanged.ts); after a copy proved behind, this reconcile reads the apiserver first again.
  let onCopies = role.observes.decidesOnCopies && Boolean(deps.caches?.backfills && deps.caches.templates)
  const ports = portsOf(deps)
  for (let round = 0; round < MAX_CAS_RETRIES; round++) {
    // The object before the state: a status written by a newer decision then shows up as a conflict on our
    // status write (its KV commit came first), never as a current-looking object paired with an older state. A
    // watched copy is older still, and is only decided on if the GET after the state read returns it unchanged.
    const copy = onCopies ? (deps.caches?.backfills?.get(namespace, name) ?? null) : null
    const backfill = copy ? structuredClone(copy) : await deps.kube.getBackfill(namespace, name)
    timings?.mark('backfill')
    let confirming: ConfirmingReads | undefined
    let templateRead: V1CronJob | null | Promise<V1CronJob | null> | undefined
    if (copy) {
      const templateRef = isObjectName(copy.spec?.templateRef) ? copy.spec.templateRef : null
      confirming = confirmCopies(deps.kube, namespace, name, templateRef, timings)
      // No copy of the template (not synced yet, or a new CronJob): decide on the fresh GET.
      if (templateRef) templateRead = deps.caches?.templates?.get(namespace, templateRef) ?? confirming.template
    }
    // A role that reads ahead issues the model's idle-state and newest-request reads with the state read: neither
    // depends on the state, and the admission reads both again after its claims (pkg/admission/protocol.ts), so their
    // age decides nothing. One round trip fewer before the decision.
    const modelRef = backfill?.spec?.modelRef
    const signals =
      role.observes.readsAhead && isObjectName(modelRef)
        ? readModelSignals(deps, namespace, modelRef, timings)
        : undefined
    // And the claims it would take, when its watched copy of the model names the node: a write on them is a
    // compare-and-set, so an early read costs nothing in safety (pkg/admission/claims.ts), and one round trip less.
    const claimReads = signals && modelRef ? readClaimsOfCachedModel(deps, ports, namespace, modelRef) : undefined
    const entry = await kv.get(key)
    const state = readState(deps.log, entry)
    timings?.mark('state')
    const obs = await observe(deps, namespace, name, state, backfill, roleName, fresh, timings, {
      template: templateRead,
      signals,
    })
    const observed = obs.observed
    let template = obs.template
    timings?.mark('observe')
    let decision = decide(observed, trigger, deps.now())
    timings?.mark('decide')
    const decided = (deps as AdmissionDeps).decided
    if (!role.owns.createJob && decision.actions.some((a) => a.type === 'createJob')) {
      decided?.(observed, trigger, decision)
      // Only admit creates Jobs (it holds the claims); hand the backfill over to it, committing nothing.
      await deps.bus.publish('ai.flexinfer.backfill.admit', { namespace, backfill: name })
      return decision
    }
    // A decision to create: the claims, the fence and the re-reads, decided again on what they read
    // (pkg/admission/protocol.ts). `held`: the claims it took, given back if a watched copy proves behind and it goes round again.
    const admission = role.hooks.admission
    const admitted: Admitted = admission
      ? await admission(ports, observed, trigger, decision, timings, claimReads)
      : { decision }
    decision = admitted.decision
    const { held } = admitted
    if (copy && confirming) {
      // Decided on watched copies: commit nothing (no state, no Job) unless the apiserver still has those.
      let current: [ModelBackfill | null, V1CronJob | null]
      try {
        current = await Promise.all([confirming.backfill, confirming.template])
      } catch (err) {
        await giveBack(ports, held)
        throw err
      }
      timings?.mark('freshCheck')
      const [freshBackfill, freshTemplate] = current
      if (!sameBackfill(copy, freshBackfill) || (confirming.template && !sameTemplate(template, freshTemplate))) {
        await giveBack(ports, held)
        deps.log.info(
          { namespace, backfill: name, resourceVersion: copy.metadata.resourceVersion },
          'watched copy behind the apiserver; deciding again from a fresh read',
        )
        onCopies = false
        continue
      }
      // The same objects: apply what the apiserver returned (the Job is built from the template just read).
      observed.backfill = freshBackfill
      if (confirming.template) template = freshTemplate
    }
    decided?.(observed, trigger, decision)
    // The state revision this decision stands on: its status may only be shown while no newer one exists.
    let revision = entry?.revision ?? 0
    // A decision to create a Job commits its state even when unchanged (a retry of an attempt already Starting: the
    // same state, written again): the POST then stands on the newest state, not on a read a cancel or another try
    // may have moved on from since. Not written, a try that read Starting before the attempt was ended would create
    // its Job after the end gave the claims back (a live Job nobody can cancel), or under a Cancelling state a
    // cancel committed over the same stale revision, which then deletes only the Job it saw (none is left to wake).
    const creates = decision.actions.some((a) => a.type === 'createJob')
    // The newest-request read in front of the POST goes out with the state write (pkg/admission/protocol.ts).
    const model = observed.backfill?.spec.modelRef
    const early = held && model ? readBeforePost(ports, namespace, model, admitted.cursor, admitted.idle) : undefined
    if (creates || !sameState(state, decision.state)) {
      try {
        if (decision.state === null) await kv.delete(key, entry ? { previousSeq: entry.revision } : undefined)
        else if (entry) revision = await kv.update(key, toKv(decision.state), entry.revision)
        else revision = await kv.create(key, toKv(decision.state))
      } catch (err) {
        if (isCasConflict(err)) continue
        throw err
      }
    }
    timings?.mark('stateWrite')
    const applied = await apply(deps, role, observed, template, decision, revision, trigger, {
      fencedAt: admitted.fencedAt,
      cursor: admitted.cursor,
      early,
      timings,
      afterStart,
    })
    if (applied.rejected) {
      trigger = { type: 'jobRejected', ...applied.rejected }
      continue
    }
    if (applied.raced) {
      // A foreground request came in the fence → create gap: decide again with it (the attempt is taken back, or —
      // its Job already deleted by us — recorded as preempted, as after a cancel).
      trigger = applied.raced
      continue
    }
    return decision
  }
  deps.log.warn(
    { namespace, backfill: name },
    'gave up after repeated compare-and-set conflicts; a later event retries',
  )
  return null
}
