// `kubectl mbf explain`'s text output: the explanation (cmd/kubectl-mbf/explain.ts) as the operator reads it, one
// line per gate and a line each for the timer, the last cancel, the counters, the background gate and decide's
// verdict now.
import type { Explanation, Verdict } from './explain.js'
import { human, relative } from './format.js'

const MARK: Record<Verdict, string> = {
  pass: 'ok',
  wait: 'WAIT',
  blocked: 'BLOCKED',
  cancels: 'CANCELS',
  unknown: '?',
  'not-reached': '-',
}

/** The run's items as its attempts' termination messages reported them: done/total, and those preemptions threw away. */
function runProgress(st: NonNullable<Explanation['status']>): string {
  if (st.runDone === undefined || st.runTotal === undefined) return '; no progress reported yet'
  return `; ${st.runDone}/${st.runTotal} items done, ${st.runDiscarded ?? 0} discarded by preemptions`
}

/** The counters beyond the contract's four, once any attempt reported or was preempted. */
function itemCounters(c: NonNullable<Explanation['counters']>): string {
  if (c.itemsDone === undefined && c.itemsDiscarded === undefined && c.preemptedSeconds === undefined) return ''
  return `; items completed ${c.itemsDone ?? 0}, discarded ${c.itemsDiscarded ?? 0}, preempted running ${human((c.preemptedSeconds ?? 0) * 1000)}`
}

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
  if (st.runId) lines.push(`  run         ${st.runId}, attempt ${st.runAttempt ?? '?'} of the run${runProgress(st)}`)
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
      `Counters:     starts ${e.counters.starts}, succeeded ${e.counters.success}, failed ${e.counters.failed}, preemptions ${p || '0'}, useful ${human(e.counters.usefulSeconds * 1000)}${itemCounters(e.counters)}`,
    )
  }
  const g = e.backgroundGate
  if (g) {
    lines.push(`Background gate: ${g.requested}${g.problem ? `; BLOCKS: ${g.problem}` : ''}`)
    for (const p of g.pods) lines.push(`  pod ${p.pod}: ${p.gate}`)
    if (e.attempt && !g.pods.length) lines.push('  no pod of the attempt seen yet')
  }
  if (e.decideNow) {
    const d = e.decideNow
    lines.push(
      `Now:          admit would ${d.wouldCreateJob ? 'ADMIT it' : 'keep it'} ${d.phase}/${d.reason}: ${d.message}`,
    )
  }
  return lines.join('\n')
}
