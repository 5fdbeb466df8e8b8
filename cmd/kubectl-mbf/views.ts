// `kubectl mbf get` and `kubectl mbf top`: rows computed from what was read, and their text tables. Pure.
import { checkSpec, type ModelBackfill } from '../../pkg/core/api.js'
import type { BackfillState, ModelIdleState } from '../../pkg/core/state.js'
import type { EventSeen } from './explain.js'
import { human, isoMs, relative, table } from './format.js'

export interface GetRow {
  namespace: string
  name: string
  model: string
  phase: string
  reason: string
  attempts: number
  /** The current or last run (status.runId, status.runAttempt): its identity and the attempt within it. */
  run: { id: string; attempt: number } | null
  /**
   * The run's items done and in all, as its attempts' termination messages reported them (status.runDone,
   * status.runTotal); null until one was read.
   */
  progress: { done: number; total: number } | null
  /** Time left in the idle window (WaitingForIdle with a window running); null otherwise. */
  windowLeftMs: number | null
  lastPreemption: { at: string; reason: string } | null
  message: string
}

/** The newest BackfillCancelled Event: "Cancelled Job <job>: <why>". */
export function lastPreemption(events: EventSeen[]): GetRow['lastPreemption'] {
  const e = [...events]
    .filter((x) => x.reason === 'BackfillCancelled' && x.time)
    .sort((a, b) => isoMs(a.time) - isoMs(b.time))
    .at(-1)
  if (!e) return null
  return { at: e.time as string, reason: /: (.*)$/.exec(e.message)?.[1] ?? e.message }
}

export function getRow(b: ModelBackfill, events: EventSeen[], now: number): GetRow {
  const st = b.status ?? {}
  let windowLeftMs: number | null = null
  const checked = checkSpec(b.spec)
  if (st.phase === 'WaitingForIdle' && (st.reason === 'IdleWindow' || st.reason === 'RepeatDue') && st.idleSince) {
    const idleForMs = 'resolved' in checked ? checked.resolved.idleForMs : Number.NaN
    const left = isoMs(st.idleSince) + idleForMs - now
    if (Number.isFinite(left)) windowLeftMs = Math.max(0, left)
  }
  return {
    namespace: b.metadata.namespace,
    name: b.metadata.name,
    model: b.spec.modelRef,
    phase: st.phase ?? '',
    reason: st.reason ?? '',
    attempts: st.attempts ?? 0,
    run: st.runId ? { id: st.runId, attempt: st.runAttempt ?? 0 } : null,
    progress:
      st.runId && st.runDone !== undefined && st.runTotal !== undefined
        ? { done: st.runDone, total: st.runTotal }
        : null,
    windowLeftMs,
    lastPreemption: lastPreemption(events),
    message: st.message ?? '',
  }
}

export function renderGet(rows: GetRow[], now: number, namespace: string | undefined): string {
  const allNamespaces = namespace === undefined
  if (!rows.length)
    return allNamespaces ? 'No ModelBackfills found.' : `No ModelBackfills found in namespace ${namespace}.`
  const header = [
    ...(allNamespaces ? ['NAMESPACE'] : []),
    'NAME',
    'MODEL',
    'PHASE',
    'REASON',
    'WINDOW LEFT',
    'LAST PREEMPTION',
    'ATTEMPTS',
    'RUN',
    'PROGRESS',
  ]
  return table(
    header,
    rows.map((r) => [
      ...(allNamespaces ? [r.namespace] : []),
      r.name,
      r.model,
      r.phase || '-',
      r.reason || '-',
      r.windowLeftMs === null ? '-' : human(r.windowLeftMs),
      r.lastPreemption ? `${relative(isoMs(r.lastPreemption.at), now)} (${r.lastPreemption.reason})` : '-',
      String(r.attempts),
      r.run ? `${r.run.id} #${r.run.attempt}` : '-',
      r.progress ? `${r.progress.done}/${r.progress.total}` : '-',
    ]),
  )
}

/**
 * Share of [from, to] during which the model had been free of foreground requests for at least idleFor: the time
 * a backfill may run. `requests` are request times (ms), any order; `before` is the last one before `from`.
 */
export function idleShare(requests: number[], from: number, to: number, idleForMs: number, before?: number): number {
  if (!(to > from)) return 0
  const times = [...(before === undefined ? [] : [before]), ...requests.filter((t) => t >= from && t <= to)].sort(
    (a, b) => a - b,
  )
  let idle = 0
  // The segments between consecutive requests: idle from (request + idleFor) until the next request.
  let last = times.length && (times[0] as number) <= from ? (times.shift() as number) : Number.NEGATIVE_INFINITY
  let cursor = from
  const add = (until: number) => {
    const start = Math.max(cursor, last + idleForMs)
    if (until > start) idle += until - start
  }
  for (const t of times) {
    add(t)
    cursor = t
    last = t
  }
  add(to)
  return idle / (to - from)
}

export interface TopRow {
  namespace: string
  model: string
  backfills: number
  /** Foreground requests demand has folded into the idle entry (since the entry was created). */
  requests: number
  /** Requests per second over the sample (null without a sample). */
  ratePerS: number | null
  /** idleShare over the sample with the shortest idleFor of the model's backfills (null without a sample). */
  idleRatio: number | null
  lastForegroundAt?: string
  usefulSeconds: number
  preemptions: number
  running: number
  /** Where usefulSeconds/preemptions came from. */
  source: 'kv' | 'metrics'
}

export interface ModelSample {
  /** Idle entries seen during the sample, oldest first (coalesced writes: ≤ 1 per 250 ms per model). */
  entries: ModelIdleState[]
  from: number
  to: number
}

/** The four contract metric families summed per `<namespace>/<model>` from a Prometheus text exposition. */
export function metricsByModel(text: string): Map<string, { usefulSeconds: number; preemptions: number }> {
  const out = new Map<string, { usefulSeconds: number; preemptions: number }>()
  for (const line of text.split('\n')) {
    const m = /^(flexinfer_model_backfill_(?:useful_running_seconds|preemptions)_total)\{([^}]*)\}\s+(\S+)/.exec(line)
    if (!m) continue
    const labels = Object.fromEntries(
      [...(m[2] as string).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]),
    )
    const key = `${labels.namespace}/${labels.model}`
    const entry = out.get(key) ?? { usefulSeconds: 0, preemptions: 0 }
    const value = Number(m[3])
    if (!Number.isFinite(value)) continue
    if ((m[1] as string).includes('useful')) entry.usefulSeconds += value
    else entry.preemptions += value
    out.set(key, entry)
  }
  return out
}

export function topRows(
  states: BackfillState[],
  backfills: ModelBackfill[],
  idle: ModelIdleState[],
  samples: Map<string, ModelSample>,
  metrics?: Map<string, { usefulSeconds: number; preemptions: number }>,
): TopRow[] {
  const rows = new Map<string, TopRow>()
  const idleFor = new Map<string, number>()
  const row = (namespace: string, model: string) => {
    const key = `${namespace}/${model}`
    let r = rows.get(key)
    if (!r) {
      r = {
        namespace,
        model,
        backfills: 0,
        requests: 0,
        ratePerS: null,
        idleRatio: null,
        usefulSeconds: 0,
        preemptions: 0,
        running: 0,
        source: 'kv',
      }
      rows.set(key, r)
    }
    return r
  }
  for (const b of backfills) {
    const r = row(b.metadata.namespace, b.spec.modelRef)
    r.backfills++
    const checked = checkSpec(b.spec)
    if ('resolved' in checked) {
      const key = `${r.namespace}/${r.model}`
      idleFor.set(key, Math.min(idleFor.get(key) ?? Number.POSITIVE_INFINITY, checked.resolved.idleForMs))
    }
  }
  for (const s of states) {
    const r = row(s.namespace, s.model)
    r.usefulSeconds += s.counters.usefulSeconds
    r.preemptions += Object.values(s.counters.preemptions).reduce((a, n) => a + (n ?? 0), 0)
    if (s.phase === 'Starting' || s.phase === 'Running') r.running++
  }
  for (const i of idle) {
    const r = row(i.namespace, i.model)
    r.requests = i.requests
    r.lastForegroundAt = i.lastForegroundAt
  }
  for (const [key, r] of rows) {
    const m = metrics?.get(key)
    if (m) {
      r.usefulSeconds = m.usefulSeconds
      r.preemptions = m.preemptions
      r.source = 'metrics'
    }
    const sample = samples.get(key)
    if (!sample) continue
    const first = sample.entries[0]
    const last = sample.entries.at(-1)
    const seconds = (sample.to - sample.from) / 1000
    r.ratePerS = first && last && seconds > 0 ? Math.max(0, last.requests - first.requests) / seconds : 0
    const times = sample.entries.map((e) => isoMs(e.lastForegroundAt)).filter(Number.isFinite)
    const before = times.filter((t) => t < sample.from).at(-1)
    r.idleRatio = idleShare(times, sample.from, sample.to, idleFor.get(key) ?? 0, before)
  }
  return [...rows.values()].sort((a, b) => `${a.namespace}/${a.model}`.localeCompare(`${b.namespace}/${b.model}`))
}

export function renderTop(rows: TopRow[], now: number): string {
  if (!rows.length) return 'No models with ModelBackfills found.'
  return table(
    [
      'NAMESPACE',
      'MODEL',
      'BACKFILLS',
      'RUNNING',
      'FG REQ/S',
      'IDLE RATIO',
      'LAST FG REQUEST',
      'USEFUL',
      'PREEMPTIONS',
    ],
    rows.map((r) => [
      r.namespace,
      r.model,
      String(r.backfills),
      String(r.running),
      r.ratePerS === null ? '-' : r.ratePerS.toFixed(2),
      r.idleRatio === null ? '-' : `${Math.round(r.idleRatio * 100)}%`,
      r.lastForegroundAt ? relative(isoMs(r.lastForegroundAt), now) : 'never',
      human(r.usefulSeconds * 1000),
      String(r.preemptions),
    ]),
  )
}
