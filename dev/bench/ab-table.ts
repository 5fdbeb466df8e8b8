// The pure half of `npm run bench:ab` (dev/bench/ab.ts): its arguments, the figures each phase reports, and the table —
// each figure's median over the rounds for both trees and their ratio. No I/O here: test/unit/bench-ab.test.ts.

/** The hot-path phases, in the order a run measures them. */
export const AB_PHASES = ['lateness', 'preemption', 'burst', 'ingest', 'cold'] as const
export type AbPhase = (typeof AB_PHASES)[number]

/** The figures of dev/bench/run.ts's JSON each phase prints (cold start's are per function: see `figuresOf`). */
export const PHASE_FIGURES: Record<Exclude<AbPhase, 'cold'>, string[]> = {
  // With the admission's own steps (admit's profile lines): where a change to admission shows first.
  lateness: [
    'admission_lateness_ms_p50',
    'admission_lateness_ms_p99',
    'admission_step_ms_claims_p50',
    'admission_step_ms_claims_p99',
    'admission_step_ms_slotMs_p50',
    'admission_step_ms_slotMs_p99',
  ],
  preemption: [
    'preemption_job_ms_p50',
    'preemption_job_ms_p99',
    'preemption_pod_ms_p50',
    'preemption_pod_ms_p99',
    'apiserver_writes_per_fg_request_nats_path',
  ],
  burst: ['burst_preemption_job_ms_p99', 'burst_preemption_pod_ms_p50', 'burst_preemption_pod_ms_p99'],
  ingest: ['ingest_events_per_s'],
}
/** Cold start's figures, one of each per function (dev/bench/cold-start-run.ts). */
const COLD_PREFIXES = ['cold_start_ms_', 'cold_start_cpu_ms_', 'rss_mb_']

export interface AbArgs {
  ref: string
  phases: AbPhase[]
  rounds: number
  quick: boolean
}

/** A bad command line: its message says what was wrong and what is accepted. */
export class AbUsageError extends Error {}

export const AB_USAGE =
  'usage: npm run bench:ab -- <git ref> [phases, comma-separated: lateness,preemption,burst,ingest,cold] [--rounds N] [--quick]'
const MAX_ROUNDS = 20

/** `<ref> [phases] [--rounds N] [--quick]`; every phase when none is named; 3 rounds (1 with --quick). */
export function parseAbArgs(argv: readonly string[]): AbArgs {
  let quick = false
  let rounds: number | undefined
  const positional: string[] = []
  let optionsEnded = false
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string
    if (optionsEnded) positional.push(arg)
    else if (arg === '--') optionsEnded = true
    else if (arg === '--quick') quick = true
    else if (arg === '--rounds' || arg.startsWith('--rounds=')) {
      const raw = arg === '--rounds' ? argv[++i] : arg.slice('--rounds='.length)
      const n = Number(raw)
      if (!Number.isInteger(n) || n < 1 || n > MAX_ROUNDS) {
        throw new AbUsageError(`--rounds must be a whole number from 1 to ${MAX_ROUNDS}, not ${JSON.stringify(raw)}`)
      }
      rounds = n
    } else if (arg.startsWith('-')) throw new AbUsageError(`unknown option ${JSON.stringify(arg)}; ${AB_USAGE}`)
    else positional.push(arg)
  }
  if (positional.length === 0) throw new AbUsageError(`no git ref to compare with; ${AB_USAGE}`)
  if (positional.length > 2) {
    throw new AbUsageError(`too many arguments: ${positional.slice(2).map((a) => JSON.stringify(a))}; ${AB_USAGE}`)
  }
  const [ref, phaseList] = positional as [string, string | undefined]
  // A ref is handed to git as an argument: one that starts like an option or holds a control character is refused
  // here, before git sees it.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
  if (ref.startsWith('-') || /[\u0000-\u001f\u007f]/.test(ref)) {
    throw new AbUsageError(`not a git ref: ${JSON.stringify(ref)}`)
  }
  const phases: AbPhase[] = []
  for (const p of phaseList ? phaseList.split(',') : AB_PHASES) {
    if (!(AB_PHASES as readonly string[]).includes(p)) {
      throw new AbUsageError(`unknown phase ${JSON.stringify(p)}; phases: ${AB_PHASES.join(', ')}`)
    }
    if (!phases.includes(p as AbPhase)) phases.push(p as AbPhase)
  }
  return { ref, phases, rounds: rounds ?? (quick ? 1 : 3), quick }
}

/**
 * What dev/bench/run.ts must run for these phases, through its BENCH_ONLY switch (undefined: nothing, cold start only).
 * lateness and preemption alone have switches every earlier bench knows; the burst and the ingest need `hot`.
 */
export function benchOnlyFor(phases: readonly AbPhase[]): { BENCH_ONLY: string; BENCH_KNATIVE?: string } | undefined {
  const run = phases.filter((p) => p !== 'cold')
  if (run.length === 0) return undefined
  if (run.every((p) => p === 'lateness')) return { BENCH_ONLY: 'lateness' }
  if (run.every((p) => p === 'lateness' || p === 'preemption')) {
    return { BENCH_ONLY: 'preemption', BENCH_KNATIVE: 'none' }
  }
  return { BENCH_ONLY: 'hot' }
}

/** The figures to print for these phases, given every result seen (cold start's keys depend on the functions). */
export function figuresOf(phases: readonly AbPhase[], results: readonly Record<string, unknown>[]): string[] {
  const figures: string[] = []
  for (const phase of phases) {
    if (phase !== 'cold') {
      figures.push(...PHASE_FIGURES[phase])
      continue
    }
    const keys = new Set<string>()
    for (const r of results) for (const k of Object.keys(r)) if (COLD_PREFIXES.some((p) => k.startsWith(p))) keys.add(k)
    const fns = [...new Set([...keys].map((k) => k.slice(COLD_PREFIXES.find((p) => k.startsWith(p))?.length)))]
    for (const fn of fns.sort()) for (const p of COLD_PREFIXES) if (keys.has(p + fn)) figures.push(p + fn)
  }
  return figures
}

/** The middle value (the mean of the two middle ones for an even count); undefined for none. */
export function median(values: readonly number[]): number | undefined {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b)
  if (sorted.length === 0) return undefined
  const mid = sorted.length >> 1
  return sorted.length % 2 ? sorted[mid] : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

/**
 * A figure as a run printed it: a number; an array (dev/bench/cold-start-run.ts's runs) by its median; anything else —
 * missing (a ref whose bench lacks the phase), NaN, text — undefined.
 */
export function figureValue(result: Record<string, unknown> | undefined, key: string): number | undefined {
  const v = result?.[key]
  if (typeof v === 'number') return Number.isFinite(v) ? v : undefined
  if (Array.isArray(v)) return median(v.filter((x): x is number => typeof x === 'number'))
  return undefined
}

export interface AbRow {
  figure: string
  /** Median over the rounds that printed it; undefined when none did. */
  a?: number
  b?: number
  /** b / a; undefined when either is missing or a is 0. */
  ratio?: number
}

/** One row per figure: each side's median over its rounds and B/A. */
export function abRows(
  figures: readonly string[],
  a: readonly Record<string, unknown>[],
  b: readonly Record<string, unknown>[],
): AbRow[] {
  const side = (rounds: readonly Record<string, unknown>[], key: string) =>
    median(rounds.flatMap((r) => figureValue(r, key) ?? []))
  return figures.map((figure) => {
    const av = side(a, figure)
    const bv = side(b, figure)
    const ratio = av !== undefined && bv !== undefined && av !== 0 ? Math.round((bv / av) * 100) / 100 : undefined
    return { figure, a: av, b: bv, ratio }
  })
}

const cell = (v: number | undefined) =>
  v === undefined ? '—' : Number.isInteger(v) ? String(v) : String(Math.round(v * 10) / 10)

/** The rows as a Markdown table (paste-able into dev/bench/README.md). */
export function formatAbTable(rows: readonly AbRow[], labelA: string, labelB: string): string {
  const lines = [`| figure | A: ${labelA} | B: ${labelB} | B/A |`, '|---|---|---|---|']
  for (const r of rows) {
    lines.push(`| ${r.figure} | ${cell(r.a)} | ${cell(r.b)} | ${r.ratio === undefined ? '—' : r.ratio.toFixed(2)} |`)
  }
  return lines.join('\n')
}

/** The last line of a bench's stdout that is one JSON object (what dev/bench/run.ts and cold-start-run.ts end with). */
export function lastJsonLine(stdout: string): Record<string, unknown> | undefined {
  const lines = stdout.split('\n')
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = (lines[i] as string).trim()
    if (!line.startsWith('{')) continue
    try {
      const v: unknown = JSON.parse(line)
      if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>
    } catch {
      // not the result: a log line that happens to start with a brace
    }
  }
  return undefined
}

/**
 * `path` as this tree lays it out (`dev/bench/run.ts`), or where a tree from before the `dev/` folder keeps it
 * (`bench/run.ts`) when only that exists there.
 */
export function toolPath(path: string, exists: (path: string) => boolean): string {
  if (exists(path) || !path.startsWith('dev/')) return path
  const old = path.slice('dev/'.length)
  return exists(old) ? old : path
}
