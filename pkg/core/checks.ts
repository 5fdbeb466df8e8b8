// decide()'s checks as lists of named predicates, in the order CHECKS reports them: the ones an attempt in flight
// must keep passing (CANCEL_CHECKS: the first that fails cancels it) and the ones an admission must pass
// (SPEC_CHECKS, then ADMISSION_CHECKS: the first that holds sets the phase and arms the re-check). Each list has one
// evaluator; decide's stops at the first that holds, explain's (Work.every) evaluates them all and acts on none past
// the first. A predicate only reads: what decide does with its verdict is the evaluator's.
import type { CancelReason, checkSpec, Phase } from './api.js'
import type { CheckName, Trigger } from './decision.js'
import { breaksWindow } from './window.js'
import { armTimer, iso, latest, ms, pass, report, set, type Work } from './work.js'
import { blockingGamingSession, blockingLease } from './world.js'

/** How often a Blocked declaration re-checks conditions that no watched object reports (templates, contenders). */
export const RECHECK_MS = 15_000
/** How soon admission tries again when the preemption path was not ready (pkg/admission/fence.ts). */
export const PATH_RECHECK_MS = 5_000

/** A check that cannot be evaluated here (no Model, no valid spec): reported as not reached. */
export const SKIP = 'skip'
type Skip = typeof SKIP

/** The status message of a cancel, and the evidence of the check that caused it. */
export function cancelMessage(reason: CancelReason): string {
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

/** The foreground request time a cancel request carries: a foreground signal like the idle state's. */
const foregroundAt = (trigger: Trigger) =>
  trigger.type === 'cancel' && trigger.reason === 'ForegroundDemand' ? trigger.at : undefined

/**
 * The newest foreground request (ms) when it came after the idle window the attempt was admitted on — any such
 * request breaks that window (breaksWindow) — else undefined.
 */
export function windowBrokenAt(w: Work, trigger: Trigger): number | undefined {
  const { s, o } = w
  const lastForeground = latest(
    o.idle?.lastForegroundAt,
    o.lastRequestAt,
    o.model?.lastActiveTime,
    foregroundAt(trigger),
  )
  return breaksWindow(lastForeground, s.idleSince ?? s.startedAt) ? lastForeground : undefined
}

interface CancelCheck {
  check: CheckName
  /** The cancel reason when the attempt fails it; SKIP when it cannot be evaluated (no Model). */
  reason: (w: Work, trigger: Trigger) => CancelReason | Skip | undefined
}

/** The checks of an attempt in flight, in decide's order (not CHECKS'): the first that fails cancels it. */
const CANCEL_CHECKS: readonly CancelCheck[] = [
  // Suspending is itself a spec change; the more specific reason wins.
  { check: 'suspend', reason: (w) => (w.b.spec.suspend ? 'Suspended' : undefined) },
  {
    check: 'generation',
    reason: (w) => (w.s.generation !== (w.b.metadata.generation ?? 1) ? 'SpecChanged' : undefined),
  },
  { check: 'model', reason: (w) => (w.o.model ? undefined : 'ModelNotFound') },
  {
    check: 'model ready',
    reason: ({ o: { model } }) => (!model ? SKIP : model.ready ? undefined : 'ModelNotReady'),
  },
  {
    check: 'node',
    reason: ({ o: { model }, s }) => {
      if (!model) return SKIP
      if (!model.node) return 'NodeUnresolved'
      return s.nodeName && model.node !== s.nodeName ? 'NodeChanged' : undefined
    },
  },
  {
    check: 'gaming',
    reason: ({ o, now }) => {
      if (!o.model?.node) return SKIP
      return blockingGamingSession(o.gamingSessions, o.model.node, now) ? 'GamingIntent' : undefined
    },
  },
  {
    check: 'gpu lease',
    reason: ({ o, now }) => {
      if (!o.model) return SKIP
      return blockingLease(o.leases, o.model, now) ? 'GPULeaseActive' : undefined
    },
  },
  {
    check: 'idle window',
    reason: (w, trigger) => {
      if (!w.o.model) return SKIP
      return windowBrokenAt(w, trigger) !== undefined ? 'ForegroundDemand' : undefined
    },
  },
]

/**
 * The first reason that wins over the running attempt, if any. `reportChecks`: this decision acts on it, so each
 * check evaluated is reported (cancels / pass; with Work.every, the ones past the first too).
 */
export function cancelReason(w: Work, trigger: Trigger, reportChecks = false): CancelReason | undefined {
  let first: CancelReason | undefined
  for (const c of CANCEL_CHECKS) {
    const reason = c.reason(w, trigger)
    if (reason === SKIP) continue
    if (!reportChecks) {
      if (reason) return reason
      continue
    }
    if (reason) report(w, c.check, 'cancels', cancelMessage(reason))
    else pass(w, c.check)
    first ??= reason
    if (first && !w.every) return first
  }
  return first
}

/** Every check of an attempt in flight passed (the admission checks ran when it was admitted). */
export function passCancelChecks(w: Work) {
  for (const c of CANCEL_CHECKS) pass(w, c.check)
}

/** What holds the backfill at a check: the state decide sets, and the timer that re-checks it. */
interface Hold {
  phase: Phase
  reason: string
  message: string
  /** Arm the timer at this time (epoch ms). */
  timer?: number
  /** Not warm: there is no idle window to speak of (the FlexInfer reference controller clears idleSince too). */
  clearIdle?: true
  /** idle window: when the window decide measured began (reported). */
  since?: number
  until?: number
}

interface HoldCheck<C> {
  check: CheckName
  /** undefined when it passes; SKIP when it cannot be evaluated here. */
  hold: (w: Work, ctx: C) => Hold | Skip | undefined
  /** What evaluating it writes to the state when decide acts on it, whether it passed or not. */
  evaluated?: (w: Work, ctx: C, passed: boolean) => void
  /** A pass's window, reported for explain (decide's own report of a pass is the shared one). */
  passWindow?: (ctx: C) => { since: number; until: number }
}

/**
 * Evaluates `checks` in order. While `acting`, the first that holds decides: its state, its timer. Returns whether
 * every check passed while acting (nothing holds the backfill). decide stops at the first hold; explain's
 * evaluation (Work.every) reports the rest too, never acting on them.
 */
function runChecks<C>(w: Work, checks: readonly HoldCheck<C>[], ctx: C, acting: boolean): boolean {
  for (const c of checks) {
    if (!acting && !w.every) return false
    const hold = c.hold(w, ctx)
    if (hold === SKIP) continue
    if (acting) c.evaluated?.(w, ctx, !hold)
    if (!hold) {
      const window = w.every ? c.passWindow?.(ctx) : undefined
      if (window) report(w, c.check, 'pass', 'pass', window.since, window.until)
      else pass(w, c.check)
      continue
    }
    if (acting) {
      if (hold.clearIdle) w.s.idleSince = undefined
      if (hold.timer !== undefined) armTimer(w, hold.timer)
      set(w, hold.phase, hold.reason, hold.message)
      acting = false
    }
    const waits = hold.phase === 'WaitingForIdle' || hold.phase === 'Succeeded'
    report(w, c.check, waits ? 'wait' : 'blocked', hold.message, hold.since, hold.until)
  }
  return acting
}

/** The spec's own checks, before any other: an invalid spec, then suspend. */
const SPEC_CHECKS: readonly HoldCheck<ReturnType<typeof checkSpec>>[] = [
  {
    check: 'spec',
    hold: (_w, checked) =>
      'problem' in checked
        ? { phase: 'Blocked', reason: checked.problem.reason, message: checked.problem.message }
        : undefined,
  },
  {
    check: 'suspend',
    hold: (w) =>
      w.b.spec.suspend
        ? { phase: 'Suspended', reason: 'Suspended', message: 'spec.suspend is true; no attempt may run' }
        : undefined,
  },
]

/** Whether the spec lets an attempt run: false when it is invalid or suspended (the phase is then set). */
export const specAllows = (w: Work, checked: ReturnType<typeof checkSpec>) => runChecks(w, SPEC_CHECKS, checked, true)

/** What the admission checks share: computed once, before the first. */
export interface AdmitCtx {
  repeatDue: boolean
  waitReason: 'RepeatDue' | 'IdleWindow'
  trigger: Trigger
  /** The model was not Ready or did not exist: warm from now on, its idle window starts now. */
  wasCold: boolean
  /** A refused Job waits for its re-check timer (read before any check changed the state). */
  rejectedWait: boolean
  idleSince: number
  due: number
}

export function admitCtx(w: Work, repeatDue: boolean, trigger: Trigger): AdmitCtx {
  const s = w.s
  return {
    repeatDue,
    waitReason: repeatDue || s.reason === 'RepeatDue' ? 'RepeatDue' : 'IdleWindow',
    trigger,
    wasCold:
      (s.phase === 'WaitingForIdle' && s.reason === 'ModelNotReady') ||
      (s.phase === 'Blocked' && s.reason === 'ModelNotFound'),
    rejectedWait: s.phase === 'Blocked' && s.reason === 'JobRejected' && w.now < ms(s.timerAt),
    idleSince: Number.NaN,
    due: Number.NaN,
  }
}

/** Re-check just past an expiry; one without an expiry (or an unreadable one) every RECHECK_MS. */
function expiryTimer(now: number, expiresAt: string | undefined): number {
  const at = ms(expiresAt)
  return Number.isNaN(at) ? now + RECHECK_MS : Math.max(at, now) + 1
}

/** The admission checks, in CHECKS order from the model on; an attempt is admitted when every one passes. */
const ADMISSION_CHECKS: readonly HoldCheck<AdmitCtx>[] = [
  {
    check: 'model',
    hold: ({ o, b }) =>
      o.model
        ? undefined
        : {
            phase: 'Blocked',
            reason: 'ModelNotFound',
            message: `Model ${b.metadata.namespace}/${b.spec.modelRef} not found`,
            clearIdle: true,
          },
  },
  {
    check: 'template',
    hold: ({ o, b, now }) =>
      o.template.found
        ? undefined
        : {
            phase: 'Blocked',
            reason: 'TemplateNotFound',
            message: `CronJob ${b.metadata.namespace}/${b.spec.templateRef} not found`,
            timer: now + RECHECK_MS,
          },
  },
  {
    check: 'gpu request',
    hold: ({ o, b, now }) => {
      if (!o.template.found) return SKIP
      const g = o.template.gpu[0]
      if (!g) return undefined
      return {
        phase: 'Blocked',
        reason: 'GPURequestForbidden',
        message: `CronJob ${b.spec.templateRef} ${g.container ? `container ${g.container}` : 'pod spec'} sets ${g.resource}=${g.quantity}; backfill must not request a GPU`,
        timer: now + RECHECK_MS,
      }
    },
  },
  {
    check: 'background gate',
    hold: ({ o, now }) => {
      if (!o.template.found) return SKIP
      if (!o.template.gate) return undefined
      return {
        phase: 'Blocked',
        reason: 'InvalidEnvironment',
        message: `background gate: ${o.template.gate}`,
        timer: now + RECHECK_MS,
      }
    },
  },
  {
    check: 'model ready',
    hold: ({ o: { model } }) => {
      if (!model) return SKIP
      if (model.ready) return undefined
      return {
        phase: 'WaitingForIdle',
        reason: 'ModelNotReady',
        message: `Model ${model.name} is ${model.phase ?? 'not Ready'}`,
        clearIdle: true,
      }
    },
    // Warm from now on: the idle window of a model that was not Ready, or did not exist, starts now.
    evaluated: (w, ctx, passed) => {
      if (passed && ctx.wasCold) w.s.windowStart = iso(w.now)
    },
  },
  {
    check: 'node',
    hold: ({ o: { model } }) => {
      if (!model) return SKIP
      if (model.node) return undefined
      return {
        phase: 'WaitingForIdle',
        reason: 'NodeUnresolved',
        message: `Model ${model.name} has no status.gpu.node or hostname selector`,
      }
    },
  },
  {
    check: 'idle window',
    hold: (w, ctx) => {
      const { s, o, now } = w
      const model = o.model
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
        since: ctx.idleSince,
        until: ctx.due,
      }
    },
    // The window measured is the attempt's, held or admitted: a foreground request after it cancels the attempt.
    evaluated: (w, ctx) => {
      w.s.idleSince = iso(ctx.idleSince)
    },
    passWindow: (ctx) => ({ since: ctx.idleSince, until: ctx.due }),
  },
  {
    check: 'gaming',
    hold: ({ o, now }) => {
      const node = o.model?.node
      if (!node) return SKIP
      const session = blockingGamingSession(o.gamingSessions, node, now)
      if (!session) return undefined
      return {
        phase: 'Blocked',
        reason: 'GamingIntent',
        message: `GamingSession ${session.name} targets node ${node}`,
        timer: expiryTimer(now, session.expiresAt),
        until: ms(session.expiresAt),
      }
    },
  },
  {
    check: 'gpu lease',
    hold: ({ o, now }) => {
      if (!o.model) return SKIP
      const lease = blockingLease(o.leases, o.model, now)
      if (!lease) return undefined
      return {
        phase: 'Blocked',
        reason: 'GPULeaseActive',
        message: `GPULease ${lease.namespace}/${lease.name} holds the model's GPU`,
        timer: expiryTimer(now, lease.expiresAt),
        until: ms(lease.expiresAt),
      }
    },
  },
  {
    check: 'claims',
    hold: ({ o, now }) => {
      const contender = o.contenders[0]
      if (!contender) return undefined
      const who = contender.backfill ? `${contender.namespace}/${contender.backfill}` : contender.namespace
      return {
        phase: 'Blocked',
        reason: 'ConcurrentBackfill',
        message: `backfill ${who} (Job ${contender.jobName}) is active on the same ${contender.on}`,
        timer: now + RECHECK_MS,
      }
    },
  },
  {
    check: 'preemption path',
    // Foreground must win: no Job while nothing would cancel it, or while requests may be waiting unseen.
    hold: ({ o, now }, ctx) =>
      o.preemptionPath
        ? {
            phase: 'WaitingForIdle',
            reason: ctx.waitReason,
            message: `idle window complete; not admitting: ${o.preemptionPath.why}`,
            timer: now + PATH_RECHECK_MS,
          }
        : undefined,
  },
  {
    check: 'rejected recheck',
    // A refused Job is retried by its re-check timer, not by whatever event comes first (a Model status update).
    hold: ({ s }, ctx) =>
      ctx.rejectedWait
        ? { phase: 'Blocked', reason: 'JobRejected', message: s.message, until: ms(s.timerAt) }
        : undefined,
  },
]

/**
 * Runs the admission checks: true when every one passed while `acting` (admit). Not acting (an earlier check held
 * the backfill), decide evaluates none; explain's evaluation reports them all.
 */
export const admissionChecksPass = (w: Work, ctx: AdmitCtx, acting: boolean) =>
  runChecks(w, ADMISSION_CHECKS, ctx, acting)
