// The attempt in flight: what its Job's state means for it. A Job with an outcome concludes the attempt (unless the
// outcome is a cancel's doing), one being deleted is a cancel to account for, a live one is checked against what
// may cancel it, and a Job that is not there means what JOB_GONE says for the attempt's phase.
import type { CancelReason, Phase, ResolvedSpec } from './api.js'
import { cancelMessage, cancelReason, passCancelChecks, RECHECK_MS, windowBrokenAt } from './checks.js'
import type { Trigger } from './decision.js'
import { cancelledByFailSafe, FAILSAFE_REASON } from './fail-safe.js'
import { endRun, takeBackAttempt } from './run.js'
import type { PreemptionReason } from './state.js'
import { armTimer, iso, ms, set, type Work } from './work.js'
import type { JobView } from './world.js'

/**
 * A created Job that has not started after this long is reported (status message and one Warning Event): its
 * template suspends it, or its pods are not scheduled. Checked by every decision (the resync sweep re-decides an
 * active attempt every period), so no timer of its own.
 */
export const NOT_STARTING_MS = 5 * 60_000
/**
 * How long a Starting attempt without a Job is admit's alone: its admission may still be in flight (the POST, then
 * deleting a Job a request raced). Past it the admission is taken for dead (a crashed admit's timer is redelivered
 * long before: ack_wait 30 s) and any decision may take the attempt back.
 */
export const ADMISSION_IN_FLIGHT_MS = 60_000
/** A Job rejected again and again is re-tried less often: RECHECK_MS doubling up to this. */
export const MAX_REJECTED_RECHECK_MS = 4 * 60_000

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

/** Handles the current attempt's Job. Returns true while the attempt still holds the declaration. */
export function attemptInFlight(w: Work, trigger: Trigger): boolean {
  const jobName = w.s.jobName as string
  let job = w.o.job
  if (job?.outcome) {
    if (!failedByCancel(w, job, trigger)) return concludeAttempt(w, job)
    // The preemption ranks above the Failed condition its own DELETE caused: decided as the deletion it is.
    job = { ...job, outcome: undefined }
  }
  if (!job) return JOB_GONE[w.s.phase](w, trigger, jobName)
  if (job.deleting) return jobDeleting(w, trigger, jobName)
  return jobLive(w, job, trigger, jobName)
}

type JobGone = (w: Work, trigger: Trigger, jobName: string) => boolean

/** The attempt's Job does not exist: what that means in each phase. */
const JOB_GONE: Record<Phase, JobGone> = {
  Starting: admittedWithoutJob,
  Cancelling: (w, _trigger, jobName) => {
    endAttempt(w, jobName)
    return false
  },
  Running: goneWhileRunning,
  Succeeded: previousRunGone,
  Failed: previousRunGone,
  WaitingForIdle: noAttempt,
  Suspended: noAttempt,
  Blocked: noAttempt,
}

/**
 * Admitted, but the Job is not there: a crash between the state write and the create, an admission still in flight,
 * a cancel, the fail-safe, or a refusal by the apiserver.
 */
function admittedWithoutJob(w: Work, trigger: Trigger, jobName: string): boolean {
  const s = w.s
  if (trigger.type === 'jobRejected' && trigger.jobName === jobName) {
    rejected(w, jobName, trigger.message)
    return false
  }
  // Re-check the checks with the attempt's own claim: still admissible → create it (same name, so at most one Job);
  // else abandon.
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
    // since visibility came back. A preemption; the next attempt goes through the checks with a fresh window.
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
    passCancelChecks(w)
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
  takeBackAttempt(s)
  endAttempt(w, jobName)
  return false
}

/**
 * Gone before a decision saw it being deleted: by the cancel function (the trigger says why), by the fail-safe (its
 * status says so), or by someone else. Either way it was preempted.
 */
function goneWhileRunning(w: Work, trigger: Trigger, jobName: string): boolean {
  const blind = cancelledBlind(w)
  const reason = cancelReason(w, trigger) ?? (trigger.type === 'cancel' ? trigger.reason : undefined) ?? blind
  preempted(w, jobName, reason, blind && reason === blind ? failSafeWhy(w) : (reason ?? 'the Job was deleted'))
  return false
}

/**
 * The previous run's Job is gone (RepeatCleanup finished, or its TTL removed it). status.jobName keeps naming it
 * while the phase stays terminal, as the reference's does.
 */
function previousRunGone(w: Work): boolean {
  w.s.finishedJobName = w.s.jobName
  w.s.jobName = undefined
  return false
}

/** A phase without an attempt naming a Job: the name is left over, and dropped. */
function noAttempt(w: Work): boolean {
  w.s.jobName = undefined
  return false
}

function jobDeleting(w: Work, trigger: Trigger, jobName: string): boolean {
  const s = w.s
  if (s.phase === 'Succeeded' || s.phase === 'Cancelling') return true // cleanup or cancellation in progress
  // Deleted by the cancel function before this decision, by the fail-safe, or by someone else: account for it as
  // a cancel.
  const reason =
    cancelReason(w, trigger) ?? (trigger.type === 'cancel' ? trigger.reason : undefined) ?? cancelledBlind(w)
  if (reason) cancel(w, reason, trigger)
  else s.message = `Job ${jobName} is being deleted`
  return true
}

function jobLive(w: Work, job: JobView, trigger: Trigger, jobName: string): boolean {
  const s = w.s
  s.rejections = undefined // the apiserver took this attempt's Job: the rejection back-off starts over
  const reason = cancelReason(w, trigger, true)
  if (reason) {
    cancel(w, reason, trigger)
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
  takeBackAttempt(s)
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
  const ran = addUseful(w)
  if (ran > 0) w.s.counters.preemptedSeconds = (w.s.counters.preemptedSeconds ?? 0) + ran
  recordCancelled(w, jobName, why)
}

/** The attempt's Job is gone after a preemption no decision recorded yet. */
function preempted(w: Work, jobName: string, reason: CancelReason | undefined, why: string) {
  countPreemption(w, jobName, reason, why)
  endAttempt(w, jobName)
}

function cancel(w: Work, reason: CancelReason, trigger: Trigger) {
  const s = w.s
  const jobName = s.jobName as string
  if (s.phase !== 'Cancelling') {
    countPreemption(w, jobName, reason, reason)
    set(w, 'Cancelling', reason, `${cancelMessage(reason)}; deleting Job ${jobName}`)
  }
  // The caller's DELETE of this very Job was accepted: sending it again would only load the apiserver.
  const uid = w.o.job?.uid
  if (trigger.type === 'cancel' && uid !== undefined && trigger.deletedUid === uid) return
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

/**
 * Useful time runs from status.startedAt (the Job's creation, kept in runningSince until counted, as the reference
 * counts it) to the end of the attempt: completion or cancellation; the idle window is excluded. A Job reports
 * its end in whole seconds (Kubernetes times), so it ended within that second: count up to its end, never past now
 * (a run shorter than a second would otherwise count nothing). Returns the seconds counted.
 */
export function addUseful(w: Work, endIso?: string): number {
  const s = w.s
  const from = ms(s.runningSince)
  if (Number.isNaN(from)) return 0
  const reported = ms(endIso)
  const end = Number.isNaN(reported) ? w.now : Math.min(w.now, reported + (reported % 1000 === 0 ? 999 : 0))
  const seconds = Math.max(0, (end - from) / 1000)
  s.counters.usefulSeconds += seconds
  s.runningSince = undefined
  return seconds
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
  endRun(s)
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

/** The attempt's Job was deleted by the fail-safe: the reason to account it under. */
const cancelledBlind = (w: Work): CancelReason | undefined =>
  cancelledByFailSafe(w.b.status, w.s.jobName) ? FAILSAFE_REASON : undefined

const failSafeWhy = (w: Work) => w.b.status?.message ?? cancelMessage(FAILSAFE_REASON)
