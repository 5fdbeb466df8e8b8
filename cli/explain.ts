// `kubectl mbf explain`: why a backfill is (not) running, gate by gate, from the same observation admit makes
// (admission/reconcile.ts observe()) plus the NATS state around it. Pure: the I/O lives in cli/read.ts, so the
// verdicts are unit-tested with made-up worlds. The gates are listed in decide()'s admission order and use its own
// helpers (blockingGamingSession, blockingLease, checkSpec), and the closing line is decide() itself, run on the
// observation without applying anything: what admit would do if woken now.
import { checkSpec } from '../core/api.js'
import { decide, type Observed } from '../core/decide.js'
import type { BackfillState, Claim } from '../core/state.js'
import { firstWindowStart } from '../core/takeover.js'
import { blockingGamingSession, blockingLease } from '../core/world.js'
import { human, isoMs, relative } from './format.js'

export type Verdict = 'pass' | 'wait' | 'blocked' | 'cancels' | 'unknown'

export interface Gate {
  gate: string
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
  /** admission/fence.ts checkFence, or why it could not be read. */
  fence: { ready: true } | { ready: false; why: string } | { error: string }
  /** Whether the backfill's schedule is stored in FLEXINFER_TIMERS, and its schedule header. */
  timer: { stored: boolean; schedule?: string }
  /** KV history of the backfill's state, oldest first (the bucket keeps the last 5 revisions). */
  history: BackfillState[]
  /** The ModelBackfill's Events, oldest first. */
  events: EventSeen[]
  /** Cancel requests for this backfill found in FLEXINFER_EVENTS, oldest first. */
  cancelRequests: CancelRequestSeen[]
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
  status?: { phase?: string; reason?: string; message?: string; attempts?: number; jobName?: string; node?: string }
  /** The attempt in flight (its Job), when there is one: the gates then say what would cancel it. */
  attempt?: { jobName: string; phase: string; job: string }
  gates: Gate[]
  nextTimer?: { at: string; in: string; stored: boolean; schedule?: string }
  lastCancel?: LastCancel
  /** What decide() makes of this observation now (admit woken by its timer), nothing applied. */
  decideNow?: { phase: string; reason: string; message: string; wouldCreateJob: boolean }
  counters?: BackfillState['counters']
}

const latest = (...times: (string | undefined)[]) =>
  times.reduce((max, t) => {
    const v = isoMs(t)
    return Number.isNaN(v) ? max : Math.max(max, v)
  }, Number.NEGATIVE_INFINITY)

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
  }
  out.counters = s?.counters
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
  out.gates = gates(input)

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
  const d = decide(observed, { type: 'timer' }, now)
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

/** The admission gates in decide()'s order, each with its evidence. */
export function gates(input: ExplainInput): Gate[] {
  const { observed: o, now } = input
  const b = o.backfill
  if (!b) return []
  const s = o.state
  const out: Gate[] = []
  const ns = b.metadata.namespace
  const checked = checkSpec(b.spec)
  const spec = 'resolved' in checked ? checked.resolved : null
  out.push(
    'problem' in checked
      ? { gate: 'spec', verdict: 'blocked', evidence: `${checked.problem.reason}: ${checked.problem.message}` }
      : {
          gate: 'spec',
          verdict: 'pass',
          evidence: `idleFor ${human(checked.resolved.idleForMs)}, maxRunDuration ${human(checked.resolved.maxRunDurationMs)}${checked.resolved.repeatAfterMs ? `, repeatAfter ${human(checked.resolved.repeatAfterMs)}` : ', one-shot'}`,
        },
  )
  out.push(
    b.spec.suspend
      ? { gate: 'suspend', verdict: 'blocked', evidence: 'spec.suspend is true' }
      : { gate: 'suspend', verdict: 'pass', evidence: 'not suspended' },
  )
  if (s && s.generation !== (b.metadata.generation ?? 1)) {
    out.push({
      gate: 'generation',
      verdict: s.jobName ? 'cancels' : 'wait',
      evidence: `spec generation ${b.metadata.generation} not yet decided (state is for ${s.generation})`,
    })
  }
  const inFlight = Boolean(s?.jobName && (s.phase === 'Starting' || s.phase === 'Running'))
  const stop: Verdict = inFlight ? 'cancels' : 'blocked'
  const m = o.model
  if (!m) {
    out.push({ gate: 'model', verdict: stop, evidence: `Model ${ns}/${b.spec.modelRef} not found` })
  } else if (!m.ready) {
    out.push({
      gate: 'model',
      verdict: inFlight ? 'cancels' : 'wait',
      evidence: `Model ${m.name} is ${m.phase ?? 'not Ready'}`,
    })
  } else if (!m.node) {
    out.push({
      gate: 'model',
      verdict: inFlight ? 'cancels' : 'wait',
      evidence: `Model ${m.name} Ready, but no status.gpu.node or hostname selector`,
    })
  } else if (inFlight && s?.nodeName && s.nodeName !== m.node) {
    out.push({
      gate: 'model',
      verdict: 'cancels',
      evidence: `Model ${m.name} moved to node ${m.node} (attempt on ${s.nodeName})`,
    })
  } else {
    out.push({ gate: 'model', verdict: 'pass', evidence: `Model ${m.name} Ready on node ${m.node}` })
  }
  if (!o.template.found) {
    out.push({ gate: 'template', verdict: 'blocked', evidence: `CronJob ${ns}/${b.spec.templateRef} not found` })
  } else if (o.template.gpu.length) {
    const g = o.template.gpu[0]
    out.push({
      gate: 'template',
      verdict: 'blocked',
      evidence: `CronJob ${b.spec.templateRef} requests ${g?.resource}=${g?.quantity}`,
    })
  } else {
    out.push({ gate: 'template', verdict: 'pass', evidence: `CronJob ${b.spec.templateRef} found, no GPU request` })
  }
  out.push(idleGate(input, spec?.idleForMs, inFlight))

  const session = blockingGamingSession(o.gamingSessions, m?.node, now)
  out.push(
    session
      ? {
          gate: 'gaming',
          verdict: stop,
          evidence: `GamingSession ${session.namespace}/${session.name} on node ${m?.node}${session.expiresAt ? `, expires ${relative(isoMs(session.expiresAt), now)}` : ''}`,
        }
      : {
          gate: 'gaming',
          verdict: m?.node ? 'pass' : 'unknown',
          evidence: m?.node ? `no GamingSession on node ${m.node}` : 'no node to check',
        },
  )
  const lease = m ? blockingLease(o.leases, m, now) : undefined
  out.push(
    lease
      ? {
          gate: 'gpu lease',
          verdict: stop,
          evidence: `GPULease ${lease.namespace}/${lease.name} holds ${lease.node ? `node ${lease.node}` : `group ${lease.group}`}`,
        }
      : {
          gate: 'gpu lease',
          verdict: m ? 'pass' : 'unknown',
          evidence: m ? `no GPULease on node ${m.node ?? '-'}${m.group ? ` or group ${m.group}` : ''}` : 'no model',
        },
  )
  out.push(claimsGate(input))
  out.push(fenceGate(input, inFlight))
  return out
}

function idleGate(input: ExplainInput, idleForMs: number | undefined, inFlight: boolean): Gate {
  const { observed: o, now } = input
  const s = o.state
  const last = lastForeground(o)
  const lastText = last
    ? `last foreground request ${relative(last.at, now)} (${last.source})`
    : 'no foreground request recorded'
  if (inFlight && s) {
    const admittedOn = isoMs(s.idleSince ?? s.startedAt)
    if (last && last.at > admittedOn)
      return {
        gate: 'idle window',
        verdict: 'cancels',
        evidence: `${lastText}, after the window the attempt was admitted on`,
      }
    return {
      gate: 'idle window',
      verdict: 'pass',
      evidence: `${lastText}; none since the attempt's window (idle since ${s.idleSince ?? '-'})`,
    }
  }
  if (idleForMs === undefined) return { gate: 'idle window', verdict: 'unknown', evidence: lastText }
  if (o.model && !o.model.ready)
    return {
      gate: 'idle window',
      verdict: 'wait',
      evidence: `${lastText}; the window starts when the model turns Ready`,
    }
  // No state yet: the functions have not decided it; their first decision (core/takeover.ts) starts the window at
  // the last known foreground activity, or now when nothing is known.
  const idleSinceLeft = o.backfill?.status?.idleSince
  const windowStart =
    s?.windowStart ??
    new Date(
      firstWindowStart(
        [o.idle?.lastForegroundAt, o.lastRequestAt, o.model?.lastActiveTime, idleSinceLeft ?? undefined],
        now,
      ),
    ).toISOString()
  const idleSince = latest(windowStart, o.idle?.lastForegroundAt, o.lastRequestAt, o.model?.lastActiveTime)
  const startText = !s
    ? '; no state yet (the functions have not seen this backfill): its first window starts at the last known foreground activity'
    : last && last.at >= idleSince
      ? ''
      : `; window started ${relative(idleSince, now)} (after creation, a cancel or the model turning Ready)`
  const due = idleSince + idleForMs
  if (now < due)
    return {
      gate: 'idle window',
      verdict: 'wait',
      evidence: `${lastText}${startText}; window completes in ${human(due - now)} (idleFor ${human(idleForMs)})`,
    }
  return {
    gate: 'idle window',
    verdict: 'pass',
    evidence: `${lastText}${startText}; window complete since ${human(now - due)} (idleFor ${human(idleForMs)})`,
  }
}

function claimsGate(input: ExplainInput): Gate {
  const { observed: o, now } = input
  const mine = (c: Claim) => c.namespace === input.namespace && c.backfill === input.name
  const foreign = input.claims.filter((c) => !mine(c.claim))
  const held = input.claims.filter((c) => mine(c.claim))
  const contender = o.contenders[0]
  if (foreign.length) {
    const c = foreign[0] as { key: string; claim: Claim }
    return {
      gate: 'claims',
      verdict: 'blocked',
      evidence: `claim ${c.key} held by ${c.claim.namespace}/${c.claim.backfill} (Job ${c.claim.jobName}, attempt ${c.claim.attempt}, since ${relative(isoMs(c.claim.claimedAt), now)})`,
    }
  }
  if (contender) {
    const who = contender.backfill ? `${contender.namespace}/${contender.backfill}` : contender.namespace
    return {
      gate: 'claims',
      verdict: 'blocked',
      evidence: `active Job ${who}/${contender.jobName} on the same ${contender.on}`,
    }
  }
  if (held.length)
    return { gate: 'claims', verdict: 'pass', evidence: `held by this backfill: ${held.map((c) => c.key).join(', ')}` }
  return { gate: 'claims', verdict: 'pass', evidence: 'model and node are free' }
}

function fenceGate(input: ExplainInput, inFlight: boolean): Gate {
  const f = input.fence
  if ('error' in f)
    return { gate: 'preemption path', verdict: 'unknown', evidence: `could not read the consumers: ${f.error}` }
  if (f.ready)
    return { gate: 'preemption path', verdict: 'pass', evidence: 'demand and cancel are pulling; demand has caught up' }
  // Only admission checks the fence; a running attempt is not cancelled by it.
  return { gate: 'preemption path', verdict: inFlight ? 'unknown' : 'wait', evidence: f.why }
}

/** The newest cancel: the KV history's Cancelling revision, the BackfillCancelled Event, the cancel request. */
export function lastCancel(input: ExplainInput): LastCancel | undefined {
  const fromHistory = [...input.history].reverse().find((h) => h.phase === 'Cancelling')
  const event = [...input.events].reverse().find((e) => e.reason === 'BackfillCancelled')
  if (!fromHistory && !event) return undefined
  const jobName = fromHistory?.jobName ?? /Cancelled Job (\S+?):/.exec(event?.message ?? '')?.[1]
  const reason = fromHistory?.reason ?? /: (.*)$/.exec(event?.message ?? '')?.[1] ?? 'unknown'
  const request = [...input.cancelRequests].reverse().find((r) => !jobName || r.jobName === jobName)
  const recordedAt = fromHistory?.updatedAt ?? event?.time
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

const MARK: Record<Verdict, string> = { pass: 'ok', wait: 'WAIT', blocked: 'BLOCKED', cancels: 'CANCELS', unknown: '?' }

export function renderExplanation(e: Explanation): string {
  const lines: string[] = []
  const now = Date.parse(e.now)
  lines.push(`ModelBackfill ${e.namespace}/${e.name}`)
  if (!e.exists) {
    lines.push('  not found')
    return lines.join('\n')
  }
  const st = e.status ?? {}
  lines.push(
    `  status      ${st.phase ?? '(none yet)'}/${st.reason ?? '-'}, ${st.attempts ?? 0} attempt(s)${st.jobName ? `, Job ${st.jobName}` : ''}`,
  )
  if (st.message) lines.push(`              ${st.message}`)
  if (e.attempt)
    lines.push(`  attempt     Job ${e.attempt.jobName} (${e.attempt.job}); the gates below say what would cancel it`)
  lines.push('Gates (admission order):')
  const width = Math.max(...e.gates.map((g) => g.gate.length))
  for (const g of e.gates) lines.push(`  ${MARK[g.verdict].padEnd(8)}${g.gate.padEnd(width + 2)}${g.evidence}`)
  if (e.nextTimer) {
    const at = e.nextTimer.at ? `${e.nextTimer.in} (${e.nextTimer.at})` : 'due time not recorded'
    lines.push(
      `Next timer:   ${at}; schedule ${e.nextTimer.stored ? `stored in FLEXINFER_TIMERS${e.nextTimer.schedule ? ` (${e.nextTimer.schedule})` : ''}` : 'not stored (fired or none)'}`,
    )
  } else {
    lines.push('Next timer:   none armed')
  }
  const c = e.lastCancel
  if (c) {
    const parts = [`Job ${c.jobName ?? '?'}, ${c.reason}`]
    if (c.triggerAt) parts.push(`trigger at ${c.triggerAt} (${relative(Date.parse(c.triggerAt), now)})`)
    if (c.cancelRequestedAt && c.triggerAt)
      parts.push(`cancel requested +${human(Date.parse(c.cancelRequestedAt) - Date.parse(c.triggerAt))}`)
    if (c.recordedAt) parts.push(`recorded ${c.recordedAt}`)
    if (c.latencyMs !== undefined) parts.push(`latency ${human(c.latencyMs)} (trigger → Job deleted and recorded)`)
    lines.push(`Last cancel:  ${parts.join('; ')} [${c.source}]`)
  } else {
    lines.push('Last cancel:  none recorded')
  }
  if (e.counters) {
    const p = Object.entries(e.counters.preemptions)
      .filter(([, n]) => n)
      .map(([k, n]) => `${k} ${n}`)
      .join(', ')
    lines.push(
      `Counters:     starts ${e.counters.starts}, succeeded ${e.counters.success}, failed ${e.counters.failed}, preemptions ${p || '0'}, useful ${human(e.counters.usefulSeconds * 1000)}`,
    )
  }
  if (e.decideNow) {
    const d = e.decideNow
    lines.push(
      `Now:          admit would ${d.wouldCreateJob ? 'ADMIT it' : 'keep it'} ${d.phase}/${d.reason}: ${d.message}`,
    )
  }
  return lines.join('\n')
}
