// The one place that knows the phase table. Pure: no I/O, no clock. Every function calls it with what it
// observed and applies the actions it returns, so duplicated, reordered or replayed events converge on the
// same state (the decision is level-triggered: it looks at the world, not at the event that woke it).
import {
  type CancelReason,
  type Condition,
  checkSpec,
  FINALIZER,
  type ModelBackfill,
  type ModelBackfillStatus,
  type Phase,
  type ResolvedSpec,
} from './api.js'
import type { GpuViolation } from './job.js'
import { jobName as nameJob } from './names.js'
import { sameJson } from './same-json.js'
import { type BackfillState, emptyCounters, type ModelIdleState, type PreemptionReason } from './state.js'
import { type Takeover, takeover } from './takeover.js'
import {
  blockingGamingSession,
  blockingLease,
  type GamingSessionView,
  type GPULeaseView,
  type JobView,
  type ModelView,
} from './world.js'

/** How often a Blocked declaration re-checks conditions that no watched object reports (templates, contenders). */
export const RECHECK_MS = 15_000
/**
 * A created Job that has not started after this long is reported (status message and one Warning Event): its
 * template suspends it, or its pods are not scheduled. Checked by every decision (the resync sweep re-decides an
 * active attempt every period), so no timer of its own.
 */
export const NOT_STARTING_MS = 5 * 60_000
/** How soon admission tries again when the preemption path was not ready (pkg/admission/fence.ts). */
export const PATH_RECHECK_MS = 5_000
/**
 * How long a Starting attempt without a Job is admit's alone: its admission may still be in flight (the POST, then
 * deleting a Job a request raced). Past it the admission is taken for dead (a crashed admit's timer is redelivered
 * long before: ack_wait 30 s) and any decision may take the attempt back.
 */
export const ADMISSION_IN_FLIGHT_MS = 60_000
/** A Job rejected again and again is re-tried less often: RECHECK_MS doubling up to this. */
export const MAX_REJECTED_RECHECK_MS = 4 * 60_000

export interface Contender {
  namespace: string
  backfill?: string
  jobName: string
  on: 'model' | 'node'
}

export type TemplateObservation =
  | { found: false }
  /** gate: why the background gate this backfill asks for cannot be built (pkg/core/job.ts gateProblem). */
  | { found: true; gpu: GpuViolation[]; gate?: string }

export interface Observed {
  /** null: the ModelBackfill no longer exists. */
  backfill: ModelBackfill | null
  state: BackfillState | null
  /** null: the Model does not exist. */
  model: ModelView | null
  idle: ModelIdleState | null
  /** When NATS stored the model's newest request on its per-model subject (read without demand). */
  lastRequestAt?: string
  /**
   * Set by admission's fence when a Job must not be created now: nothing would cancel it in time (no demand or
   * cancel instance running) or demand has requests it has not processed yet.
   */
  preemptionPath?: { ready: false; why: string }
  gamingSessions: GamingSessionView[]
  leases: GPULeaseView[]
  template: TemplateObservation
  /** The Job named by state.jobName, or null when it does not exist. */
  job: JobView | null
  /** Other active backfill attempts on the same model or node (foreign Jobs and live claims). */
  contenders: Contender[]
  /**
   * This backfill's own active Jobs other than the current attempt's: left by an admission that lost a race
   * with a cancel (the Job was created after the attempt had already ended). They are deleted on sight.
   */
  strays?: JobView[]
}

export type Trigger =
  | { type: 'resource' }
  | { type: 'timer' }
  | { type: 'admit' }
  /** A cancel request (the cancel function has already deleted the Job), with the time of the winning signal. */
  | { type: 'cancel'; reason: CancelReason; at: string }
  /**
   * The apiserver refused to create the attempt's Job for good (403: quota or webhook; 400/422: invalid). Retrying
   * at once would not help; holding the attempt would wedge its model and node (the claims never go stale).
   */
  | { type: 'jobRejected'; jobName: string; message: string }
  /**
   * This admission's own read before its POST saw a foreground request stored since its fence: it created no Job.
   * Only this try may take back its Starting attempt for that request at once (another try's POST may be in flight).
   */
  | { type: 'raced'; jobName: string }

export type DeleteWhy = CancelReason | 'Deleted' | 'Cleanup' | 'RepeatCleanup'

export type Action =
  | { type: 'addFinalizer' }
  | { type: 'removeFinalizer' }
  | { type: 'createJob'; jobName: string; attempt: number; node: string; spec: ResolvedSpec }
  | { type: 'deleteJob'; jobName: string; why: DeleteWhy }
  /** Takes the model and node claims for a Job adopted by a takeover (so demand's cancel finds it). */
  | { type: 'takeClaims'; jobName: string; attempt: number; node: string }
  | { type: 'armTimer'; at: string }
  | { type: 'cancelTimer' }
  | { type: 'releaseClaims'; jobName: string }
  | { type: 'deleteState' }
  | {
      type: 'recordEvent'
      eventType: 'Normal' | 'Warning'
      reason: string
      message: string
      /**
       * The Job whose start this Event tells (BackfillStarted): it belongs to that attempt even when a raced admission
       * deletes the Job at once and the rest of the decision is not applied.
       */
      startedJob?: string
    }

export interface Decision {
  /** The next state; null when the state should be deleted. */
  state: BackfillState | null
  /** The status to show, or null when the object is gone. */
  status: ModelBackfillStatus | null
  actions: Action[]
  /** Every gate of GATES, in that order, as this decision evaluated it. */
  gates: readonly GateReport[]
}

/**
 * The gates decide() evaluates, in the order a report lists them (admission's order; an attempt in flight is checked
 * against the ones that can cancel it, CANCEL_GATES). `kubectl mbf explain` shows exactly these.
 */
export const GATES = [
  'generation',
  'spec',
  'suspend',
  'previous run',
  'model',
  'template',
  'gpu request',
  'background gate',
  'model ready',
  'node',
  'idle window',
  'gaming',
  'gpu lease',
  'claims',
  'preemption path',
  'rejected recheck',
] as const
export type GateName = (typeof GATES)[number]

/**
 * pass; wait / blocked: the gate holds the backfill (its phase is WaitingForIdle or Succeeded / Blocked, Suspended or
 * Failed); cancels: it ends the attempt in flight; not-reached: not evaluated, because an earlier gate decided, the
 * gate does not apply (admission's gates while an attempt runs), or what it needs is missing (no Model, no valid spec).
 */
export type GateVerdict = 'pass' | 'wait' | 'blocked' | 'cancels' | 'not-reached'

export interface GateReport {
  gate: GateName
  verdict: GateVerdict
  /** For a gate that holds or cancels: decide's own message for it (the status message it sets). */
  evidence: string
  /** idle window: when the window decide measured began (epoch ms). */
  since?: number
  /** When the gate opens by itself, epoch ms: the idle window's end, the session's or lease's expiry, when known. */
  until?: number
}

/**
 * The reports that need no data are shared and frozen: the common decision allocates one array and at most a couple
 * of reports, and builds no string it did not build before.
 */
const constReports = (verdict: GateVerdict, evidence: (g: GateName) => string): Readonly<GateReport>[] =>
  GATES.map((gate) => Object.freeze({ gate, verdict, evidence: evidence(gate) }))
const NOT_REACHED = Object.freeze(constReports('not-reached', () => 'not evaluated'))
const PASSED = Object.freeze(constReports('pass', () => 'pass'))
const GATE_INDEX = Object.fromEntries(GATES.map((g, i) => [g, i])) as Record<GateName, number>
/** Decide's checks of an attempt in flight, in its order (cancelReason's); the first that fails cancels it. */
const CANCEL_GATES = [
  'suspend',
  'generation',
  'model',
  'model ready',
  'node',
  'gaming',
  'gpu lease',
  'idle window',
] as const satisfies readonly GateName[]
/** Admission's gates: GATES from the model on (the ones before it decide for every trigger, admission or not). */
type AdmissionGate = Exclude<GateName, 'generation' | 'spec' | 'suspend' | 'previous run'>
const ADMISSION_GATES = GATES.slice(GATES.indexOf('model')) as readonly AdmissionGate[]

export interface DecideOptions {
  /**
   * Evaluate every gate, also past the one that decided (reported, never acted on): `kubectl mbf explain` shows the
   * operator everything that holds a backfill, not only the first. Functions leave it off.
   */
  everyGate?: boolean
}

/** As contract.md maps them (the reference controller's mapping): dashboards written for it must keep working. */
const PREEMPTION_OF: Record<CancelReason, PreemptionReason> = {
  ForegroundDemand: 'foreground',
  GamingIntent: 'gaming',
  GPULeaseActive: 'gpu_lease',
  Suspended: 'suspended',
  SpecChanged: 'spec_changed',
  ModelNotFound: 'model_unavailable',
  ModelNotReady: 'other',
  NodeChanged: 'other',
  NodeUnresolved: 'other',
  // Not foreground demand that was seen, so not `foreground`: dashboards reading "who wins" must not count an outage
  // as traffic. `other` keeps the contract's bounded set.
  ForegroundUnobservable: 'other',
}

const iso = (ms: number) => new Date(ms).toISOString()
const ms = (text: string | undefined) => (text ? Date.parse(text) : Number.NaN)
const latest = (...times: (string | undefined)[]) =>
  times.reduce<number>((max, t) => {
    const v = ms(t)
    return Number.isNaN(v) ? max : Math.max(max, v)
  }, Number.NEGATIVE_INFINITY)

/** The working copy decide mutates; only decide's own helpers see it. */
interface Work {
  o: Observed
  b: ModelBackfill
  now: number
  s: BackfillState
  actions: Action[]
  spec: ResolvedSpec | null
  gates: GateReport[]
  everyGate: boolean
}

function report(w: Work, gate: GateName, verdict: GateVerdict, evidence: string, since?: number, until?: number) {
  const r: GateReport = { gate, verdict, evidence }
  if (since !== undefined && !Number.isNaN(since)) r.since = since
  if (until !== undefined && !Number.isNaN(until)) r.until = until
  w.gates[GATE_INDEX[gate]] = r
}

const pass = (w: Work, gate: GateName) => {
  w.gates[GATE_INDEX[gate]] = PASSED[GATE_INDEX[gate]] as GateReport
}

export function initialState(b: ModelBackfill, now: number): BackfillState {
  return {
    namespace: b.metadata.namespace,
    name: b.metadata.name,
    uid: b.metadata.uid,
    model: b.spec.modelRef,
    generation: b.metadata.generation ?? 1,
    phase: 'WaitingForIdle',
    reason: 'IdleWindow',
    message: 'waiting for the first idle window',
    // Seed from an existing status so a migration from FlexInfer's controller keeps counting attempts.
    attempts: b.status?.attempts ?? 0,
    windowStart: iso(now),
    counters: emptyCounters(),
    updatedAt: iso(now),
  }
}

export function decide(o: Observed, trigger: Trigger, now: number, options: DecideOptions = {}): Decision {
  const b = o.backfill
  if (!b) return gone(o)
  const checked = checkSpec(b.spec)
  const spec = 'resolved' in checked ? checked.resolved : null
  let taken: Takeover | undefined
  if (!o.state) {
    taken = takeover(
      {
        backfill: b,
        model: o.model,
        idleLastForegroundAt: o.idle?.lastForegroundAt,
        lastRequestAt: o.lastRequestAt,
        job: o.job,
        strays: o.strays ?? [],
        repeatAfterMs: spec?.repeatAfterMs ?? 0,
      },
      now,
    )
    // The Job the seeded state names is the attempt's Job from here on (it may be one of the strays).
    const name = taken.state.jobName
    const job = name ? ([o.job, ...(o.strays ?? [])].find((j) => j?.name === name) ?? null) : null
    o = { ...o, job }
  }
  const base = o.state ?? (taken as Takeover).state
  const w: Work = {
    o,
    b,
    now,
    // decide() changes its own copy: the state's fields are scalars but for the counters (and their preemptions),
    // so those are copied too; the stored state (often a frozen, remembered parse) is never touched.
    s: {
      ...base,
      model: b.spec.modelRef,
      uid: b.metadata.uid,
      counters: { ...base.counters, preemptions: { ...base.counters.preemptions } },
    },
    actions: [],
    spec,
    gates: NOT_REACHED.slice() as GateReport[],
    everyGate: options.everyGate === true,
  }
  if (taken?.summary) {
    w.actions.push({
      type: 'recordEvent',
      eventType: 'Normal',
      reason: 'TakenOver',
      message: `No stored state; seeded from status and Jobs: ${taken.summary}`,
    })
  }
  if (taken?.adopted && w.s.nodeName) {
    w.actions.push({ type: 'takeClaims', jobName: taken.adopted.name, attempt: w.s.attempts, node: w.s.nodeName })
  }
  // Useful time runs from startedAt (the Job's creation) while the attempt has not been counted yet; a state of an
  // earlier release started it when the Job was first seen running, or not at all for a Job not yet seen running.
  if ((w.s.phase === 'Starting' || w.s.phase === 'Running') && w.s.startedAt && !w.s.deletionCancelled) {
    w.s.runningSince = w.s.startedAt
  }
  if (b.metadata.deletionTimestamp) {
    finalizeDeletion(w)
    return finish(w)
  }
  if (!(b.metadata.finalizers ?? []).includes(FINALIZER)) w.actions.push({ type: 'addFinalizer' })
  for (const stray of o.strays ?? []) {
    if (stray.name !== w.s.jobName) w.actions.push({ type: 'deleteJob', jobName: stray.name, why: 'Cleanup' })
  }

  if (w.s.jobName) {
    if (attemptInFlight(w, trigger)) {
      // A finished attempt whose Job is still there: its outcome is what holds the backfill.
      const phase = w.s.phase
      if (phase === 'Succeeded' || phase === 'Failed')
        report(w, 'previous run', phase === 'Failed' ? 'blocked' : 'wait', w.s.message, undefined, ms(w.s.nextRunTime))
      return finish(w)
    }
    // The attempt is over: what its checks reported is not this decision's verdict.
    for (let i = 0; i < GATES.length; i++) w.gates[i] = NOT_REACHED[i] as GateReport
  }
  // No attempt in flight: a spec change just clears what the last generation left and starts over.
  if (w.s.generation !== (b.metadata.generation ?? 1)) {
    restartForNewGeneration(w)
    report(w, 'generation', 'pass', 'spec changed; starting over')
  } else pass(w, 'generation')
  // Held before the admission gates: by the spec, suspend, or the previous run's outcome.
  const held = preAdmission(w, checked)
  if (held === 'held') {
    if (w.everyGate) gatesAndAdmit(w, false, trigger, false)
    return finish(w)
  }
  gatesAndAdmit(w, held === 'repeatDue', trigger, true)
  return finish(w)
}

/** Spec, suspend and the previous run's outcome: 'held' when one holds the backfill, 'repeatDue' when a repeat is. */
function preAdmission(w: Work, checked: ReturnType<typeof checkSpec>): 'held' | 'repeatDue' | undefined {
  const { b } = w
  let held = false
  if ('problem' in checked) {
    set(w, 'Blocked', checked.problem.reason, checked.problem.message)
    report(w, 'spec', 'blocked', checked.problem.message)
    if (!w.everyGate) return 'held'
    held = true
  } else pass(w, 'spec')
  if (b.spec.suspend) {
    if (!held) set(w, 'Suspended', 'Suspended', 'spec.suspend is true; no attempt may run')
    report(w, 'suspend', 'blocked', 'spec.suspend is true; no attempt may run')
    if (!w.everyGate) return 'held'
    held = true
  } else pass(w, 'suspend')
  if (held) return 'held'
  if (w.s.phase === 'Failed') {
    report(w, 'previous run', 'blocked', w.s.message)
    return 'held'
  }
  if (w.s.phase === 'Succeeded') {
    if (cooldown(w)) {
      report(
        w,
        'previous run',
        (w.s.phase as Phase) === 'Blocked' ? 'blocked' : 'wait',
        w.s.message,
        undefined,
        ms(w.s.nextRunTime),
      )
      return 'held'
    }
    // Due: the time has come, so it no longer shows as the next run (the reference clears it at RepeatDue).
    w.s.nextRunTime = undefined
    pass(w, 'previous run')
    return 'repeatDue'
  }
  pass(w, 'previous run')
  return undefined
}

/** The ModelBackfill is gone (its finalizer was removed by someone else, or it never had one). */
function gone(o: Observed): Decision {
  const actions: Action[] = []
  if (o.state) {
    actions.push({ type: 'cancelTimer' }, { type: 'deleteState' })
    if (o.state.jobName) actions.push({ type: 'releaseClaims', jobName: o.state.jobName })
  }
  return { state: null, status: null, actions, gates: NOT_REACHED }
}

/** Deletion: the Job goes first, then the finalizer, the timer, the claims and the state. */
function finalizeDeletion(w: Work) {
  const { s, o } = w
  const job = o.job
  if (s.jobName && job && !job.outcome) {
    if (!job.deleting) {
      w.actions.push({ type: 'deleteJob', jobName: s.jobName, why: 'Deleted' })
      if ((s.phase === 'Starting' || s.phase === 'Running') && !s.deletionCancelled) {
        // Useful time counted once: the decision repeats until the Job is seen going, the count must not. A
        // deletion is no preemption (the reference counts none): nothing won over the backfill, its owner ended it.
        s.deletionCancelled = true
        addUseful(w)
        w.actions.push({
          type: 'recordEvent',
          eventType: 'Normal',
          reason: 'BackfillCancelled',
          message: `ModelBackfill is being deleted; deleting Job ${s.jobName}`,
        })
      }
    }
    s.message = `ModelBackfill is being deleted; waiting for Job ${s.jobName} to be removed`
    return
  }
  if (s.jobName) w.actions.push({ type: 'releaseClaims', jobName: s.jobName })
  w.actions.push({ type: 'cancelTimer' }, { type: 'removeFinalizer' }, { type: 'deleteState' })
  s.message = 'ModelBackfill deleted'
}

/** Handles the current attempt's Job. Returns true while the attempt still holds the declaration. */
function attemptInFlight(w: Work, trigger: Trigger): boolean {
  const { s, o } = w
  const jobName = s.jobName as string
  let job = o.job
  if (job?.outcome) {
    if (!failedByCancel(w, job, trigger)) return concludeAttempt(w, job)
    // The preemption ranks above the Failed condition its own DELETE caused: decided as the deletion it is.
    job = { ...job, outcome: undefined }
  }
  if (job?.deleting) {
    if (s.phase === 'Succeeded' || s.phase === 'Cancelling') return true // cleanup or cancellation in progress
    // Deleted by the cancel function before this decision, by the fail-safe, or by someone else: account for it as
    // a cancel.
    const reason =
      cancelReason(w, trigger) ?? (trigger.type === 'cancel' ? trigger.reason : undefined) ?? cancelledBlind(w)
    if (reason) cancel(w, reason)
    else s.message = `Job ${jobName} is being deleted`
    return true
  }
  if (job) {
    s.rejections = undefined // the apiserver took this attempt's Job: the rejection back-off starts over
    const reason = cancelReason(w, trigger, true)
    if (reason) {
      cancel(w, reason)
      return true
    }
    if (job.started) {
      if (s.phase !== 'Running') {
        w.actions.push({
          type: 'recordEvent',
          eventType: 'Normal',
          reason: 'Running',
          message: `Job ${jobName} is running`,
        })
      }
      set(w, 'Running', 'JobRunning', `Job ${jobName} is running on node ${s.nodeName}`)
    } else {
      notStarting(w, job, jobName)
    }
    return true
  }
  // The Job does not exist.
  switch (s.phase) {
    case 'Starting': {
      if (trigger.type === 'jobRejected' && trigger.jobName === jobName) {
        rejected(w, jobName, trigger.message)
        return false
      }
      // Admitted, but the Job is not there: a crash between the state write and the create. Re-check the gates
      // with the attempt's own claim: still admissible → create it (same name, so at most one Job); else abandon.
      const reason = cancelReason(w, trigger)
      // A foreground cancel whose request came before this attempt's window is an earlier try's (redelivered, or
      // late): this admission may be creating the Job right now, and it stands (re-asked below).
      const earlierTry = trigger.type === 'cancel' && trigger.reason === 'ForegroundDemand' && !reason
      if (trigger.type === 'cancel' && !earlierTry) {
        // The cancel function deleted it (so it did exist): a preempted attempt, not an abandoned admission.
        preempted(w, jobName, reason ?? trigger.reason, reason ?? trigger.reason)
        return false
      }
      if (cancelledBlind(w)) {
        // The fail-safe deleted it: re-creating it under the same name would run background work nobody decided on
        // since visibility came back. A preemption; the next attempt goes through the gates with a fresh window.
        preempted(w, jobName, 'ForegroundUnobservable', failSafeWhy(w))
        return false
      }
      if (
        reason === 'ForegroundDemand' &&
        !(trigger.type === 'raced' && trigger.jobName === jobName) &&
        w.now - ms(s.startedAt) < ADMISSION_IN_FLIGHT_MS
      ) {
        // Seen by any decision but the admission's own while that admission may be in flight: its POST on the wire
        // (taken back here, the attempt's claims are given back by Job name and the Job created a moment later runs
        // unclaimed: demand finds nothing to cancel), or between the POST and deleting the Job a request raced (it
        // then decides again with that cancel and counts the preemption; taken back here, the attempt would end
        // uncounted). The admission settles it, the request's own cancel too; past ADMISSION_IN_FLIGHT_MS the
        // admission is taken for dead and any decision takes the attempt back.
        return true
      }
      // The attempt's claims, as admission just tried to take them again (pkg/admission/protocol.ts): held by another try
      // of this attempt (same Job name: a timer's and a lifecycle admit request's, or a retry), that try creates the
      // Job and this one leaves the attempt as it is; held by another backfill, the attempt cannot go on. Either way
      // no Job without its claims: demand finds the attempt to cancel by them.
      const holder = reason ? undefined : w.o.contenders[0]
      if (holder?.jobName === jobName) return true
      if (!reason && !holder) {
        // Every check of the attempt passed (the admission gates ran when it was admitted).
        for (const gate of CANCEL_GATES) pass(w, gate)
        w.actions.push({
          type: 'createJob',
          jobName,
          attempt: s.attempts,
          node: s.nodeName as string,
          spec: w.spec as ResolvedSpec,
        })
        return true
      }
      s.attempts -= 1
      s.counters.starts -= 1
      endAttempt(w, jobName)
      return false
    }
    case 'Cancelling':
      endAttempt(w, jobName)
      return false
    case 'Running': {
      // Gone before a decision saw it being deleted: by the cancel function (the trigger says why), by the
      // fail-safe (its status says so), or by someone else. Either way it was preempted.
      const blind = cancelledBlind(w)
      const reason = cancelReason(w, trigger) ?? (trigger.type === 'cancel' ? trigger.reason : undefined) ?? blind
      preempted(w, jobName, reason, blind && reason === blind ? failSafeWhy(w) : (reason ?? 'the Job was deleted'))
      return false
    }
    case 'Succeeded':
    case 'Failed':
      // The previous run's Job is gone (RepeatCleanup finished, or its TTL removed it). status.jobName keeps
      // naming it while the phase stays terminal, as the reference's does.
      s.finishedJobName = jobName
      s.jobName = undefined
      return false
    default:
      s.jobName = undefined
      return false
  }
}

/**
 * A Failed condition that is the cancel's doing, not the work's: the Job controller counts pods deleted under a Job
 * as failures (backoffLimit 0: Failed, BackoffLimitExceeded), and cancel deletes the attempt's pods beside its Job,
 * not after it, so the Job may report Failed before its own deletion shows, or while it is gone. So a Failed attempt
 * stays a preemption when its Failed condition came with or after its deletion, when Cancelling was decided first
 * (that decision saw no outcome yet), or when a foreground request had already broken the attempt's window — stored
 * in JetStream before demand saw it, so before any cancel, DELETE or Failed condition it caused (Kubernetes times are
 * whole seconds: the same second counts as after). A Job that Failed before either failed on its own; Complete
 * always wins.
 */
function failedByCancel(w: Work, job: JobView, trigger: Trigger): boolean {
  const s = w.s
  // Concluded already (Succeeded, Failed): the outcome recorded stands.
  if (job.outcome !== 'Failed' || s.phase === 'Succeeded' || s.phase === 'Failed') return false
  if (job.deleting && (s.phase === 'Cancelling' || ms(job.outcomeTime) >= ms(job.deletedAt))) return true
  const broken = windowBrokenAt(w, trigger)
  return broken !== undefined && ms(job.outcomeTime) >= Math.floor(broken / 1000) * 1000
}

/**
 * A Job that is not running yet. One its template suspends (jobTemplate.spec.suspend: true) never starts, and one
 * whose pods are not scheduled within NOT_STARTING_MS may not either: the status says so plainly (the phase stays
 * Starting, the contract's only reason for it is JobCreated) and one Warning Event tells it. The attempt keeps its
 * claims: a foreground request, a spec change or the Job's own deadline still ends it as usual.
 */
function notStarting(w: Work, job: JobView, jobName: string) {
  const s = w.s
  const waited = w.now - ms(s.startedAt)
  let problem: string | undefined
  if (job.suspended) {
    problem = `Job ${jobName} is suspended (the template's jobTemplate.spec.suspend is true) and will not start; remove suspend from the CronJob template, or resume the Job`
  } else if (waited >= NOT_STARTING_MS) {
    problem = `Job ${jobName} has not started ${Math.round(waited / 60_000)}m after its creation; its pods may not be schedulable (check the Job's pods and events)`
  }
  if (!problem) {
    set(w, 'Starting', 'JobCreated', `Job ${jobName} created; waiting for it to start`)
    return
  }
  if (!s.notStartingReported) {
    s.notStartingReported = true
    w.actions.push({ type: 'recordEvent', eventType: 'Warning', reason: 'JobNotStarting', message: problem })
  }
  set(w, 'Starting', 'JobCreated', problem)
}

/**
 * The apiserver refused the attempt's Job: nothing was created, so the attempt is taken back (not counted), its
 * claims go at once so other backfills on the model and node are not held up, and a re-check retries it later
 * (backing off on repeats). The idle window is kept: no foreground request came, so a retry needs no new window.
 */
function rejected(w: Work, jobName: string, message: string) {
  const s = w.s
  s.attempts -= 1
  s.counters.starts -= 1
  s.rejections = (s.rejections ?? 0) + 1
  w.actions.push({ type: 'releaseClaims', jobName })
  s.jobName = undefined
  s.nodeName = undefined
  s.startedAt = undefined
  s.runningSince = undefined
  const delay = Math.min(RECHECK_MS * 2 ** (s.rejections - 1), MAX_REJECTED_RECHECK_MS)
  armTimer(w, w.now + delay)
  set(
    w,
    'Blocked',
    'JobRejected',
    `Job ${jobName} was refused by the apiserver: ${message}; retrying after ${iso(w.now + delay)}`,
  )
}

/** The attempt is over without an outcome: its claims go, and the next attempt needs a fresh full window. */
function endAttempt(w: Work, jobName: string) {
  w.actions.push({ type: 'releaseClaims', jobName })
  const s = w.s
  s.jobName = undefined
  s.nodeName = undefined
  s.startedAt = undefined
  s.runningSince = undefined
  s.notStartingReported = undefined
  s.windowStart = iso(w.now)
}

/** A preemption, counted once by reason (running time up to now is useful time) and told as an Event. */
function countPreemption(w: Work, jobName: string, reason: CancelReason | undefined, why: string) {
  const metric = reason ? PREEMPTION_OF[reason] : 'other'
  w.s.counters.preemptions[metric] = (w.s.counters.preemptions[metric] ?? 0) + 1
  addUseful(w)
  recordCancelled(w, jobName, why)
}

/** The attempt's Job is gone after a preemption no decision recorded yet. */
function preempted(w: Work, jobName: string, reason: CancelReason | undefined, why: string) {
  countPreemption(w, jobName, reason, why)
  endAttempt(w, jobName)
}

/** The foreground request time a cancel request carries: a foreground signal like the idle state's. */
const foregroundAt = (trigger: Trigger) =>
  trigger.type === 'cancel' && trigger.reason === 'ForegroundDemand' ? trigger.at : undefined

/**
 * The newest foreground request (ms) when it came after the idle window the attempt was admitted on — any such
 * request breaks that window — else undefined.
 */
function windowBrokenAt(w: Work, trigger: Trigger): number | undefined {
  const { s, o } = w
  const lastForeground = latest(
    o.idle?.lastForegroundAt,
    o.lastRequestAt,
    o.model?.lastActiveTime,
    foregroundAt(trigger),
  )
  return lastForeground > ms(s.idleSince ?? s.startedAt) ? lastForeground : undefined
}

/**
 * The first reason that wins over the running attempt, if any. `reportGates`: this decision acts on it, so each
 * gate checked is reported (cancels / pass; with everyGate, the ones past the first too).
 */
function cancelReason(w: Work, trigger: Trigger, reportGates = false): CancelReason | undefined {
  let first: CancelReason | undefined
  for (const gate of CANCEL_GATES) {
    const reason = cancelCheck(w, gate, trigger)
    if (reason === SKIP) continue
    if (!reportGates) {
      if (reason) return reason
      continue
    }
    if (reason) report(w, gate, 'cancels', cancelMessage(reason))
    else pass(w, gate)
    first ??= reason
    if (first && !w.everyGate) return first
  }
  return first
}

/** One check of an attempt in flight: the cancel reason when it fails. */
function cancelCheck(
  w: Work,
  gate: (typeof CANCEL_GATES)[number],
  trigger: Trigger,
): CancelReason | typeof SKIP | undefined {
  const { s, o, b, now } = w
  const model = o.model
  switch (gate) {
    case 'suspend':
      // Suspending is itself a spec change; the more specific reason wins.
      return b.spec.suspend ? 'Suspended' : undefined
    case 'generation':
      return s.generation !== (b.metadata.generation ?? 1) ? 'SpecChanged' : undefined
    case 'model':
      return model ? undefined : 'ModelNotFound'
    case 'model ready':
      if (!model) return SKIP
      return model.ready ? undefined : 'ModelNotReady'
    case 'node':
      if (!model) return SKIP
      if (!model.node) return 'NodeUnresolved'
      return s.nodeName && model.node !== s.nodeName ? 'NodeChanged' : undefined
    case 'gaming':
      if (!model?.node) return SKIP
      return blockingGamingSession(o.gamingSessions, model.node, now) ? 'GamingIntent' : undefined
    case 'gpu lease':
      if (!model) return SKIP
      return blockingLease(o.leases, model, now) ? 'GPULeaseActive' : undefined
    case 'idle window':
      if (!model) return SKIP
      return windowBrokenAt(w, trigger) !== undefined ? 'ForegroundDemand' : undefined
  }
}

/**
 * Admit's re-reads of the model's newest request around the Job's POST (pkg/admission/reconcile.ts): true when one was
 * stored after the idle window the admission in flight (`s`, committed as Starting) stood on. Before the POST the
 * Job is then not created (the next decision takes the attempt back); after it, admit deletes the Job at once.
 * The same rule cancelReason() applies to a live attempt, so the decision that follows agrees.
 */
export function racedAdmission(s: BackfillState | null, lastRequestAt: string | null | undefined): boolean {
  if (s?.phase !== 'Starting' || !s.jobName || !s.idleSince) return false
  return ms(lastRequestAt ?? undefined) > ms(s.idleSince)
}

function cancel(w: Work, reason: CancelReason) {
  const s = w.s
  const jobName = s.jobName as string
  if (s.phase !== 'Cancelling') {
    countPreemption(w, jobName, reason, reason)
    set(w, 'Cancelling', reason, `${cancelMessage(reason)}; deleting Job ${jobName}`)
  }
  // Re-issued while Cancelling too: a delete is idempotent and a lost one must not wedge the attempt.
  w.actions.push({ type: 'deleteJob', jobName, why: s.reason as CancelReason })
}

/**
 * Every preemption tells `kubectl describe` why, also when its Job was already gone by the time it was decided. The
 * reasons BackfillStarted / BackfillCancelled are the reference controller's, so alerts on its Events keep working.
 */
function recordCancelled(w: Work, jobName: string, why: string) {
  w.actions.push({
    type: 'recordEvent',
    eventType: 'Normal',
    reason: 'BackfillCancelled',
    message: `Cancelled Job ${jobName}: ${why}`,
  })
}

function cancelMessage(reason: CancelReason): string {
  switch (reason) {
    case 'ForegroundDemand':
      return 'foreground request for the model'
    case 'GamingIntent':
      return 'a gaming session targets the model node'
    case 'GPULeaseActive':
      return 'a GPU lease holds the model node or GPU group'
    case 'Suspended':
      return 'spec.suspend is true'
    case 'SpecChanged':
      return 'the spec changed'
    case 'ModelNotFound':
      return 'the Model no longer exists'
    case 'ModelNotReady':
      return 'the Model is no longer Ready'
    case 'NodeChanged':
      return 'the Model moved to another node'
    case 'NodeUnresolved':
      return 'the Model node cannot be resolved'
    case 'ForegroundUnobservable':
      return 'foreground demand cannot be observed (fail-safe)'
  }
}

/**
 * Useful time runs from status.startedAt (the Job's creation, kept in runningSince until counted, as the reference
 * counts it) to the end of the attempt: completion or cancellation; the idle window is excluded. A Job reports
 * its end in whole seconds (Kubernetes times), so it ended within that second: count up to its end, never past now
 * (a run shorter than a second would otherwise count nothing).
 */
function addUseful(w: Work, endIso?: string) {
  const s = w.s
  const from = ms(s.runningSince)
  if (Number.isNaN(from)) return
  const reported = ms(endIso)
  const end = Number.isNaN(reported) ? w.now : Math.min(w.now, reported + (reported % 1000 === 0 ? 999 : 0))
  s.counters.usefulSeconds += Math.max(0, (end - from) / 1000)
  s.runningSince = undefined
}

/** The Job reached Complete or Failed. A completed Job wins over a coincident cancel. */
function concludeAttempt(w: Work, job: JobView): boolean {
  const { s, now } = w
  const jobName = s.jobName as string
  if (s.phase === 'Succeeded' || s.phase === 'Failed') {
    if (s.generation !== (w.b.metadata.generation ?? 1)) {
      // A terminal attempt of an older spec: clear it and start over.
      if (!job.deleting) w.actions.push({ type: 'deleteJob', jobName, why: 'Cleanup' })
      s.jobName = undefined
      return false
    }
    if (s.phase === 'Succeeded' && w.spec && w.spec.repeatAfterMs > 0 && now >= ms(s.nextRunTime)) {
      // Cooldown over: remove the previous run's Job before the gates run again.
      if (!job.deleting) w.actions.push({ type: 'deleteJob', jobName, why: 'RepeatCleanup' })
      set(w, 'Succeeded', 'RepeatCleanup', `cooldown over; removing Job ${jobName} of the previous run`)
      return true
    }
    if (s.phase === 'Succeeded' && w.spec?.repeatAfterMs && s.nextRunTime) armTimer(w, ms(s.nextRunTime))
    return true
  }
  if (s.phase === 'Cancelling') {
    // The delete raced the Job's own completion: the outcome wins, the preemption is taken back.
    const metric = PREEMPTION_OF[s.reason as CancelReason] ?? 'other'
    s.counters.preemptions[metric] = Math.max(0, (s.counters.preemptions[metric] ?? 0) - 1)
  } else {
    addUseful(w, job.outcomeTime)
  }
  const completion = job.outcomeTime ?? iso(now)
  s.completionTime = completion
  s.runningSince = undefined
  w.actions.push({ type: 'releaseClaims', jobName })
  if (job.outcome === 'Failed') {
    s.counters.failed += 1
    w.actions.push({
      type: 'recordEvent',
      eventType: 'Warning',
      reason: 'Failed',
      message: `Job ${jobName} failed: ${job.outcomeMessage ?? 'unknown reason'}`,
    })
    set(
      w,
      'Failed',
      'JobFailed',
      `Job ${jobName} failed: ${job.outcomeMessage ?? 'unknown reason'}; change the spec to retry`,
    )
    return true
  }
  s.counters.success += 1
  w.actions.push({ type: 'recordEvent', eventType: 'Normal', reason: 'Completed', message: `Job ${jobName} completed` })
  const repeatAfterMs = w.spec?.repeatAfterMs ?? 0
  if (repeatAfterMs > 0) {
    const next = ms(completion) + repeatAfterMs
    s.nextRunTime = iso(next)
    armTimer(w, next)
    set(w, 'Succeeded', 'RepeatScheduled', `Job ${jobName} completed; next run may start after ${s.nextRunTime}`)
  } else {
    set(w, 'Succeeded', 'JobComplete', `Job ${jobName} completed`)
  }
  return true
}

function restartForNewGeneration(w: Work) {
  const s = w.s
  s.generation = w.b.metadata.generation ?? 1
  s.completionTime = undefined
  s.nextRunTime = undefined
  s.startedAt = undefined
  s.finishedJobName = undefined
  if (s.phase !== 'WaitingForIdle') set(w, 'WaitingForIdle', 'IdleWindow', 'spec changed; starting over')
}

/** Succeeded: one-shot stays; with repeatAfter, hold until nextRunTime. Returns true while holding. */
function cooldown(w: Work): boolean {
  const { s, now } = w
  const repeatAfterMs = w.spec?.repeatAfterMs ?? 0
  if (repeatAfterMs === 0) {
    if (s.reason !== 'JobComplete') set(w, 'Succeeded', 'JobComplete', 'completed; one-shot declarations do not repeat')
    return true
  }
  const next = ms(s.nextRunTime)
  if (Number.isNaN(next)) {
    set(w, 'Blocked', 'RepeatStateInvalid', 'succeeded with repeatAfter but nextRunTime is missing or invalid')
    return true
  }
  if (now < next) {
    armTimer(w, next)
    set(w, 'Succeeded', 'RepeatScheduled', `next run may start after ${s.nextRunTime}`)
    return true
  }
  return false
}

/** What holds the backfill at a gate: the state decide sets, and the timer that re-checks it. */
interface Hold {
  phase: Phase
  reason: string
  message: string
  /** Arm the timer at this time (epoch ms). */
  timer?: number
  /** Not warm: there is no idle window to speak of (the reference clears idleSince too). */
  clearIdle?: true
  until?: number
}

/** What the admission gates share: computed once, before the first. */
interface AdmitCtx {
  repeatDue: boolean
  waitReason: 'RepeatDue' | 'IdleWindow'
  trigger: Trigger
  /** The model was not Ready or did not exist: warm from now on, its idle window starts now. */
  wasCold: boolean
  /** A refused Job waits for its re-check timer (read before any gate changed the state). */
  rejectedWait: boolean
  idleSince: number
  due: number
}

/** A gate that cannot be evaluated here (no Model, no valid spec): reported as not reached. */
const SKIP = 'skip'

/**
 * The admission gates in order; admits when every one passes. `live`: acts on the first that holds (sets the
 * state, arms its timer); otherwise (everyGate, after an earlier hold) only reports. With everyGate the gates past
 * the first hold are evaluated and reported too, never acted on.
 */
function gatesAndAdmit(w: Work, repeatDue: boolean, trigger: Trigger, live: boolean) {
  const { s, o, now } = w
  // No attempt holds a node here: status.nodeName shows the model's node whenever it is resolved (the Node column
  // of a waiting or blocked declaration), as the reference does.
  if (live) s.nodeName = o.model?.node
  const ctx: AdmitCtx = {
    repeatDue,
    waitReason: repeatDue || s.reason === 'RepeatDue' ? 'RepeatDue' : 'IdleWindow',
    trigger,
    wasCold:
      (s.phase === 'WaitingForIdle' && s.reason === 'ModelNotReady') ||
      (s.phase === 'Blocked' && s.reason === 'ModelNotFound'),
    rejectedWait: s.phase === 'Blocked' && s.reason === 'JobRejected' && now < ms(s.timerAt),
    idleSince: Number.NaN,
    due: Number.NaN,
  }
  let acting = live
  for (const gate of ADMISSION_GATES) {
    if (!acting && !w.everyGate) return
    const hold = admissionCheck(w, gate, ctx)
    if (hold === SKIP) continue
    const idle = gate === 'idle window'
    if (acting && idle) s.idleSince = iso(ctx.idleSince)
    if (!hold) {
      if (acting && gate === 'model ready' && ctx.wasCold) s.windowStart = iso(now)
      if (idle && w.everyGate) report(w, gate, 'pass', 'pass', ctx.idleSince, ctx.due)
      else pass(w, gate)
      continue
    }
    if (acting) {
      if (hold.clearIdle) s.idleSince = undefined
      if (hold.timer !== undefined) armTimer(w, hold.timer)
      set(w, hold.phase, hold.reason, hold.message)
      acting = false
    }
    report(
      w,
      gate,
      hold.phase === 'Blocked' ? 'blocked' : 'wait',
      hold.message,
      idle ? ctx.idleSince : undefined,
      hold.until,
    )
  }
  if (acting) admit(w)
}

/** One admission gate: undefined when it passes. */
function admissionCheck(w: Work, gate: AdmissionGate, ctx: AdmitCtx): Hold | typeof SKIP | undefined {
  const { s, o, b, now } = w
  const model = o.model
  switch (gate) {
    case 'model':
      if (model) return undefined
      return {
        phase: 'Blocked',
        reason: 'ModelNotFound',
        message: `Model ${b.metadata.namespace}/${b.spec.modelRef} not found`,
        clearIdle: true,
      }
    case 'template':
      if (o.template.found) return undefined
      return {
        phase: 'Blocked',
        reason: 'TemplateNotFound',
        message: `CronJob ${b.metadata.namespace}/${b.spec.templateRef} not found`,
        timer: now + RECHECK_MS,
      }
    case 'gpu request': {
      if (!o.template.found) return SKIP
      const g = o.template.gpu[0]
      if (!g) return undefined
      return {
        phase: 'Blocked',
        reason: 'GPURequestForbidden',
        message: `CronJob ${b.spec.templateRef} ${g.container ? `container ${g.container}` : 'pod spec'} sets ${g.resource}=${g.quantity}; backfill must not request a GPU`,
        timer: now + RECHECK_MS,
      }
    }
    case 'background gate':
      if (!o.template.found) return SKIP
      if (!o.template.gate) return undefined
      return {
        phase: 'Blocked',
        reason: 'InvalidEnvironment',
        message: `background gate: ${o.template.gate}`,
        timer: now + RECHECK_MS,
      }
    case 'model ready':
      if (!model) return SKIP
      if (model.ready) return undefined
      return {
        phase: 'WaitingForIdle',
        reason: 'ModelNotReady',
        message: `Model ${model.name} is ${model.phase ?? 'not Ready'}`,
        clearIdle: true,
      }
    case 'node':
      if (!model) return SKIP
      if (model.node) return undefined
      return {
        phase: 'WaitingForIdle',
        reason: 'NodeUnresolved',
        message: `Model ${model.name} has no status.gpu.node or hostname selector`,
      }
    case 'idle window': {
      if (!model?.ready || !w.spec) return SKIP
      // Warm from now on: a model that was not Ready, or did not exist at all, starts its idle window now.
      const windowStart = ctx.wasCold ? iso(now) : s.windowStart
      // The cancel request's own time counts too: it may arrive before the coalesced idle-state write.
      ctx.idleSince = latest(
        windowStart,
        o.idle?.lastForegroundAt,
        o.lastRequestAt,
        model.lastActiveTime,
        foregroundAt(ctx.trigger),
      )
      ctx.due = ctx.idleSince + w.spec.idleForMs
      if (now >= ctx.due) return undefined
      const why = ctx.repeatDue || ctx.waitReason === 'RepeatDue' ? 'cooldown over; ' : ''
      return {
        phase: 'WaitingForIdle',
        reason: ctx.waitReason,
        message: `${why}idle since ${iso(ctx.idleSince)}; window completes at ${iso(ctx.due)}`,
        timer: ctx.due,
        until: ctx.due,
      }
    }
    case 'gaming': {
      if (!model?.node) return SKIP
      const session = blockingGamingSession(o.gamingSessions, model.node, now)
      if (!session) return undefined
      return {
        phase: 'Blocked',
        reason: 'GamingIntent',
        message: `GamingSession ${session.name} targets node ${model.node}`,
        timer: expiryTimer(now, session.expiresAt),
        until: ms(session.expiresAt),
      }
    }
    case 'gpu lease': {
      if (!model) return SKIP
      const lease = blockingLease(o.leases, model, now)
      if (!lease) return undefined
      return {
        phase: 'Blocked',
        reason: 'GPULeaseActive',
        message: `GPULease ${lease.namespace}/${lease.name} holds the model's GPU`,
        timer: expiryTimer(now, lease.expiresAt),
        until: ms(lease.expiresAt),
      }
    }
    case 'claims': {
      const contender = o.contenders[0]
      if (!contender) return undefined
      const who = contender.backfill ? `${contender.namespace}/${contender.backfill}` : contender.namespace
      return {
        phase: 'Blocked',
        reason: 'ConcurrentBackfill',
        message: `backfill ${who} (Job ${contender.jobName}) is active on the same ${contender.on}`,
        timer: now + RECHECK_MS,
      }
    }
    case 'preemption path':
      if (!o.preemptionPath) return undefined
      // Foreground must win: no Job while nothing would cancel it, or while requests may be waiting unseen.
      return {
        phase: 'WaitingForIdle',
        reason: ctx.waitReason,
        message: `idle window complete; not admitting: ${o.preemptionPath.why}`,
        timer: now + PATH_RECHECK_MS,
      }
    case 'rejected recheck':
      // A refused Job is retried by its re-check timer, not by whatever event comes first (a Model status update).
      if (!ctx.rejectedWait) return undefined
      return { phase: 'Blocked', reason: 'JobRejected', message: s.message, until: ms(s.timerAt) }
  }
}

function admit(w: Work) {
  const { s, b, now } = w
  const spec = w.spec as ResolvedSpec
  const node = w.o.model?.node as string
  s.attempts += 1
  s.counters.starts += 1
  s.jobName = nameJob(b.metadata.name, s.attempts)
  s.nodeName = node
  s.startedAt = iso(now)
  s.runningSince = s.startedAt
  s.completionTime = undefined
  s.nextRunTime = undefined
  s.finishedJobName = undefined
  s.notStartingReported = undefined
  w.actions.push(
    { type: 'createJob', jobName: s.jobName, attempt: s.attempts, node, spec },
    {
      type: 'recordEvent',
      eventType: 'Normal',
      reason: 'BackfillStarted',
      message: `Started attempt ${s.attempts} as Job ${s.jobName} on node ${node}`,
      startedJob: s.jobName,
    },
  )
  set(w, 'Starting', 'JobCreated', `creating Job ${s.jobName} (attempt ${s.attempts})`)
}

/** Re-check just past an expiry; one without an expiry (or an unreadable one) every RECHECK_MS. */
function expiryTimer(now: number, expiresAt: string | undefined): number {
  const at = ms(expiresAt)
  return Number.isNaN(at) ? now + RECHECK_MS : Math.max(at, now) + 1
}

/** Lazy re-arm: a timer already due no later than `at` will fire and re-check, so it is left alone. */
function armTimer(w: Work, at: number) {
  const current = ms(w.s.timerAt)
  if (!Number.isNaN(current) && current > w.now && current <= at) return
  w.s.timerAt = iso(at)
  w.actions.push({ type: 'armTimer', at: w.s.timerAt })
}

function set(w: Work, phase: Phase, reason: string, message: string): true {
  const s = w.s
  if (phase === 'Blocked' && (s.phase !== 'Blocked' || s.reason !== reason)) {
    w.actions.push({ type: 'recordEvent', eventType: 'Warning', reason: 'Blocked', message: `${reason}: ${message}` })
  }
  s.phase = phase
  s.reason = reason
  s.message = message
  return true
}

function finish(w: Work): Decision {
  const { s, b, o, now } = w
  const deleting = w.actions.some((a) => a.type === 'deleteState')
  // A timer that came due and was not re-armed is no longer armed: forget it, so a past timerAt in a stored state
  // always means "fired but never handled" (the resync sweep, pkg/core/resync.ts, re-decides exactly those).
  if (s.timerAt && ms(s.timerAt) <= now && !w.actions.some((a) => a.type === 'armTimer')) delete s.timerAt
  if (sameState(o.state, s)) {
    s.updatedAt = o.state?.updatedAt ?? iso(now)
  } else {
    s.updatedAt = iso(now)
  }
  return {
    state: deleting ? null : s,
    status: deleting ? null : projectStatus(s, b, now),
    actions: w.actions,
    gates: w.gates,
  }
}

export const sameState = (a: BackfillState | null, b: BackfillState | null) =>
  a === b || (a !== null && b !== null && sameJson(a, b, 'updatedAt'))

/**
 * The fail-safe's bound: foreground demand that cannot be observed for longer than this (NATS unreachable, no demand
 * instance pulling foreground requests) and every running attempt is cancelled through Kubernetes alone
 * (functions/cancel/fail-safe.ts; FAILSAFE_BLIND_MS). Long enough to ride out a NATS reconnect or a demand restart
 * (1–2 s), short against what a foreground request costs while background work shares its model.
 */
export const FAILSAFE_BLIND_MS = 5_000
/** The status reason the fail-safe writes; decide reads it back to count the preemption once NATS is back. */
export const FAILSAFE_REASON = 'ForegroundUnobservable' satisfies CancelReason

/** What one probe of the preemption path saw: foreground demand observable, or why not. */
export type Visibility = { visible: true } | { visible: false; why: string }

export interface Blindness {
  /** When foreground demand was last seen observable (epoch ms; the fail-safe's start before its first probe). */
  lastSeenAt: number
  /** Why it is not now (the latest probe); undefined while it is. */
  why?: string
  /** Blind for longer than the bound: every running attempt is cancelled and none may start. */
  engaged: boolean
}

/**
 * The fail-safe's decision after a probe. `at` is when the probe was sent: a path seen observable answered at some
 * time after it, so that is the latest time it is known to have been. Blind for longer than `boundMs` → engaged; one
 * probe that sees the path again disengages (admission's own fence then decides, per attempt, as always).
 */
export function failSafe(prev: Blindness, probe: Visibility, at: number, boundMs: number): Blindness {
  if (probe.visible) return { lastSeenAt: Math.max(prev.lastSeenAt, at), engaged: false }
  return { lastSeenAt: prev.lastSeenAt, why: probe.why, engaged: at - prev.lastSeenAt > boundMs }
}

/** What the engaged fail-safe cancels: every backfill Job still running (not finished, not already being deleted). */
export const blindTargets = (jobs: readonly JobView[]): JobView[] => jobs.filter((j) => !j.deleting && !j.outcome)

/**
 * The status the fail-safe writes through Kubernetes before it deletes the attempt's Job (NATS, and with it the
 * backfill's state, may be gone): Cancelling/ForegroundUnobservable naming that Job. The next decision reads it back
 * (cancelledBlind) and counts the preemption — under `other` — in the state, where the counters live.
 */
export function blindStatus(b: ModelBackfill, jobName: string, message: string, now: number): ModelBackfillStatus {
  const previous = b.status?.conditions?.find((c) => c.type === 'Ready')
  return {
    ...b.status,
    phase: 'Cancelling',
    reason: FAILSAFE_REASON,
    message,
    jobName,
    conditions: [
      {
        type: 'Ready',
        status: 'False',
        reason: FAILSAFE_REASON,
        message,
        lastTransitionTime:
          previous?.status === 'False' && previous.lastTransitionTime ? previous.lastTransitionTime : iso(now),
        observedGeneration: b.metadata.generation ?? b.status?.observedGeneration,
      },
    ],
  }
}

/** The attempt's Job was deleted by the fail-safe: its status (written through Kubernetes) names that Job. */
function cancelledBlind(w: Work): CancelReason | undefined {
  const st = w.b.status
  return st?.reason === FAILSAFE_REASON && st.jobName === w.s.jobName ? FAILSAFE_REASON : undefined
}

const failSafeWhy = (w: Work) => w.b.status?.message ?? cancelMessage(FAILSAFE_REASON)

/** The status subresource is a projection of the state; the Ready condition is True only while Running/Succeeded. */
export function projectStatus(s: BackfillState, b: ModelBackfill, now: number): ModelBackfillStatus {
  const ready = s.phase === 'Running' || s.phase === 'Succeeded'
  // The generation this decision read: also while an attempt of the previous spec is being cancelled (SpecChanged),
  // so `kubectl wait --for=jsonpath='{.status.observedGeneration}'` sees the new spec acknowledged at once.
  const generation = b.metadata.generation ?? s.generation
  const terminal = s.phase === 'Succeeded' || s.phase === 'Failed'
  const previous = b.status?.conditions?.find((c) => c.type === 'Ready')
  const status = ready ? 'True' : 'False'
  const condition: Condition = {
    type: 'Ready',
    status,
    reason: s.reason,
    message: s.message,
    lastTransitionTime:
      previous?.status === status && previous.lastTransitionTime ? previous.lastTransitionTime : iso(now),
    observedGeneration: generation,
  }
  const out: ModelBackfillStatus = {
    phase: s.phase,
    reason: s.reason,
    message: s.message,
    observedGeneration: generation,
    nodeName: s.nodeName,
    jobName: s.jobName ?? (terminal ? s.finishedJobName : undefined),
    idleSince: s.idleSince,
    startedAt: s.startedAt,
    completionTime: s.completionTime,
    nextRunTime: s.nextRunTime,
    attempts: s.attempts,
    conditions: [condition],
  }
  for (const key of Object.keys(out) as (keyof ModelBackfillStatus)[]) {
    if (out[key] === undefined) delete out[key]
  }
  return out
}
