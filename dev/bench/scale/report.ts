// The scale curve's report: the `scale_<n>_*` keys of one run as a markdown table and a PNG plot (vega-lite →
// vega View toSVG → resvg). Pure but for the rendering; test/unit/bench-scale-report.test.ts covers it.
import { Resvg } from '@resvg/resvg-js'
import * as vega from 'vega'
import { compile, type TopLevelSpec } from 'vega-lite'

export type Results = Record<string, number | string | boolean>

/** The functions measured, each in a process of its own (dev/chaos/fleet.ts; `watcher` is the ApiServerSource stand-in). */
export const SCALE_FUNCTIONS = ['demand', 'cancel', 'admit', 'lifecycle', 'source', 'watcher'] as const

/** The sizes a run measured, smallest first (from its `scale_<n>_backfills` keys). */
export function sizesOf(results: Results): number[] {
  return Object.keys(results)
    .flatMap((k) => {
      const m = /^scale_(\d+)_backfills$/.exec(k)
      return m ? [Number(m[1])] : []
    })
    .sort((a, b) => a - b)
}

/** Rows of the table: [label, key suffix, unit]. */
const ROWS: [string, string][] = [
  ['backfills (ModelBackfills in the apiserver)', 'backfills'],
  ['time to create them and settle (s)', 'create_settle_s'],
  ...SCALE_FUNCTIONS.map((fn): [string, string] => [`CPU at rest, ${fn} (% of one core)`, `cpu_pct_${fn}`]),
  ...SCALE_FUNCTIONS.map((fn): [string, string] => [`RSS at rest, ${fn} (MB)`, `rss_mb_${fn}`]),
  ['apiserver requests/s at rest (all clients)', 'apiserver_rps_at_rest'],
  ['… by verb (requests in the window)', 'apiserver_at_rest_by_verb'],
  ['KV backfill states: messages / bytes', 'kv_backfills'],
  ['timer stream: messages / bytes', 'stream_timers'],
  ['resync sweep: p50 / max (ms), sweeps seen', 'sweep'],
  ['admission lateness p50 / p99 (ms), windows admitted', 'admission'],
  ['preemption, trickle: pods p50 / p99 (ms), samples', 'trickle'],
  ['preemption, all-models burst: pods p50 / p99 (ms), attempts', 'burst'],
  ['… the burst: Job DELETEs p50 / p99 (ms)', 'burst_job'],
  ['load average (1 min): at rest / windows / burst', 'load'],
]

// Not measured: absent, or NaN (null once written to JSON).
const fmt = (v: unknown) =>
  v === undefined || v === null || v === '' || (typeof v === 'number' && !Number.isFinite(v))
    ? '—'
    : typeof v === 'number'
      ? v.toLocaleString('en-US')
      : String(v)

function cell(results: Results, n: number, suffix: string): string {
  const k = (s: string) => results[`scale_${n}_${s}`]
  switch (suffix) {
    case 'kv_backfills':
      return `${fmt(k('kv_backfills_messages'))} / ${fmt(k('kv_backfills_bytes'))}`
    case 'stream_timers':
      return `${fmt(k('stream_timers_messages'))} / ${fmt(k('stream_timers_bytes'))}`
    case 'sweep':
      return `${fmt(k('sweep_ms_p50'))} / ${fmt(k('sweep_ms_max'))}, ${fmt(k('sweeps'))}`
    case 'admission':
      return `${fmt(k('admission_lateness_ms_p50'))} / ${fmt(k('admission_lateness_ms_p99'))}, ${fmt(k('admission_windows_admitted'))} of ${fmt(k('admission_windows'))}`
    case 'trickle':
      return `${fmt(k('preemption_pod_ms_p50'))} / ${fmt(k('preemption_pod_ms_p99'))}, ${fmt(k('preemption_samples'))}`
    case 'burst':
      return `${fmt(k('burst_preemption_pod_ms_p50'))} / ${fmt(k('burst_preemption_pod_ms_p99'))}, ${fmt(k('burst_preemptions'))}`
    case 'burst_job':
      return `${fmt(k('burst_preemption_job_ms_p50'))} / ${fmt(k('burst_preemption_job_ms_p99'))}`
    case 'load':
      return `${fmt(k('load_at_rest'))} / ${fmt(k('load_at_windows'))} / ${fmt(k('load_at_burst'))}`
    default:
      return fmt(k(suffix))
  }
}

export function markdownTable(results: Results): string {
  const sizes = sizesOf(results)
  const head = `| | ${sizes.map((n) => n.toLocaleString('en-US')).join(' | ')} |`
  const rule = `|---|${sizes.map(() => '---').join('|')}|`
  const rows = ROWS.map(([label, suffix]) => `| ${label} | ${sizes.map((n) => cell(results, n, suffix)).join(' | ')} |`)
  return [head, rule, ...rows].join('\n')
}

interface Point {
  backfills: number
  series: string
  value: number
}

/** One point per size and series for each panel (missing or non-numeric figures are left out). */
export function plotData(results: Results): { cpu: Point[]; rss: Point[]; latency: Point[] } {
  const out = { cpu: [] as Point[], rss: [] as Point[], latency: [] as Point[] }
  const push = (to: Point[], n: number, series: string, key: string) => {
    const v = results[`scale_${n}_${key}`]
    if (typeof v === 'number' && Number.isFinite(v)) to.push({ backfills: n, series, value: v })
  }
  for (const n of sizesOf(results)) {
    for (const fn of SCALE_FUNCTIONS) {
      push(out.cpu, n, fn, `cpu_pct_${fn}`)
      push(out.rss, n, fn, `rss_mb_${fn}`)
    }
    push(out.latency, n, 'resync sweep (max)', 'sweep_ms_max')
    push(out.latency, n, 'admission lateness p99', 'admission_lateness_ms_p99')
    push(out.latency, n, 'preemption trickle p99 (pods)', 'preemption_pod_ms_p99')
    push(out.latency, n, 'preemption burst p99 (pods)', 'burst_preemption_pod_ms_p99')
  }
  return out
}

export function plotSpec(results: Results): TopLevelSpec {
  const data = plotData(results)
  const panel = (values: Point[], title: string, y: string, logY = false) => ({
    title,
    width: 300,
    height: 220,
    // A log axis cannot show 0 (a sweep under a millisecond, say): such points are left out there.
    data: { values: logY ? values.filter((p) => p.value > 0) : values },
    mark: { type: 'line' as const, point: true },
    encoding: {
      x: {
        field: 'backfills',
        type: 'quantitative' as const,
        scale: { type: 'log' as const },
        title: 'ModelBackfills',
      },
      y: {
        field: 'value',
        type: 'quantitative' as const,
        title: y,
        ...(logY ? { scale: { type: 'log' as const } } : {}),
      },
      color: { field: 'series', type: 'nominal' as const, title: null, legend: { labelLimit: 300 } },
    },
  })
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: `Scale curve (${results.date ?? ''}, load ${results.load_average_1m ?? '?'})`,
    background: 'white',
    // A panel with nothing to show yet (after the first size's rest phase: no sweep, no lateness) is left out: an
    // empty log-scale panel has no domain and makes the SVG's size NaN, which resvg refuses.
    hconcat: [
      panel(data.cpu, 'CPU at rest', '% of one core'),
      panel(data.rss, 'RSS at rest', 'MB'),
      panel(data.latency, 'Sweep, admission, preemption', 'ms', true),
    ].filter((p, i) => i === 0 || p.data.values.length > 0),
    resolve: { scale: { color: 'independent' }, legend: { color: 'independent' } },
  } as TopLevelSpec
}

export async function renderPng(spec: TopLevelSpec): Promise<Buffer> {
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' })
  const svg = await view.toSVG()
  view.finalize()
  return new Resvg(svg, { font: { loadSystemFonts: true }, fitTo: { mode: 'zoom', value: 1.5 } }).render().asPng()
}
