// dev/bench/scale: the pure parts of the scale curve — reading /proc and the apiserver's /metrics, lifecycle's sweep
// lines, and the report (table, plot) from a run's `scale_<n>_*` keys, down to a real PNG.
import { describe, expect, it } from 'vitest'
import {
  cpuDeltaBy,
  formatCpu,
  formatRequests,
  parseCpuSeconds,
  parseSweeps,
  phaseSpend,
  processCpu,
  requestsByVerb,
  verbDelta,
} from '../../dev/bench/scale/measure.js'
import { markdownTable, plotData, plotSpec, renderPng, sizesOf } from '../../dev/bench/scale/report.js'

const results = {
  date: '2026-12-01T15:00:00.000Z',
  load_average_1m: 9.5,
  scale_100_backfills: 100,
  scale_100_cpu_pct_lifecycle: 0.4,
  scale_100_rss_mb_lifecycle: 120,
  scale_100_sweep_ms_max: 40,
  scale_1000_backfills: 1000,
  scale_1000_cpu_pct_lifecycle: 1.2,
  scale_1000_rss_mb_lifecycle: 131.5,
  scale_1000_sweep_ms_max: 210,
  scale_1000_admission_lateness_ms_p99: Number.NaN,
  scale_1000_apiserver_at_rest_by_verb: 'GET 12, LIST 4',
}

describe('dev/bench/scale measure', () => {
  it('reads user + system CPU from /proc/<pid>/stat even when the command name has spaces and parentheses', () => {
    const stat = '1234 (node (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 11 0 100 0 0'
    expect(parseCpuSeconds(stat, 100)).toBe(3)
    expect(parseCpuSeconds('garbage', 100)).toBeUndefined()
  })

  it('sums apiserver_request_total by verb and takes the difference', () => {
    const text = [
      '# HELP apiserver_request_total x',
      'apiserver_request_total{code="200",component="apiserver",resource="jobs",verb="LIST"} 3',
      'apiserver_request_total{code="200",component="apiserver",resource="pods",verb="LIST"} 2',
      'apiserver_request_total{code="201",component="apiserver",resource="jobs",verb="POST"} 7',
      'apiserver_request_total_other{verb="GET"} 100',
    ].join('\n')
    const a = requestsByVerb(text)
    expect(a).toEqual({ LIST: 5, POST: 7 })
    expect(verbDelta(a, { LIST: 9, POST: 7, WATCH: 1 })).toEqual({ LIST: 4, WATCH: 1 })
  })

  it('sums CPU between two snapshots by label: a new process from 0, a reused pid as new, an exited one left out', () => {
    const before = new Map([
      [10, { comm: 'kube-apiserver', cpu: 5 }],
      [11, { comm: 'node', cpu: 1 }],
      [12, { comm: 'etcd', cpu: 2 }],
      [13, { comm: 'sleep', cpu: 9 }],
      [14, { comm: 'gone', cpu: 1 }],
    ])
    const after = new Map([
      [10, { comm: 'kube-apiserver', cpu: 7.5 }],
      [11, { comm: 'node', cpu: 1.25 }],
      [12, { comm: 'etcd', cpu: 2.004 }],
      [13, { comm: 'node', cpu: 0.5 }],
      [20, { comm: 'node', cpu: 0.25 }],
    ])
    const labels = new Map([[11, 'admit']])
    expect(cpuDeltaBy(before, after, (pid, comm) => labels.get(pid) ?? comm)).toEqual({
      'kube-apiserver': 2.5,
      node: 0.75,
      admit: 0.25,
    })
    // This process is in a real snapshot, under its own command name.
    expect(processCpu().get(process.pid)?.cpu).toBeGreaterThan(0)
  })

  it("says where a phase's CPU and apiserver requests went, from two real /proc snapshots", () => {
    let served = { GET: 10, DELETE: 2 }
    const spend = phaseSpend(
      () => served,
      (pid, comm) => (pid === process.pid ? 'bench' : comm),
    )
    expect(spend.end()).toBeUndefined() // never begun
    spend.begin()
    const until = Date.now() + 60
    let spin = 0
    while (Date.now() < until) spin++ // CPU of this process, inside the phase
    served = { GET: 13, DELETE: 7 }
    const spent = spend.end()
    expect(spin).toBeGreaterThan(0)
    expect(spent?.requests).toEqual({ GET: 3, DELETE: 5 })
    expect(spent?.wallS).toBeGreaterThanOrEqual(0.1)
    expect(spent?.cpu.bench).toBeGreaterThan(0)
    expect(formatRequests({ GET: 3, DELETE: 5 })).toBe('GET 3, DELETE 5')
    expect(formatCpu({ 'kube-apiserver': 1.25, etcd: 0.5 })).toBe('1.8 CPU s (kube-apiserver 1.25, etcd 0.5)')
  })

  it("parses lifecycle's resync sweep lines and skips anything else", () => {
    const log = [
      '{"level":30,"time":1000,"msg":"resync sweep","backfills":10000,"picked":0,"failed":0,"ms":812}',
      '{"level":30,"time":2000,"msg":"decided"}',
      '{"level":30,"time":3000,"msg":"resync sweep","backfills":10',
      'not json "resync sweep"',
    ].join('\n')
    expect(parseSweeps(log)).toEqual([{ at: 1000, ms: 812, backfills: 10000, picked: 0 }])
  })
})

describe('dev/bench/scale report', () => {
  it('finds the sizes and makes one table column per size, a dash for what was not measured', () => {
    expect(sizesOf(results)).toEqual([100, 1000])
    const table = markdownTable(results)
    const lines = table.split('\n')
    expect(lines[0]).toBe('| | 100 | 1,000 |')
    expect(table).toContain('| CPU at rest, lifecycle (% of one core) | 0.4 | 1.2 |')
    expect(table).toContain('| … by verb (requests in the window) | — | GET 12, LIST 4 |')
    // NaN is written to JSON as null: either way a dash, not "NaN" or "null".
    const reread = markdownTable(JSON.parse(JSON.stringify(results)))
    expect(markdownTable(results)).not.toMatch(/NaN|null/)
    expect(reread).not.toMatch(/NaN|null/)
    expect(lines.every((l) => l.split('|').length === lines[0]?.split('|').length)).toBe(true)
  })

  it('plots only finite numbers', () => {
    const data = plotData(results)
    expect(data.cpu).toEqual([
      { backfills: 100, series: 'lifecycle', value: 0.4 },
      { backfills: 1000, series: 'lifecycle', value: 1.2 },
    ])
    expect(data.latency.map((p) => p.series)).toEqual(['resync sweep (max)', 'resync sweep (max)'])
  })

  it('renders the plot to a PNG with the chart library', async () => {
    const png = await renderPng(plotSpec(results))
    expect(png.subarray(1, 4).toString('latin1')).toBe('PNG')
    expect(png.length).toBeGreaterThan(5000)
  }, 60_000)

  it('renders the plot after the first size at rest, when the latency panel has nothing yet', async () => {
    // A run writes its results after every phase: after the first size's rest phase, no sweep ran and no lateness
    // was measured, and an empty log-scale panel made resvg refuse the SVG ("invalid size"), ending the run.
    const atRest = {
      date: results.date,
      scale_1000_backfills: 1000,
      scale_1000_cpu_pct_admit: 0.6,
      scale_1000_sweep_ms_max: Number.NaN,
    }
    expect(plotData(atRest).latency).toEqual([])
    const png = await renderPng(plotSpec(atRest))
    expect(png.subarray(1, 4).toString('latin1')).toBe('PNG')
  }, 60_000)
})
