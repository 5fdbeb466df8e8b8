// The one decision every function makes. Pure: no I/O, no clock. Every function calls it with what it observed and
// applies the actions it returns, so duplicated, reordered or replayed events converge on the same state (the
// decision is level-triggered: it looks at the world, not at the event that woke it).
//
// The decision, in order: the ModelBackfill gone (gone) or being deleted (finalizeDeletion); an attempt in flight,
// decided by its Job's state and its phase (pkg/core/attempt.ts, its table JOB_GONE); else a new generation starts
// over, and the checks decide whether an attempt may start (pkg/core/checks.ts: the spec's own, the previous run's
// outcome here, then the admission checks; admit when every one passes). The fail-safe's rules are
// pkg/core/fail-safe.ts, the status projected from the state pkg/core/status.ts.
import { checkSpec, FINALIZER, type ModelBackfill, type Phase, type ResolvedSpec } from './api.js'
import { addUseful, attemptInFlight } from './attempt.js'
import { admissionChecksPass, admitCtx, specAllows } from './checks.js'
import { type Action, CHECKS, type CheckReport, type Decision, type Observed, type Trigger } from './decision.js'
import { jobName as nameJob } from './names.js'
import { countProgress } from './progress.js'
import { beginAttempt, endRun } from './run.js'
import { sameJson } from './same-json.js'
import { type BackfillState, emptyCounters } from './state.js'
import { projectStatus } from './status.js'
import { type Takeover, takeover } from './takeover.js'
import { breaksWindow } from './window.js'
import { armTimer, iso, ms, NOT_REACHED, pass, report, set, type Work } from './work.js'

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

/** The decision: the next state and status, the actions to apply, and the report of the checks up to the one that decided. */
export function decide(o: Observed, trigger: Trigger, now: number): Decision {
  return decideWith(o, trigger, now, false)
}

/**
 * decide()'s decision with every check evaluated, also past the one that decided (reported, never acted on): what
 * `kubectl mbf explain` shows, everything that holds a backfill, not only the first. The state and actions are
 * decide()'s.
 */
export function everyCheck(o: Observed, trigger: Trigger, now: number): Decision {
  return decideWith(o, trigger, now, true)
}

function decideWith(o: Observed, trigger: Trigger, now: number, every: boolean): Decision {
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
    checks: NOT_REACHED.slice() as CheckReport[],
    every,
  }
  if (taken?.summary) {
    w.actions.push({
      type: 'recordEvent',
      eventType: 'Normal',
      reason: 'TakenOver',
      message: `No stored state; seeded from status and Jobs: ${taken.summary}`,
    })
  }
  if (trigger.type === 'progress') reportProgress(w, trigger)
  if (taken?.adopted && w.s.nodeName) {
    w.actions.push({ type: 'takeClaims', jobName: taken.adopted.name, attempt: w.s.attempts, node: w.s.nodeName })
  }
  // Useful time runs from startedAt (the Job's creation) while the attempt has not been counted yet, whatever a
  // stored state says of runningSince: one written by an earlier release started it when the Job was first seen
  // running, or not at all for a Job not yet seen running.
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
    for (let i = 0; i < CHECKS.length; i++) w.checks[i] = NOT_REACHED[i] as CheckReport
  }
  // No attempt in flight: a spec change just clears what the last generation left and starts over.
  if (w.s.generation !== (b.metadata.generation ?? 1)) {
    restartForNewGeneration(w)
    report(w, 'generation', 'pass', 'spec changed; starting over')
  } else pass(w, 'generation')
  // Held before the admission checks: by the spec, suspend, or the previous run's outcome.
  const held = preAdmission(w, checked)
  admission(w, held === 'repeatDue', trigger, held !== 'held')
  return finish(w)
}

/** Spec, suspend and the previous run's outcome: 'held' when one holds the backfill, 'repeatDue' when a repeat is. */
function preAdmission(w: Work, checked: ReturnType<typeof checkSpec>): 'held' | 'repeatDue' | undefined {
  if (!specAllows(w, checked)) return 'held'
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

/** An ended attempt's report of its run: counted once, told as an Event; the decision goes on as for any change. */
function reportProgress(w: Work, t: Extract<Trigger, { type: 'progress' }>) {
  const counted = countProgress(w.s, t.jobName, t.progress, t.preempted)
  if (!counted) return
  const { done, total } = t.progress
  const thrown = counted.discarded ? `; ${counted.discarded} in flight discarded by the preemption` : ''
  w.actions.push({
    type: 'recordEvent',
    eventType: 'Normal',
    reason: 'RunProgress',
    message: `Job ${t.jobName} ended with run ${t.progress.runId} at ${done}/${total} items (${counted.completed} completed by it${thrown})`,
  })
}

/** The ModelBackfill is gone (its finalizer was removed by someone else, or it never had one). */
function gone(o: Observed): Decision {
  const actions: Action[] = []
  if (o.state) {
    actions.push({ type: 'cancelTimer' }, { type: 'deleteState' })
    if (o.state.jobName) actions.push({ type: 'releaseClaims', jobName: o.state.jobName })
  }
  return { state: null, status: null, actions, checks: NOT_REACHED }
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

/**
 * Admit's re-reads of the model's newest request around the Job's POST (pkg/admission/create-job.ts): true when one was
 * stored after the idle window the admission in flight (`s`, committed as Starting) stood on. Before the POST the
 * Job is then not created (the next decision takes the attempt back); after it, admit deletes the Job at once.
 * The same rule cancelReason() applies to a live attempt (breaksWindow), so the decision that follows agrees.
 */
export function racedAdmission(s: BackfillState | null, lastRequestAt: string | null | undefined): boolean {
  if (s?.phase !== 'Starting' || !s.jobName || !s.idleSince) return false
  return breaksWindow(ms(lastRequestAt ?? undefined), s.idleSince)
}

function restartForNewGeneration(w: Work) {
  const s = w.s
  s.generation = w.b.metadata.generation ?? 1
  endRun(s)
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

/**
 * The admission checks in order; admits when every one passes. `live`: decide acts on the first that holds (sets the
 * state, arms its timer); not live (held before them), nothing is acted on and only explain's evaluation reports them.
 */
function admission(w: Work, repeatDue: boolean, trigger: Trigger, live: boolean) {
  // No attempt holds a node here: status.nodeName shows the model's node whenever it is resolved (the Node column
  // of a waiting or blocked declaration), as the reference does.
  if (live) w.s.nodeName = w.o.model?.node
  if (admissionChecksPass(w, admitCtx(w, repeatDue, trigger), live)) admit(w)
}

/** Every check passed: the next attempt starts, its Job created under the attempt's name. */
function admit(w: Work) {
  const { s, b, now } = w
  const spec = w.spec as ResolvedSpec
  const node = w.o.model?.node as string
  s.attempts += 1
  s.counters.starts += 1
  beginAttempt(s)
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
    checks: w.checks,
  }
}

export const sameState = (a: BackfillState | null, b: BackfillState | null) =>
  a === b || (a !== null && b !== null && sameJson(a, b, 'updatedAt'))
