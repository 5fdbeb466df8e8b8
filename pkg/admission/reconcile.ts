// The thin adapter around decide(): observe the world, decide, commit the state by compare-and-set, apply the
// actions this function owns and forward the rest. Each function runs it with its role:
//   admit     creates Jobs (after taking the model and node claims and re-checking idleness),
//   cancel    deletes Jobs,
//   lifecycle neither: it forwards Job creation to admit and Job deletion to cancel.
import type { V1CronJob } from '@kubernetes/client-node'
import type { KvEntry } from '@nats-io/kv'
import type { ModelBackfill } from '../core/api.js'
import {
  type Action,
  type Contender,
  type Decision,
  decide,
  FAILSAFE_REASON,
  type Observed,
  sameState,
  type Trigger,
} from '../core/decide.js'
import { buildJob, gateProblem, gpuViolations } from '../core/job.js'
import { backfillKey, backfillLabelValue, claimKeys, isObjectName, LABEL_BACKFILL, modelKey } from '../core/names.js'
import { sameJson } from '../core/same-json.js'
import {
  type BackfillState,
  type Claim,
  type Parsed,
  parseBackfillState,
  parseClaim,
  parseEntry,
  parseModelIdleState,
  toKv,
} from '../core/state.js'
import { gamingSessionView, gpuLeaseView, isActiveJob, type JobView, jobView, modelView } from '../core/world.js'
import { isCasConflict } from '../jetstream/errors.js'
import { PLURALS } from '../kube/kube-common.js'
import type { Logger } from '../observability/log.js'
import { preemptionLatency } from '../observability/ops-metrics.js'
import { type StepTimings, timed } from '../observability/step-timings.js'
import { traced } from '../observability/tracing.js'
import type { Deps } from '../transport/function.js'
import {
  type Claimed,
  type ClaimKeys,
  newClaim,
  readClaimsAhead,
  readStateEntry,
  releaseClaimKeys as releaseKeys,
  takeClaimKeys as takeKeys,
} from './claims.js'
import { type FreshReads, readFresh, sameBackfill, sameTemplate } from './fresh-check.js'
import { admissionPorts } from './nats-ports.js'
import type { AdmissionPorts, Cursor } from './ports.js'
import { admit, type EarlyRead, giveBack, post, readBeforePost } from './protocol.js'
import { timerHeld } from './timer-held.js'

export type Role = 'admit' | 'cancel' | 'lifecycle'

/** Deps with the admission protocol's ports replaced (the simulation's in-memory ones). */
export interface AdmissionDeps extends Deps {
  /** undefined: the real ones on `bus` and `kube` (pkg/admission/nats-ports.ts). */
  admission?: AdmissionPorts
  /**
   * Told every decision a reconcile is about to act on (commit and apply, or hand to admit), with what it was decided
   * on, before anything of it is done (one whose compare-and-set then loses is decided again, and told again): the
   * property simulator (test/unit/support/sim.ts) checks each one there. It must not change what it is given.
   */
  decided?: (observed: Observed, trigger: Trigger, decision: Decision) => void
}

/** The admission ports a reconcile runs on. */
export const portsOf = (deps: Deps): AdmissionPorts => (deps as AdmissionDeps).admission ?? admissionPorts(deps)

export { CLAIM_GRACE_MS } from './claims.js'

const MAX_CAS_RETRIES = 8

/**
 * What a lifecycle event is about, read fresh once for every backfill it re-decides: lifecycle otherwise reads
 * watched copies, and one that has not yet seen the change the event reports would lose the cancel it carries
 * (functions/lifecycle/caches.ts).
 */
export interface Fresh {
  gamingSessions?: unknown[]
  gpuLeases?: unknown[]
  /** `<namespace>/<name>` → the Model as just read (null: it does not exist). */
  models?: Map<string, unknown | null>
}

interface Observation {
  observed: Observed
  template: V1CronJob | null
}

const ownedBy = (job: JobView, b: ModelBackfill) => !b.metadata.uid || job.ownerUid === b.metadata.uid

/**
 * A KV value in this release's shape (older versions upgraded), or null: absent, deleted, or unreadable. An
 * unreadable value is logged, never thrown: for a backfill state, the decision then takes the object over from its
 * Kubernetes status and Jobs (pkg/core/takeover.ts) and the next write replaces the bad value.
 */
export function readKv<T>(log: Logger, entry: KvEntry | null, parse: (raw: unknown) => Parsed<T>): T | null {
  if (entry?.operation !== 'PUT') return null
  const r = parseEntry(entry.string(), parse)
  if (r.ok) return r.value
  log.error(
    { bucket: entry.bucket, key: entry.key, revision: entry.revision, error: r.error },
    'unreadable KV value ignored; its object is taken over from Kubernetes',
  )
  return null
}
export const readState = (log: Logger, e: KvEntry | null) => readKv(log, e, parseBackfillState)
export const readIdle = (log: Logger, e: KvEntry | null) => readKv(log, e, parseModelIdleState)
export const readClaim = (log: Logger, e: KvEntry | null) => readKv(log, e, parseClaim)

export async function observe(
  deps: Deps,
  namespace: string,
  name: string,
  state: BackfillState | null,
  backfill: ModelBackfill | null,
  role: Role = 'admit',
  fresh: Fresh = {},
  timings?: StepTimings,
  /**
   * Reads already in flight: `template` (admit on its watched copies; undefined: GET it here), `signals` (admit's
   * idle-state and newest-request reads, issued with the state read; undefined: read here).
   */
  inHand: { template?: V1CronJob | null | Promise<V1CronJob | null>; signals?: ModelSignals } = {},
): Promise<Observation> {
  const templateRead = inHand.template
  const { kube } = deps
  if (!backfill) {
    return {
      observed: {
        backfill: null,
        state,
        model: null,
        idle: null,
        gamingSessions: [],
        leases: [],
        template: { found: false },
        job: null,
        contenders: [],
      },
      template: null,
    }
  }
  const modelName = backfill.spec.modelRef
  // Lifecycle reads watched copies too when it has them (overlaid with what its event is about): it never admits.
  const caches = role === 'admit' || role === 'lifecycle' ? deps.caches : undefined
  const freshModel = fresh.models?.get(`${namespace}/${modelName}`)
  // A ref no object can have is never read with (an invalid KV key throws; ".." in an API path reads something
  // else): it is not found, and decide() blocks on it with the reason.
  const modelOk = isObjectName(modelName)
  const templateOk = isObjectName(backfill.spec.templateRef)
  // Without a stored state, the Job the status names is the one a takeover may adopt (pkg/core/takeover.ts).
  const statusJob = state ? undefined : backfill.status?.jobName
  const attemptJob = state?.jobName ?? (isObjectName(statusJob) ? statusJob : undefined)
  const ours = backfillLabelValue(name)
  const signals = !modelOk ? undefined : (inHand.signals ?? readModelSignals(deps, namespace, modelName, timings))
  const [model, template, job, sessions, leases, jobs, idle, lastRequest] = await Promise.all([
    !modelOk
      ? null
      : freshModel !== undefined
        ? freshModel
        : caches
          ? caches.models.get(namespace, modelName)
          : kube.getModel(namespace, modelName),
    !templateOk
      ? null
      : templateRead !== undefined
        ? templateRead
        : timed(timings, 'observe.template', kube.getCronJob(namespace, backfill.spec.templateRef)),
    attemptJob ? kube.getJob(namespace, attemptJob) : Promise.resolve(null),
    fresh.gamingSessions ?? (caches ? caches.gamingSessions.list() : kube.listAll(PLURALS.gamingSessions)),
    fresh.gpuLeases ?? (caches ? caches.gpuLeases.list() : kube.listAll(PLURALS.gpuLeases)),
    // Only admit needs the contenders (every backfill Job in the cluster); the others never admit — a decision
    // to admit is handed to admit, which looks again — so they list just this declaration's own Jobs.
    role !== 'admit'
      ? caches
        ? caches.jobs
            .list()
            .filter((j) => j.metadata?.namespace === namespace && j.metadata.labels?.[LABEL_BACKFILL] === ours)
        : kube.listOwnJobs(namespace, name)
      : caches
        ? null // from the live-Jobs index below, once the model's node is known
        : kube.listBackfillJobs(deps.namespaces),
    signals?.idle ?? null,
    signals?.lastRequest ?? null,
  ])
  const modelV = model ? modelView(model) : null
  const contenders: Contender[] = []
  const strays: JobView[] = []
  // admit on its watched copies: only the live Jobs on this model, on its node or with this backfill's label (an
  // index, not a walk of every backfill Job: pkg/kube/active-jobs.ts); the tests below pick from them as from the list.
  // (A ref that names no model matches the Jobs without one: that rare case walks the list as before.)
  const candidates =
    jobs ??
    (caches && modelOk ? caches.activeJobs.near(namespace, modelName, modelV?.node, ours) : (caches?.jobs.list() ?? []))
  for (const j of candidates.map(jobView)) {
    if (!isActiveJob(j)) continue
    // Only a Job this very ModelBackfill controls is a stray of ours to delete: one that merely carries our label
    // (made by someone else, or left by a predecessor of the same name) is never ours — it counts as a contender.
    if (j.backfillLabel === ours && j.namespace === namespace && ownedBy(j, backfill)) {
      if (j.name !== state?.jobName) strays.push(j)
      continue
    }
    const on =
      j.namespace === namespace && j.model === modelName
        ? 'model'
        : modelV?.node && j.node === modelV.node
          ? 'node'
          : null
    if (on) contenders.push({ namespace: j.namespace, jobName: j.name, on })
  }
  return {
    observed: {
      backfill,
      state,
      model: modelV,
      idle: readIdle(deps.log, idle),
      lastRequestAt: lastRequest ?? undefined,
      gamingSessions: sessions.map(gamingSessionView),
      leases: leases.map(gpuLeaseView),
      template: template
        ? { found: true, gpu: gpuViolations(template), gate: gateProblem(backfill, template, deps.gate) }
        : { found: false },
      // A Job of that name is the attempt's only when this ModelBackfill (by UID) controls it: a predecessor of the
      // same name left one behind (orphaned, or not yet collected), and its outcome is not ours to report.
      job: job && ownedBy(jobView(job), backfill) ? jobView(job) : null,
      contenders,
      strays,
    },
    template,
  }
}

/** The claims an admission for `model` would take, read ahead when the watched copy of the model names its node. */
function readClaimsOfCachedModel(deps: Deps, ports: AdmissionPorts, namespace: string, model: string) {
  const cached = deps.caches?.models.get(namespace, model)
  const node = cached ? modelView(cached).node : undefined
  return node ? readClaimsAhead(ports, claimKeys(namespace, model, node)) : undefined
}

/** The model's idle state and the store time of its newest request, as observe() reads them. */
export interface ModelSignals {
  idle: Promise<KvEntry | null>
  lastRequest: Promise<string | null>
}

export function readModelSignals(deps: Deps, namespace: string, model: string, timings?: StepTimings): ModelSignals {
  const signals: ModelSignals = {
    idle: Promise.resolve(timed(timings, 'observe.idle', deps.bus.kv.idle.get(modelKey(namespace, model)))),
    lastRequest: Promise.resolve(
      timed(
        timings,
        'observe.lastRequest',
        portsOf(deps)
          .requests.newest(namespace, model)
          .then((r) => r.at),
      ),
    ),
  }
  // Awaited later, maybe not at all (the state read failed first): a failure must not be an unhandled rejection.
  signals.idle.catch(() => {})
  signals.lastRequest.catch(() => {})
  return signals
}

/**
 * Takes what an admission does once its Job exists and no request raced it (the rest of the decision's actions —
 * the Started Event — and the status write) off the admission's path: resolves when `work` is queued, not done.
 * admit's bookkeeping lane (functions/admit/bookkeeping.ts); without one, the work is done in line.
 */
export type AfterStart = (
  work: () => Promise<void>,
  where: { namespace: string; backfill: string; job: string },
) => Promise<void>

/** Reconciles one backfill: converges whatever event woke it, however often, in whatever order. */
export async function reconcile(
  deps: Deps,
  role: Role,
  namespace: string,
  name: string,
  initialTrigger: Trigger,
  /**
   * What lifecycle's event is about, read fresh; admit's profile of this admission (a log line per Job created);
   * admit's lane for what follows a created Job.
   */
  extra: { fresh?: Fresh; timings?: StepTimings; afterStart?: AfterStart } = {},
): Promise<Decision | null> {
  const { fresh, timings, afterStart } = extra
  let trigger = initialTrigger
  const kv = deps.bus.kv.backfills
  const key = backfillKey(namespace, name)
  // admit decides on its watched copies when it has them, checked against fresh GETs before it commits anything
  // (pkg/admission/fresh-check.ts); after a copy proved behind, this reconcile reads the apiserver first again.
  let onCopies = role === 'admit' && Boolean(deps.caches?.backfills && deps.caches.templates)
  const ports = portsOf(deps)
  for (let round = 0; round < MAX_CAS_RETRIES; round++) {
    // The object before the state: a status written by a newer decision then shows up as a conflict on our
    // status write (its KV commit came first), never as a current-looking object paired with an older state. A
    // watched copy is older still, and is only decided on if the GET after the state read returns it unchanged.
    const copy = onCopies ? (deps.caches?.backfills?.get(namespace, name) ?? null) : null
    const backfill = copy ? structuredClone(copy) : await deps.kube.getBackfill(namespace, name)
    timings?.mark('backfill')
    let freshReads: FreshReads | undefined
    let templateRead: V1CronJob | null | Promise<V1CronJob | null> | undefined
    if (copy) {
      const templateRef = isObjectName(copy.spec?.templateRef) ? copy.spec.templateRef : null
      freshReads = readFresh(deps.kube, namespace, name, templateRef, timings)
      // No copy of the template (not synced yet, or a new CronJob): decide on the fresh GET, as before.
      if (templateRef) templateRead = deps.caches?.templates?.get(namespace, templateRef) ?? freshReads.template
    }
    // admit issues the model's idle-state and newest-request reads with the state read: neither depends on the
    // state, and the admission reads both again after its claims (pkg/admission/protocol.ts), so their age decides
    // nothing. One round trip fewer before the decision.
    const modelRef = backfill?.spec?.modelRef
    const signals =
      role === 'admit' && isObjectName(modelRef) ? readModelSignals(deps, namespace, modelRef, timings) : undefined
    // And the claims it would take, when its watched copy of the model names the node: a write on them is a
    // compare-and-set, so an early read costs nothing in safety (pkg/admission/claims.ts), and one round trip less.
    const claimReads = signals && modelRef ? readClaimsOfCachedModel(deps, ports, namespace, modelRef) : undefined
    const entry = await kv.get(key)
    const state = readState(deps.log, entry)
    timings?.mark('state')
    const obs = await observe(deps, namespace, name, state, backfill, role, fresh, timings, {
      template: templateRead,
      signals,
    })
    const observed = obs.observed
    let template = obs.template
    timings?.mark('observe')
    let decision = decide(observed, trigger, deps.now())
    timings?.mark('decide')
    const decided = (deps as AdmissionDeps).decided
    if (role !== 'admit' && decision.actions.some((a) => a.type === 'createJob')) {
      decided?.(observed, trigger, decision)
      // Only admit creates Jobs (it holds the claims); hand the backfill over to it, committing nothing.
      await deps.bus.publish('ai.flexinfer.backfill.admit', { namespace, backfill: name })
      return decision
    }
    // A decision to create: the claims, the fence and the re-reads, decided again on what they read
    // (pkg/admission/protocol.ts). `held`: the claims it took, given back if the fresh check sends it round again.
    const admitted =
      role === 'admit' ? await admit(ports, observed, trigger, decision, timings, claimReads) : { decision }
    decision = admitted.decision
    const { held } = admitted
    if (copy && freshReads) {
      // Decided on watched copies: commit nothing (no state, no Job) unless the apiserver still has those.
      let current: [ModelBackfill | null, V1CronJob | null]
      try {
        current = await Promise.all([freshReads.backfill, freshReads.template])
      } catch (err) {
        await giveBack(ports, held)
        throw err
      }
      timings?.mark('freshCheck')
      const [freshBackfill, freshTemplate] = current
      if (!sameBackfill(copy, freshBackfill) || (freshReads.template && !sameTemplate(template, freshTemplate))) {
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
      if (freshReads.template) template = freshTemplate
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
    const early =
      held && model
        ? readBeforePost(ports, namespace, model, admitted.cursor, 'idle' in admitted ? admitted.idle : undefined)
        : undefined
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
      fencedAt: 'fencedAt' in admitted ? admitted.fencedAt : undefined,
      cursor: 'cursor' in admitted ? admitted.cursor : undefined,
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

/**
 * What applying a decision reported back, to be decided again: a Job the apiserver refused, or an admission a
 * foreground request raced (the trigger to decide with: `raced` when no Job was created, a cancel when admit
 * deleted the one it had just created).
 */
interface Applied {
  rejected?: { jobName: string; message: string }
  raced?: Trigger
}

interface ApplyOptions {
  fencedAt?: number
  cursor?: Cursor
  /** The newest-request read sent with the state write, for the POST (pkg/admission/protocol.ts). */
  early?: EarlyRead
  timings?: StepTimings
  afterStart?: AfterStart
  /** A timer already armed by the part of this decision applied before (bookkeeping handed over). */
  armed?: boolean
}

async function apply(
  deps: Deps,
  role: Role,
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
        const created = await createAttemptJob(deps, role, o, b, template, d, i, revision, trigger, { ...opts, armed })
        if (created === 'predecessor') armed = true
        else if (created) return created
        break
      }
      case 'deleteJob': {
        const namespace = b?.metadata.namespace ?? prior?.namespace ?? ''
        if (action.why === 'Cleanup' && b && (await isCurrentAttempt(deps, b, action.jobName))) break
        if (
          role === 'cancel' ||
          // Admit deciding with a cancel trigger: it has just deleted the Job a request raced (above) itself.
          (role === 'admit' && trigger.type === 'cancel') ||
          action.why === 'Deleted' ||
          action.why === 'Cleanup' ||
          action.why === 'RepeatCleanup'
        ) {
          // Housekeeping deletes (no preemption latency at stake) are done by whoever decides them.
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
 * The createJob action: the POST between the admission's last reads (pkg/admission/protocol.ts), and what its outcome
 * means for this decision — decided again (a request raced it, the apiserver refused it), the rest handed to the
 * bookkeeping lane, or `predecessor` (a re-check armed). undefined: carry on with the decision's next action.
 */
async function createAttemptJob(
  deps: Deps,
  role: Role,
  o: Observed,
  b: ModelBackfill,
  template: V1CronJob,
  d: Decision,
  i: number,
  revision: number,
  trigger: Trigger,
  opts: ApplyOptions,
): Promise<Applied | 'predecessor' | undefined> {
  const { fencedAt, timings, afterStart } = opts
  const { kube, log } = deps
  const ports = portsOf(deps)
  const action = d.actions[i] as Extract<Action, { type: 'createJob' }>
  const job = buildJob({
    backfill: b,
    template,
    name: action.jobName,
    node: action.node,
    maxRunDurationMs: action.spec.maxRunDurationMs,
    gate: deps.gate,
    admittedAt: d.state?.startedAt,
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
    let cancel: Trigger
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
    // The attempt did start (and is about to be recorded as cancelled): the Event that tells its start still belongs.
    for (const e of d.actions) {
      if (e.type === 'recordEvent' && e.startedJob === action.jobName) {
        await kube.recordEvent(b, e.eventType, e.reason, e.message)
      }
    }
    return { raced: cancel }
  }
  log.info(where, 'job created')
  if (afterStart) {
    // The attempt is committed, its Job exists and no request raced the POST: the rest (the Started Event,
    // the status) is bookkeeping no foreground path waits for, done off this admission's slot. Lost with the
    // process, it is redone by the next decision on the backfill (functions/admit/bookkeeping.ts).
    const rest = d.actions.slice(i + 1)
    const wasArmed = opts.armed
    await afterStart(
      async () => {
        timings?.mark('bookkeepingWait')
        const later = { ...d, actions: rest }
        await apply(deps, role, o, template, later, revision, trigger, { timings, armed: wasArmed })
      },
      { namespace, backfill: name, job: action.jobName },
    )
    return {}
  }
  return undefined
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

/** Takes both claims for `claim`, or none (pkg/admission/claims.ts). */
export const takeClaimKeys = (deps: Deps, keys: ClaimKeys, claim: Claim): Promise<Claimed> =>
  takeKeys(portsOf(deps), keys, claim)

/** Gives back the claims held for `who`: an admission's own claim, or whatever names an ended attempt's Job. */
export const releaseClaimKeys = (
  deps: Deps,
  keys: ClaimKeys,
  who: string | Pick<Claim, 'jobName' | 'claimedAt' | 'tryId'>,
) => releaseKeys(portsOf(deps), keys, who)
