// Request traces for the replay: the documented CSV format, a seeded synthetic generator (bursty, diurnal), and the
// theoretical harvest a perfect scheduler would get from a trace. Pure.
//
// CSV: a header row, then one request per row. Columns (case-insensitive, any order, others ignored):
//   timestamp  (also `time` or `ts`) — ISO 8601 (2026-01-01T12:00:00.250Z), or a number: seconds (epoch or
//              relative), or epoch milliseconds when larger than 1e11. Required.
//   model      optional. A Kubernetes object name (lower-case DNS subdomain); other values are mapped to a valid
//              name. Without the column (or with an empty cell), models are assigned deterministically: a seeded
//              random choice among `--models` models (model-0 … model-N-1), the same for the same trace and seed.
// Rows whose timestamp cannot be read are skipped and counted. Times are relative to the first request.
import { createHash } from 'node:crypto'
import { isObjectName } from '../../pkg/core/names.js'
import { rng as mulberry32 } from '../chaos/config.js'

export interface TraceRequest {
  /** ms since the trace's first request. */
  at: number
  model: string
}

export interface Trace {
  requests: TraceRequest[]
  models: string[]
  /** From the first to the last request. */
  durationMs: number
  skipped: number
  /** Absolute time of the first request, when the trace had absolute times. */
  startedAt?: string
}

/** Rows read at most: a bounded replay whatever file is given. */
export const MAX_ROWS = 1_000_000

/** The chaos harness's seeded mulberry32 with what a trace needs: assigning models and shaping a synthetic trace. */
export function rng(seed: number) {
  const { next } = mulberry32(seed)
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    /** Exponentially distributed with this mean. */
    exp: (mean: number) => -Math.log(1 - next()) * mean,
  }
}

/** One CSV line's cells (double-quoted cells may contain commas and "" for a quote). */
export function csvCells(line: string): string[] {
  const cells: string[] = []
  let cell = ''
  let quoted = false
  for (let i = 0; i < line.length; i++) {
    const c = line[i]
    if (quoted) {
      if (c === '"' && line[i + 1] === '"') {
        cell += '"'
        i++
      } else if (c === '"') quoted = false
      else cell += c
    } else if (c === '"') quoted = true
    else if (c === ',') {
      cells.push(cell.trim())
      cell = ''
    } else cell += c
  }
  cells.push(cell.trim())
  return cells
}

/** A timestamp cell in ms (absolute or relative), or NaN. */
export function parseTimestamp(cell: string): number {
  const text = cell.trim()
  if (text === '') return Number.NaN
  if (/^[+-]?\d+(\.\d+)?$/.test(text)) {
    const n = Number(text)
    return n > 1e11 ? n : n * 1000
  }
  return Date.parse(text)
}

/** A model cell as a valid object name: kept when valid, else lower-cased and cleaned, else `m-<hash>`. */
export function modelName(cell: string): string {
  if (isObjectName(cell as unknown)) return cell
  const cleaned = cell
    .toLowerCase()
    .replace(/[^a-z0-9.-]+/g, '-')
    .replace(/^[^a-z0-9]+|[^a-z0-9]+$/g, '')
    .slice(0, 63)
  if (cleaned && isObjectName(cleaned as unknown)) return cleaned
  return `m-${createHash('sha256').update(cell).digest('hex').slice(0, 8)}`
}

export function parseTrace(text: string, opts: { models?: number; seed?: number } = {}): Trace {
  const lines = text.split(/\r?\n/)
  const header = csvCells(lines[0] ?? '').map((h) => h.toLowerCase())
  const tsCol = header.findIndex((h) => h === 'timestamp' || h === 'time' || h === 'ts')
  if (tsCol < 0) throw new Error(`the trace has no timestamp column (header: ${lines[0]?.slice(0, 200) ?? ''})`)
  const modelCol = header.indexOf('model')
  const count = Math.max(1, Math.min(opts.models ?? 3, 1000))
  const random = rng(opts.seed ?? 1)
  const rows: { t: number; model: string }[] = []
  let skipped = 0
  for (let i = 1; i < lines.length && rows.length < MAX_ROWS; i++) {
    const line = lines[i] as string
    if (line.trim() === '') continue
    const cells = csvCells(line.slice(0, 4096))
    const t = parseTimestamp(cells[tsCol] ?? '')
    if (!Number.isFinite(t)) {
      skipped++
      continue
    }
    // Drawn for every row (with or without a model cell), so one row's cell never shifts another row's model.
    const assigned = `model-${random.int(count)}`
    const cell = modelCol >= 0 ? (cells[modelCol] ?? '') : ''
    rows.push({ t, model: cell ? modelName(cell) : assigned })
  }
  rows.sort((a, b) => a.t - b.t)
  const first = rows[0]?.t ?? 0
  const requests = rows.map((r) => ({ at: r.t - first, model: r.model }))
  return {
    requests,
    models: [...new Set(requests.map((r) => r.model))].sort(),
    durationMs: requests.at(-1)?.at ?? 0,
    skipped,
    startedAt: first > 1e11 ? new Date(first).toISOString() : undefined,
  }
}

export interface GenerateOptions {
  seed: number
  durationMs: number
  models: number
  /** Length of a "day" for the diurnal shape (compress it to see several in a short trace). */
  dayMs: number
  /** Mean quiet time between bursts at the busiest hour (night-time ones are longer); default dayMs / 72. */
  quietMeanMs?: number
  /** Mean burst length (default dayMs / 288) and mean gap between requests inside a burst (default 10 s). */
  burstMeanMs?: number
  requestGapMeanMs: number
  /** Time of the first row. */
  start?: string
  maxRequests?: number
}

export const GENERATE_DEFAULTS: GenerateOptions = {
  seed: 1,
  durationMs: 24 * 3_600_000,
  models: 3,
  dayMs: 24 * 3_600_000,
  requestGapMeanMs: 10_000,
  start: '2026-01-01T00:00:00.000Z',
  maxRequests: 200_000,
}

/**
 * A bursty, diurnal trace: per model, quiet periods alternate with bursts of requests. Quiet periods are longest at
 * night (the day's activity 0.5·(1 − cos 2πt/day) divides their mean), so the harvestable idle time follows the
 * day. Same options, same trace.
 */
export function generateTrace(o: Partial<GenerateOptions> = {}): string {
  const opts = { ...GENERATE_DEFAULTS, ...o }
  const random = rng(opts.seed)
  const start = Date.parse(opts.start ?? (GENERATE_DEFAULTS.start as string))
  const rows: { t: number; model: string }[] = []
  const limit = opts.maxRequests ?? 200_000
  const activity = (t: number) => 0.5 * (1 - Math.cos((2 * Math.PI * t) / opts.dayMs))
  // A day compressed to an hour keeps the shape of a real one: quiet periods and bursts scale with it.
  const quietMean = opts.quietMeanMs ?? opts.dayMs / 72
  const burstMean = opts.burstMeanMs ?? opts.dayMs / 288
  for (let m = 0; m < opts.models && rows.length < limit; m++) {
    const model = `model-${m}`
    let t = random.next() * quietMean
    while (t < opts.durationMs && rows.length < limit) {
      const burstEnd = t + random.exp(burstMean)
      while (t < Math.min(burstEnd, opts.durationMs) && rows.length < limit) {
        rows.push({ t, model })
        t += random.exp(opts.requestGapMeanMs)
      }
      t += random.exp(quietMean / (0.15 + activity(t)))
    }
  }
  rows.sort((a, b) => a.t - b.t)
  return `timestamp,model\n${rows.map((r) => `${new Date(start + Math.round(r.t)).toISOString()},${r.model}`).join('\n')}\n`
}

/**
 * The stretches a perfect scheduler could harvest: every quiet stretch beyond idleFor, from `from` (the backfills'
 * creation: their first window starts there) to `to`. `times` are request times (ms), any order.
 */
export function idleIntervals(times: number[], from: number, to: number, idleForMs: number): [number, number][] {
  const sorted = times.filter((t) => t >= from && t <= to).sort((a, b) => a - b)
  const out: [number, number][] = []
  let last = from
  for (const t of [...sorted, to]) {
    if (t - last > idleForMs) out.push([last + idleForMs, t])
    last = t
  }
  return out
}

/** The total of idleIntervals: what a perfect scheduler would harvest. */
export function harvestable(times: number[], from: number, to: number, idleForMs: number): number {
  return idleIntervals(times, from, to, idleForMs).reduce((sum, [a, b]) => sum + (b - a), 0)
}
