// The useful-work report of a replay, computed only from what the harness saw itself: the requests it published
// (with their PubAck times), the Jobs and pods it watched through the apiserver, and the chaos oracle's idle-window
// verdict. The functions' KV state and metrics are never read. Pure.
import { harvestable } from './trace.js'

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
  if (figure)
    lines.push(
      '',
      `![timeline](${figure})`,
      '',
      'Per model: requests (ticks), the idle time beyond idleFor a perfect scheduler could use, and the Jobs that ran.',
    )
  return `${lines.join('\n')}\n`
}
