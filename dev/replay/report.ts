// The useful-work report of a replay, computed only from what the harness saw itself: the requests it published
// (with their PubAck times), the Jobs and pods it watched through the apiserver, and the chaos oracle's idle-window
// verdict. The functions' KV state and metrics are never read. Pure.
import { compareGoodput, type GoodputComparison, medianWindowMs, type Window, type Workload } from './goodput.js'
import { harvestable, idleIntervals } from './trace.js'

export interface SentRequest {
  model: string
  sentAt: number
  ackAt: number
}

export interface WatchedJob {
  name: string
  model: string
  /** When the watch delivered ADDED. */
  addedAt: number
  /** deletionTimestamp seen, the Job finished, or the Job gone (the first of them). */
  endAt?: number
  /** When the last of its pods was gone (DELETED seen); undefined when it never had one. */
  podsGoneAt?: number
  pods: number
}

export interface Exposure {
  job: string
  model: string
  requestSentAt: string
  /** Request sent → the Job's pods deleted (or the Job deleted, when it had no pod yet). */
  exposureMs: number
  /** Request sent → the Job's deletion seen (cancel's DELETE); the rest of the exposure is the garbage collector's. */
  jobDeletedMs?: number
}

export interface ModelHarvest {
  model: string
  requests: number
  jobs: number
  harvestedMs: number
  theoreticalMs: number
  fraction: number | null
}

export interface ReplayReport {
  from: string
  to: string
  idleForMs: number
  requests: number
  jobs: number
  /** Jobs created while a request for their model was inside the idle window before them (must be 0). */
  admissionsInsideWindow: number
  insideWindow: Record<string, unknown>[]
  exposure: { count: number; p50Ms: number | null; p99Ms: number | null; maxMs: number | null; items: Exposure[] }
  /** Request → the Job's deletion seen, for the same preemptions: the system's part of the exposure. */
  jobDeleted: { p50Ms: number | null; p99Ms: number | null; maxMs: number | null }
  /** Jobs a request should have cancelled that were still live at the end. */
  unresolved: { job: string; model: string; requestSentAt: string }[]
  harvest: { models: ModelHarvest[]; harvestedMs: number; theoreticalMs: number; fraction: number | null }
  /** The workload modelled as items, resumable against restart-from-scratch; absent when no workload was given. */
  goodput?: GoodputSection
}

/** Goodput in trace time (wall times × speed), so the item duration reads as it was set. */
export interface GoodputSection {
  speed: number
  workload: Required<Workload>
  runMs: number
  /** Median of the harvestable windows (idle beyond idleFor), trace time. */
  medianIdleWindowMs: number | null
  /** Idle time beyond idleFor, trace time: what the ratios are taken against. */
  harvestableMs: number
  /** Over the Jobs that ran: each Job's lifetime is one attempt's window, ended by a preemption unless live at the end. */
  jobs: GoodputComparison
  /** Over a perfect scheduler's windows (every harvestable stretch, preempted by the request that ends it). */
  ideal: GoodputComparison
  models: { model: string; jobs: GoodputComparison }[]
}

/** The Jobs of one model as attempt windows, clipped to the replay. */
export function jobWindows(jobs: WatchedJob[], from: number, to: number): Window[] {
  return jobs
    .map((j) => ({
      start: Math.max(j.addedAt, from),
      end: Math.min(j.endAt ?? to, to),
      // In a replay a Job ends only when a request cancels it (its template never finishes, maxRunDuration is 24h).
      preempted: j.endAt !== undefined && j.endAt <= to,
    }))
    .filter((w) => w.end > w.start)
}

/** Windows in trace time: ms since `from`, times `speed`. */
const toTrace = (windows: Window[], from: number, speed: number): Window[] =>
  windows.map((w) => ({ start: (w.start - from) * speed, end: (w.end - from) * speed, preempted: w.preempted }))

export function goodputSection(input: {
  requests: SentRequest[]
  jobs: WatchedJob[]
  models: string[]
  from: number
  to: number
  idleForMs: number
  speed: number
  /** In trace time. */
  workload: Workload
}): GoodputSection {
  const { from, to, speed } = input
  const perModel = input.models.map((model) => {
    const times = input.requests.filter((r) => r.model === model).map((r) => r.sentAt)
    const jobs = toTrace(
      jobWindows(
        input.jobs.filter((j) => j.model === model),
        from,
        to,
      ),
      from,
      speed,
    )
    const ideal = toTrace(
      idleIntervals(times, from, to, input.idleForMs).map(([start, end]) => ({ start, end, preempted: end < to })),
      from,
      speed,
    )
    return { model, jobs, ideal }
  })
  const allIdeal = perModel.flatMap((m) => m.ideal)
  const jobs = compareGoodput(
    perModel.flatMap((m) => m.jobs),
    input.workload,
  )
  return {
    speed,
    workload: jobs.workload,
    runMs: jobs.workload.itemMs * jobs.workload.itemsPerRun,
    medianIdleWindowMs: medianWindowMs(allIdeal),
    harvestableMs: allIdeal.reduce((s, w) => s + (w.end - w.start), 0),
    jobs,
    ideal: compareGoodput(allIdeal, input.workload),
    models: perModel.map((m) => ({ model: m.model, jobs: compareGoodput(m.jobs, input.workload) })),
  }
}

/** Nearest-rank percentile of sorted values. */
export function percentile(sorted: number[], p: number): number | null {
  if (!sorted.length) return null
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)))
  return sorted[rank - 1] as number
}

export function computeReport(input: {
  requests: SentRequest[]
  jobs: WatchedJob[]
  models: string[]
  insideWindow: Record<string, unknown>[]
  from: number
  to: number
  idleForMs: number
  /** The workload as items (trace time) and the replay's speed: adds the goodput section. */
  goodput?: { workload: Workload; speed: number }
}): ReplayReport {
  const { requests, jobs, from, to, idleForMs } = input
  const byModel = new Map<string, number[]>()
  for (const r of requests) byModel.set(r.model, [...(byModel.get(r.model) ?? []), r.sentAt])
  for (const list of byModel.values()) list.sort((a, b) => a - b)

  const exposures: Exposure[] = []
  const unresolved: ReplayReport['unresolved'] = []
  for (const j of jobs) {
    const end = j.endAt ?? Number.POSITIVE_INFINITY
    // The first request sent while the Job was live: the one that must cancel it.
    const first = (byModel.get(j.model) ?? []).find((t) => t > j.addedAt && t < end)
    if (first === undefined) continue
    const gone = j.podsGoneAt ?? j.endAt
    if (gone === undefined) {
      unresolved.push({ job: j.name, model: j.model, requestSentAt: new Date(first).toISOString() })
      continue
    }
    exposures.push({
      job: j.name,
      model: j.model,
      requestSentAt: new Date(first).toISOString(),
      exposureMs: Math.max(0, gone - first),
      jobDeletedMs: j.endAt === undefined ? undefined : Math.max(0, j.endAt - first),
    })
  }
  const sorted = exposures.map((e) => e.exposureMs).sort((a, b) => a - b)
  const deleted = exposures
    .map((e) => e.jobDeletedMs)
    .filter((v): v is number => v !== undefined)
    .sort((a, b) => a - b)

  const models: ModelHarvest[] = input.models.map((model) => {
    const own = jobs.filter((j) => j.model === model)
    const harvestedMs = own.reduce((sum, j) => {
      const start = Math.max(j.addedAt, from)
      const end = Math.min(j.endAt ?? to, to)
      return sum + Math.max(0, end - start)
    }, 0)
    const theoreticalMs = harvestable(byModel.get(model) ?? [], from, to, idleForMs)
    return {
      model,
      requests: byModel.get(model)?.length ?? 0,
      jobs: own.length,
      harvestedMs,
      theoreticalMs,
      fraction: theoreticalMs > 0 ? harvestedMs / theoreticalMs : null,
    }
  })
  const harvestedMs = models.reduce((s, m) => s + m.harvestedMs, 0)
  const theoreticalMs = models.reduce((s, m) => s + m.theoreticalMs, 0)
  return {
    from: new Date(from).toISOString(),
    to: new Date(to).toISOString(),
    idleForMs,
    requests: requests.length,
    jobs: jobs.length,
    admissionsInsideWindow: input.insideWindow.length,
    insideWindow: input.insideWindow,
    exposure: {
      count: sorted.length,
      p50Ms: percentile(sorted, 50),
      p99Ms: percentile(sorted, 99),
      maxMs: sorted.at(-1) ?? null,
      items: exposures,
    },
    jobDeleted: { p50Ms: percentile(deleted, 50), p99Ms: percentile(deleted, 99), maxMs: deleted.at(-1) ?? null },
    unresolved,
    harvest: { models, harvestedMs, theoreticalMs, fraction: theoreticalMs > 0 ? harvestedMs / theoreticalMs : null },
    goodput: input.goodput
      ? goodputSection({ ...input, workload: input.goodput.workload, speed: input.goodput.speed })
      : undefined,
  }
}

const pct = (f: number | null) => (f === null ? '-' : `${(f * 100).toFixed(1)}%`)
const sec = (ms: number) => `${(ms / 1000).toFixed(1)} s`
const msText = (ms: number | null) => (ms === null ? '-' : `${Math.round(ms)} ms`)

/** The report as Markdown (what `npm run replay` writes next to the JSON and the figure). */
export function renderReport(r: ReplayReport, header: Record<string, string>, figure?: string): string {
  const lines = [
    '# Replay: useful work from a request trace',
    '',
    ...Object.entries(header).map(([k, v]) => `- ${k}: ${v}`),
    `- replayed ${r.from} → ${r.to}; idleFor ${sec(r.idleForMs)} (wall clock)`,
    '',
    "## Foreground first (judged from the harness's own watch and publish log)",
    '',
    `- Jobs admitted inside an idle window: **${r.admissionsInsideWindow}** (must be 0)`,
    `- Exposure, foreground request → the Job's pods deleted: p50 ${msText(r.exposure.p50Ms)}, p99 ${msText(r.exposure.p99Ms)}, max ${msText(r.exposure.maxMs)} over ${r.exposure.count} preemptions`,
    `- of which request → the Job's deletion (cancel's DELETE) : p50 ${msText(r.jobDeleted.p50Ms)}, p99 ${msText(r.jobDeleted.p99Ms)}, max ${msText(r.jobDeleted.maxMs)}; the rest is the garbage collector deleting the pods`,
    `- Jobs a request should have cancelled, still live at the end: ${r.unresolved.length}`,
    '',
    '## Harvest',
    '',
    `Harvested ${sec(r.harvest.harvestedMs)} of ${sec(r.harvest.theoreticalMs)} theoretically idle beyond idleFor: **${pct(r.harvest.fraction)}** (${r.jobs} Jobs, ${r.requests} requests).`,
    '',
    '| model | requests | Jobs | harvested | idle beyond idleFor | fraction |',
    '|---|---:|---:|---:|---:|---:|',
    ...r.harvest.models.map(
      (m) =>
        `| ${m.model} | ${m.requests} | ${m.jobs} | ${sec(m.harvestedMs)} | ${sec(m.theoreticalMs)} | ${pct(m.fraction)} |`,
    ),
  ]
  if (r.goodput) lines.push('', ...renderGoodput(r.goodput))
  if (figure)
    lines.push(
      '',
      `![timeline](${figure})`,
      '',
      'Per model: requests (ticks), the idle time beyond idleFor a perfect scheduler could use, and the Jobs that ran' +
        (r.goodput
          ? '; then each Job under both semantics: the item-seconds kept, thrown away by its preemption, or open at the end.'
          : '.'),
    )
  return `${lines.join('\n')}\n`
}

/** A duration of trace time, in the unit that reads best. */
export function traceDuration(ms: number): string {
  if (ms >= 3_600_000) return `${(ms / 3_600_000).toFixed(2)} h`
  if (ms >= 60_000) return `${(ms / 60_000).toFixed(1)} min`
  return `${(ms / 1000).toFixed(1)} s`
}

/** How many times more runs resumable completed (null when restart completed none). */
export function runsRatio(c: GoodputComparison): number | null {
  return c.restart.runs > 0 ? c.resumable.runs / c.restart.runs : null
}

/** Kept item-seconds against the harvestable idle time (null without any). */
export const keptRatio = (keptMs: number, harvestableMs: number) => (harvestableMs > 0 ? keptMs / harvestableMs : null)

function sideBySide(c: GoodputComparison, harvestableMs: number): string[] {
  const cell = (ms: number) => `${traceDuration(ms)} (${pct(keptRatio(ms, harvestableMs))})`
  const row = (what: string, f: (g: GoodputComparison['resumable']) => string) =>
    `| ${what} | ${f(c.resumable)} | ${f(c.restart)} |`
  const ratio = runsRatio(c)
  return [
    '| | resumable (this project) | restart from scratch (FlexInfer) |',
    '|---|---:|---:|',
    row('whole runs completed', (g) => String(g.runs)),
    row('items completed', (g) => String(g.items)),
    row('item-seconds kept (of the harvestable)', (g) => cell(g.keptMs)),
    row('item-seconds thrown away by preemptions', (g) => cell(g.thrownMs)),
    row('open at the end (running, not yet kept)', (g) => cell(g.openMs)),
    row('attempt starts', (g) => cell(g.overheadMs)),
    row('windows given (their total)', (g) => cell(g.windowMs)),
    '',
    `${c.windows} windows, ${c.preemptions} preemptions. Resumable completes ` +
      (ratio === null ? `${c.resumable.runs} runs, restart none.` : `**${ratio.toFixed(2)}×** the runs.`),
  ]
}

function renderGoodput(g: GoodputSection): string[] {
  const w = g.workload
  const longer = g.medianIdleWindowMs === null ? '' : g.runMs > g.medianIdleWindowMs ? ' (longer)' : ' (not longer)'
  return [
    '## Goodput: resumable against restart-from-scratch',
    '',
    `The workload as items, in trace time: runs of ${w.itemsPerRun} items of ${traceDuration(w.itemMs)} (a run is ` +
      `${traceDuration(g.runMs)}${longer} against a median harvestable window of ${g.medianIdleWindowMs === null ? '-' : traceDuration(g.medianIdleWindowMs)}` +
      `), each attempt spending ${traceDuration(w.attemptStartMs)} before its first item, runs back to back. ` +
      'An item in flight when the preemption comes is thrown away under both. Percentages are of the harvestable ' +
      `idle time (beyond idleFor): ${traceDuration(g.harvestableMs)}.`,
    '',
    '### Over the Jobs that ran',
    '',
    ...sideBySide(g.jobs, g.harvestableMs),
    '',
    '| model | Jobs | runs resumable | runs restart | kept resumable | kept restart |',
    '|---|---:|---:|---:|---:|---:|',
    ...g.models.map(
      (m) =>
        `| ${m.model} | ${m.jobs.windows} | ${m.jobs.resumable.runs} | ${m.jobs.restart.runs} | ${traceDuration(m.jobs.resumable.keptMs)} | ${traceDuration(m.jobs.restart.keptMs)} |`,
    ),
    '',
    "### Over a perfect scheduler's windows (every stretch beyond idleFor, the same trace)",
    '',
    ...sideBySide(g.ideal, g.harvestableMs),
  ]
}
