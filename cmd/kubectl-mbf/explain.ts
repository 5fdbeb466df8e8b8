// `kubectl mbf explain`: why a backfill is (not) running, gate by gate (the operator's word for decide()'s checks),
// from the same observation admit makes (pkg/reconcile/observe.ts observe()) plus the NATS state around it. Pure: the
// I/O lives in cmd/kubectl-mbf/read.ts, so the verdicts are unit-tested with made-up worlds. The checks and their
// verdicts are decide()'s own report (everyCheck, on the observation, without applying anything), and the closing line
// is that same decision: what admit would do if woken now. Explain only words the evidence and adds what decide does
// not read (the claims KV, whether the fence could be read).
import { checkSpec } from '../../pkg/core/api.js'
import { everyCheck } from '../../pkg/core/decide.js'
import type { CheckName, CheckReport, CheckVerdict, Observed } from '../../pkg/core/decision.js'
import type { BackfillState, Claim } from '../../pkg/core/state.js'
import { type GatePodSeen, type GateView, gateView } from './explain-gate.js'
import { human, isoMs, relative } from './format.js'

/** decide()'s verdicts, and unknown: what explain could not read (the fence). */
export type Verdict = CheckVerdict | 'unknown'

/** One of decide()'s checks as explain shows it (under the key `gate`: the word operators read). */
export interface ExplainedCheck {
  gate: CheckName | 'exists'
  verdict: Verdict
  evidence: string
}

export interface CancelRequestSeen {
  jobName: string
  reason: string
  /** The winning signal's time (for foreground: the request time). */
  at: string
  /** When NATS stored the cancel request. */
  storedAt: string
}

export interface EventSeen {
  type: string
  reason: string
  message: string
  time?: string
}

export interface ExplainInput {
  namespace: string
  name: string
  now: number
  observed: Observed
  /** The model's and the node's claims in flexinfer-claims (absent keys omitted). */
  claims: { key: string; claim: Claim }[]
  /** pkg/admission/fence.ts checkFence, or why it could not be read. */
  fence: { ready: true } | { ready: false; why: string } | { error: string }
  /** Whether the backfill's schedule is stored in FLEXINFER_TIMERS, and its schedule header. */
  timer: { stored: boolean; schedule?: string }
  /** KV history of the backfill's state, oldest first (the bucket keeps the last 5 revisions). */
  history: BackfillState[]
  /** The ModelBackfill's Events, oldest first. */
  events: EventSeen[]
  /** Cancel requests for this backfill found in FLEXINFER_EVENTS, oldest first. */
  cancelRequests: CancelRequestSeen[]
  /** The gate sidecar of the attempt's pods (absent: no attempt, or the pods could not be read). */
  gatePods?: GatePodSeen[]
}

export interface LastCancel {
  jobName?: string
  reason: string
  /** Trigger: the signal that won, when a cancel request recorded it. */
  triggerAt?: string
  cancelRequestedAt?: string
  /** When the Cancelling transition (written after the Job's DELETE) or the Event was recorded. */
  recordedAt?: string
  /** recordedAt − triggerAt. */
  latencyMs?: number
  source: string
}

export interface Explanation {
  namespace: string
  name: string
  now: string
  exists: boolean
  status?: {
    phase?: string
    reason?: string
    message?: string
    attempts?: number
    jobName?: string
    node?: string
    runId?: string
    runAttempt?: number
    /** The run's items as its attempts' termination messages reported them (status.runDone and the rest). */
    runDone?: number
    runTotal?: number
    runDiscarded?: number
  }
  /** The attempt in flight (its Job), when there is one: the gates then say what would cancel it. */
  attempt?: { jobName: string; phase: string; job: string }
  gates: ExplainedCheck[]
  nextTimer?: { at: string; in: string; stored: boolean; schedule?: string }
  lastCancel?: LastCancel
  /** What decide() makes of this observation now (admit woken by its timer), nothing applied. */
  decideNow?: { phase: string; reason: string; message: string; wouldCreateJob: boolean }
  counters?: BackfillState['counters']
  /** The background gate the backfill asks for (annotation) and, while an attempt runs, its state per pod. */
  backgroundGate?: GateView
}

/** Where the last foreground signal came from: the evidence an operator can check by hand. */
function lastForeground(o: Observed) {
  const candidates = [
    { at: isoMs(o.idle?.lastForegroundAt), source: 'idle KV (demand)' },
    { at: isoMs(o.lastRequestAt), source: 'FLEXINFER_FOREGROUND_LAST (stored by NATS)' },
    { at: isoMs(o.model?.lastActiveTime), source: 'Model status.lastActiveTime' },
  ].filter((c) => !Number.isNaN(c.at))
  return candidates.sort((a, b) => b.at - a.at)[0]
}

export function explain(input: ExplainInput): Explanation {
  const { observed: o, now } = input
  const out: Explanation = {
    namespace: input.namespace,
    name: input.name,
    now: new Date(now).toISOString(),
    exists: false,
    gates: [],
  }
  const b = o.backfill
  out.lastCancel = lastCancel(input)
  if (!b) {
    out.gates.push({
      gate: 'exists',
      verdict: 'blocked',
      evidence: `ModelBackfill ${input.namespace}/${input.name} not found`,
    })
    return out
  }
  out.exists = true
  const s = o.state
  out.status = {
    phase: b.status?.phase,
    reason: b.status?.reason,
    message: b.status?.message,
    attempts: b.status?.attempts,
    jobName: b.status?.jobName,
    node: b.status?.nodeName,
    runId: b.status?.runId,
    runAttempt: b.status?.runAttempt,
    runDone: b.status?.runDone,
    runTotal: b.status?.runTotal,
    runDiscarded: b.status?.runDiscarded,
  }
  out.counters = s?.counters
  out.backgroundGate = gateView(o, input.gatePods)
  const inFlight = s?.jobName && (s.phase === 'Starting' || s.phase === 'Running' || s.phase === 'Cancelling')
  if (inFlight && s?.jobName) {
    const job = o.job
    out.attempt = {
      jobName: s.jobName,
      phase: s.phase,
      job: !job
        ? 'not found'
        : job.deleting
          ? 'being deleted'
          : job.outcome
            ? job.outcome
            : job.started
              ? 'active'
              : 'created',
    }
  }

  const timerAt = isoMs(s?.timerAt)
  if (!Number.isNaN(timerAt)) {
    out.nextTimer = {
      at: new Date(timerAt).toISOString(),
      in: relative(timerAt, now),
      stored: input.timer.stored,
      schedule: input.timer.schedule,
    }
  } else if (input.timer.stored) {
    out.nextTimer = { at: '', in: '-', stored: true, schedule: input.timer.schedule }
  }

  const observed: Observed = { ...o }
  if ('ready' in input.fence && !input.fence.ready) observed.preemptionPath = { ready: false, why: input.fence.why }
  // Every check evaluated, not only the first that holds; the decision itself is decide()'s.
  const d = everyCheck(observed, { type: 'timer' }, now)
  out.gates = explainChecks(input, d.checks)
  if (d.state) {
    out.decideNow = {
      phase: d.state.phase,
      reason: d.state.reason,
      message: d.state.message,
      wouldCreateJob: d.actions.some((a) => a.type === 'createJob'),
    }
  }
  return out
}

/**
 * decide()'s own check report (everyCheck: every check that holds, not only the first), each told with the evidence
 * an operator can check: decide's message where a check holds, what was looked at where it passes. Only the claims
 * in flexinfer-claims and the fence's readability are added here: decide does not read them (admit takes the claims,
 * and learns the fence, only as it admits).
 */
export function explainChecks(input: ExplainInput, reports: readonly CheckReport[]): ExplainedCheck[] {
  const b = input.observed.backfill
  if (!b) return []
  const inFlight = attemptInFlight(input.observed.state)
  return reports.map((r) => {
    if (r.check === 'preemption path') return fenceCheck(input, r)
    if (r.check === 'idle window') return idleCheck(input, r, inFlight)
    if (r.check === 'claims') return claimsCheck(input, r, inFlight)
    if (r.verdict === 'not-reached') {
      const why = inFlight ? 'not checked while an attempt is in flight' : 'not evaluated'
      // The resolved durations are worth seeing whether or not the spec was checked.
      const evidence = r.check === 'spec' ? `${why}; ${passed(input, r.check)}` : why
      return { gate: r.check, verdict: r.verdict, evidence }
    }
    if (r.verdict === 'pass') return { gate: r.check, verdict: r.verdict, evidence: passed(input, r.check) }
    const expires = (r.check === 'gaming' || r.check === 'gpu lease') && r.until !== undefined
    return {
      gate: r.check,
      verdict: r.verdict,
      evidence: expires ? `${r.evidence}; expires ${relative(r.until as number, input.now)}` : r.evidence,
    }
  })
}

const attemptInFlight = (s: BackfillState | null) =>
  Boolean(s?.jobName && (s.phase === 'Starting' || s.phase === 'Running'))

/** What a check that passed looked at. */
function passed(input: ExplainInput, check: CheckName): string {
  const { observed: o } = input
  const b = o.backfill as NonNullable<Observed['backfill']>
  const m = o.model
  const generation = b.metadata.generation ?? 1
  switch (check) {
    case 'generation':
      return o.state && o.state.generation !== generation
        ? `spec generation ${generation} not yet decided (state is for ${o.state.generation}): starting over`
        : `spec generation ${generation}`
    case 'spec': {
      const checked = checkSpec(b.spec)
      if (!('resolved' in checked)) return 'valid'
      const r = checked.resolved
      return `idleFor ${human(r.idleForMs)}, maxRunDuration ${human(r.maxRunDurationMs)}${r.repeatAfterMs ? `, repeatAfter ${human(r.repeatAfterMs)}` : ', one-shot'}`
    }
    case 'suspend':
      return 'not suspended'
    case 'previous run':
      return 'no finished run holds it'
    case 'model':
      return `Model ${m?.name ?? b.spec.modelRef} found`
    case 'template':
      return `CronJob ${b.spec.templateRef} found`
    case 'gpu request':
      return `CronJob ${b.spec.templateRef} requests no GPU`
    case 'background gate':
      return 'buildable (or none asked for)'
    case 'model ready':
      return `Model ${m?.name} Ready`
    case 'node':
      return `Model ${m?.name} on node ${m?.node}`
    case 'gaming':
      return `no GamingSession on node ${m?.node}`
    case 'gpu lease':
      return `no GPULease on node ${m?.node ?? '-'}${m?.group ? ` or group ${m.group}` : ''}`
    case 'rejected recheck':
      return 'no refused Job waiting for its re-check'
    default:
      return 'pass'
  }
}

function idleCheck(input: ExplainInput, r: CheckReport, inFlight: boolean): ExplainedCheck {
  const { observed: o, now } = input
  const s = o.state
  const last = lastForeground(o)
  const lastText = last
    ? `last foreground request ${relative(last.at, now)} (${last.source})`
    : 'no foreground request recorded'
  const shown = { gate: r.check, verdict: r.verdict }
  if (inFlight && r.verdict !== 'not-reached') {
    return {
      ...shown,
      evidence:
        r.verdict === 'cancels'
          ? `${lastText}, after the window the attempt was admitted on`
          : `${lastText}; none since the attempt's window (idle since ${s?.idleSince ?? '-'})`,
    }
  }
  if (r.since === undefined || r.until === undefined) {
    const why = o.model && !o.model.ready ? '; the window starts when the model turns Ready' : ''
    return { ...shown, evidence: `${lastText}${why}` }
  }
  // No state yet: the functions have not decided it; their first decision (pkg/core/takeover.ts) starts the window at
  // the last known foreground activity, or now when nothing is known.
  const startText = !s
    ? '; no state yet (the functions have not seen this backfill): its first window starts at the last known foreground activity'
    : last && last.at >= r.since
      ? ''
      : `; window started ${relative(r.since, now)} (after creation, a cancel or the model turning Ready)`
  const idleFor = `(idleFor ${human(r.until - r.since)})`
  return {
    ...shown,
    evidence:
      now < r.until
        ? `${lastText}${startText}; window completes in ${human(r.until - now)} ${idleFor}`
        : `${lastText}${startText}; window complete since ${human(now - r.until)} ${idleFor}`,
  }
}

/**
 * decide's contenders, and the claims in flexinfer-claims (which admit meets only as it takes them). The claims are
 * shown while an attempt is in flight too: they are how demand finds the attempt to cancel.
 */
function claimsCheck(input: ExplainInput, r: CheckReport, inFlight: boolean): ExplainedCheck {
  const { now } = input
  const mine = (c: Claim) => c.namespace === input.namespace && c.backfill === input.name
  const foreign = input.claims.filter((c) => !mine(c.claim))
  const held = input.claims.filter((c) => mine(c.claim))
  const c = foreign[0]
  if (c) {
    return {
      gate: r.check,
      verdict: 'blocked',
      evidence: `claim ${c.key} held by ${c.claim.namespace}/${c.claim.backfill} (Job ${c.claim.jobName}, attempt ${c.claim.attempt}, since ${relative(isoMs(c.claim.claimedAt), now)})`,
    }
  }
  const free = r.verdict === 'pass' || r.verdict === 'not-reached'
  if (free && held.length)
    return {
      gate: r.check,
      verdict: r.verdict,
      evidence: `held by this backfill: ${held.map((c) => c.key).join(', ')}`,
    }
  if (r.verdict === 'pass') return { gate: r.check, verdict: 'pass', evidence: 'model and node are free' }
  if (r.verdict === 'not-reached')
    return {
      gate: r.check,
      verdict: r.verdict,
      evidence: inFlight ? 'not checked while an attempt is in flight' : 'not evaluated',
    }
  return { gate: r.check, verdict: r.verdict, evidence: r.evidence }
}

/** decide's verdict on the fence explain read (handed to it as admit hands it); unknown when it could not be read. */
function fenceCheck(input: ExplainInput, r: CheckReport): ExplainedCheck {
  const f = input.fence
  if ('error' in f) return { gate: r.check, verdict: 'unknown', evidence: `could not read the consumers: ${f.error}` }
  if (!f.ready) return { gate: r.check, verdict: r.verdict, evidence: f.why }
  if (r.verdict === 'pass')
    return { gate: r.check, verdict: 'pass', evidence: 'demand and cancel are pulling; demand has caught up' }
  return { gate: r.check, verdict: r.verdict, evidence: 'not checked while an attempt is in flight' }
}

/** The newest cancel: the KV history's Cancelling revision, the BackfillCancelled Event, the cancel request. */
export function lastCancel(input: ExplainInput): LastCancel | undefined {
  const fromHistory = [...input.history].reverse().find((h) => h.phase === 'Cancelling')
  const event = [...input.events].reverse().find((e) => e.reason === 'BackfillCancelled')
  if (!fromHistory && !event) return undefined
  const jobName = fromHistory?.jobName ?? /Cancelled Job (\S+?):/.exec(event?.message ?? '')?.[1]
  const reason = fromHistory?.reason ?? /: (.*)$/.exec(event?.message ?? '')?.[1] ?? 'unknown'
  const recordedAt = fromHistory?.updatedAt ?? event?.time
  // The request that triggered the recorded cancel: the newest for this Job at or before it was recorded. A later
  // one may name a later request (demand cancels again for a request while the Job is still going: its pods held).
  const forJob = [...input.cancelRequests].reverse().filter((r) => !jobName || r.jobName === jobName)
  const request = forJob.find((r) => isoMs(r.at) <= isoMs(recordedAt)) ?? forJob[0]
  const latency = isoMs(recordedAt) - isoMs(request?.at)
  return {
    jobName,
    reason,
    triggerAt: request?.at,
    cancelRequestedAt: request?.storedAt,
    recordedAt,
    latencyMs: Number.isFinite(latency) ? Math.round(latency) : undefined,
    source: fromHistory ? 'KV history (Cancelling revision)' : 'Event BackfillCancelled',
  }
}
