// The report's figure: one PNG timeline with three lanes per model — the foreground requests, the idle time beyond
// idleFor a perfect scheduler could use, and the Jobs that actually ran — and, given a workload, two more: each Job
// under resumable and under restart-from-scratch semantics, split into the item time kept and the time thrown away
// by its preemption (or open at the end). Rendered vega-lite → vega SVG → resvg PNG (no browser, no canvas).
import { Resvg } from '@resvg/resvg-js'
import * as vega from 'vega'
import * as vl from 'vega-lite'
import { keptUntil, type Workload } from './goodput.js'
import { jobWindows, type SentRequest, type WatchedJob } from './report.js'
import { idleIntervals } from './trace.js'

/** Marks drawn at most: a long trace is summarised by its first requests rather than a figure no one can open. */
export const MAX_MARKS = 20_000

export interface TimelineInput {
  models: string[]
  requests: SentRequest[]
  jobs: WatchedJob[]
  from: number
  to: number
  idleForMs: number
  title: string
  /** In the figure's time (wall clock): adds the two goodput lanes per model. */
  workload?: Workload
}

const KINDS = ['request', 'harvestable', 'job', 'kept', 'thrown away', 'open at the end']
const COLORS = ['#d62728', '#98df8a', '#1f77b4', '#2ca02c', '#ff7f0e', '#c7c7c7']

export function timelineSpec(input: TimelineInput): vl.TopLevelSpec {
  const s = (t: number) => (t - input.from) / 1000
  const rows: { lane: string; kind: string; start: number; end: number }[] = []
  const lanes: string[] = []
  for (const model of input.models) {
    lanes.push(`${model} requests`, `${model} idle beyond idleFor`, `${model} Jobs`)
    if (input.workload) lanes.push(`${model} resumable`, `${model} restart from scratch`)
    const times = input.requests.filter((r) => r.model === model).map((r) => r.sentAt)
    for (const t of times) rows.push({ lane: `${model} requests`, kind: 'request', start: s(t), end: s(t) })
    for (const [a, b] of idleIntervals(times, input.from, input.to, input.idleForMs)) {
      rows.push({ lane: `${model} idle beyond idleFor`, kind: 'harvestable', start: s(a), end: s(b) })
    }
    for (const j of input.jobs.filter((x) => x.model === model)) {
      const end = Math.min(j.endAt ?? input.to, input.to)
      rows.push({ lane: `${model} Jobs`, kind: 'job', start: s(Math.max(j.addedAt, input.from)), end: s(end) })
    }
    if (!input.workload) continue
    for (const w of jobWindows(
      input.jobs.filter((x) => x.model === model),
      input.from,
      input.to,
    )) {
      const k = keptUntil(w, input.workload)
      const rest = w.preempted ? 'thrown away' : 'open at the end'
      for (const [lane, until] of [
        [`${model} resumable`, k.resumable],
        [`${model} restart from scratch`, k.restart],
      ] as const) {
        if (until > k.workFrom) rows.push({ lane, kind: 'kept', start: s(k.workFrom), end: s(until) })
        if (w.end > until) rows.push({ lane, kind: rest, start: s(until), end: s(w.end) })
      }
    }
  }
  const values = rows.slice(0, MAX_MARKS)
  const x = { field: 'start', type: 'quantitative' as const, title: 'seconds since the replay started' }
  const y = { field: 'lane', type: 'nominal' as const, sort: lanes, title: null, axis: { labelLimit: 400 } }
  const color = {
    field: 'kind',
    type: 'nominal' as const,
    scale: { domain: KINDS, range: COLORS },
    legend: { title: null, orient: 'bottom' as const },
  }
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: input.title,
    width: 900,
    height: { step: 22 },
    background: 'white',
    data: { values },
    layer: [
      {
        transform: [{ filter: "datum.kind !== 'request'" }],
        mark: { type: 'bar', height: 14 },
        encoding: { x, x2: { field: 'end' }, y, color },
      },
      {
        transform: [{ filter: "datum.kind === 'request'" }],
        mark: { type: 'tick', thickness: 1, size: 14 },
        encoding: { x, y, color },
      },
    ],
  } as vl.TopLevelSpec
}

export async function renderPng(spec: vl.TopLevelSpec): Promise<Buffer> {
  const view = new vega.View(vega.parse(vl.compile(spec).spec), { renderer: 'none' })
  try {
    const svg = await view.toSVG()
    return new Resvg(svg, { font: { loadSystemFonts: true }, background: 'white' }).render().asPng()
  } finally {
    view.finalize()
  }
}
