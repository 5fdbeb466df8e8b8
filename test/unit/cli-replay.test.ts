// The replay's pure parts: the documented CSV format (timestamps, optional models assigned deterministically, bad
// rows skipped), the seeded generator, the theoretical harvest, the report's exposure and harvest arithmetic, and
// the figure's vega-lite spec rendering to a PNG, and the goodput section (resumable against restart-from-scratch).
import { describe, expect, it } from 'vitest'
import { renderPng, timelineSpec } from '../../dev/replay/figure.js'
import {
  computeReport,
  keptRatio,
  percentile,
  renderReport,
  runsRatio,
  traceDuration,
} from '../../dev/replay/report.js'
import {
  csvCells,
  generateTrace,
  harvestable,
  idleIntervals,
  modelName,
  parseTimestamp,
  parseTrace,
} from '../../dev/replay/trace.js'

describe('trace CSV', () => {
  it('reads ISO and numeric timestamps, sorts, and makes times relative', () => {
    const t = parseTrace('model,timestamp\nllama,2026-01-01T00:00:10Z\ngemma,2026-01-01T00:00:00.500Z\n')
    expect(t.requests).toEqual([
      { at: 0, model: 'gemma' },
      { at: 9500, model: 'llama' },
    ])
    expect(t.models).toEqual(['gemma', 'llama'])
    expect(t.durationMs).toBe(9500)
    expect(t.startedAt).toBe('2026-01-01T00:00:00.500Z')
    expect(parseTimestamp('1.5')).toBe(1500)
    expect(parseTimestamp('1767225600000')).toBe(1767225600000)
    expect(parseTimestamp('soon')).toBeNaN()
  })
  it('assigns models deterministically when the trace has none; skips unreadable rows', () => {
    const csv = `ts\n${Array.from({ length: 50 }, (_, i) => String(i)).join('\n')}\nnot-a-time\n`
    const a = parseTrace(csv, { models: 4, seed: 7 })
    const b = parseTrace(csv, { models: 4, seed: 7 })
    expect(a).toEqual(b)
    expect(a.skipped).toBe(1)
    expect(a.requests).toHaveLength(50)
    expect(new Set(a.requests.map((r) => r.model))).toEqual(new Set(['model-0', 'model-1', 'model-2', 'model-3']))
    expect(parseTrace(csv, { models: 4, seed: 8 }).requests).not.toEqual(a.requests)
  })
  it('quoted cells, and model names made valid', () => {
    expect(csvCells('"a,b",c,"say ""hi"""')).toEqual(['a,b', 'c', 'say "hi"'])
    expect(modelName('Llama 3 8B')).toBe('llama-3-8b')
    expect(modelName('gemma')).toBe('gemma')
    expect(modelName('***')).toMatch(/^m-[0-9a-f]{8}$/)
    expect(() => parseTrace('when,model\n1,a')).toThrow(/no timestamp column/)
  })
})

describe('generator', () => {
  it('is seeded, bursty and diurnal', () => {
    const day = 60 * 60_000
    const csv = generateTrace({ seed: 3, durationMs: day, dayMs: day, models: 3 })
    expect(generateTrace({ seed: 3, durationMs: day, dayMs: day, models: 3 })).toBe(csv)
    const t = parseTrace(csv)
    expect(t.models).toEqual(['model-0', 'model-1', 'model-2'])
    // Diurnal: the middle half of the "day" carries more requests than the night quarters around it.
    const mid = t.requests.filter((r) => r.at > day / 4 && r.at < (3 * day) / 4).length
    expect(mid).toBeGreaterThan(t.requests.length - mid)
    // Bursty: most gaps are short (inside bursts), a few are long (quiet periods).
    const gaps = t.requests
      .filter((r) => r.model === 'model-0')
      .map((r, i, all) => (i ? r.at - (all[i - 1]?.at ?? 0) : 0))
      .slice(1)
      .sort((a, b) => a - b)
    expect(percentile(gaps, 50)).toBeLessThan(20_000)
    expect(percentile(gaps, 99)).toBeGreaterThan(60_000)
  })
})

describe('harvest and report', () => {
  it('theoretical harvest: quiet stretches beyond idleFor, the first window from the start', () => {
    // 0..100 s, idleFor 10 s, requests at 30 and 35: 10..30 and 45..100.
    expect(idleIntervals([30_000, 35_000], 0, 100_000, 10_000)).toEqual([
      [10_000, 30_000],
      [45_000, 100_000],
    ])
    expect(harvestable([30_000, 35_000], 0, 100_000, 10_000)).toBe(75_000)
    expect(harvestable([], 0, 5_000, 10_000)).toBe(0)
  })
  it('exposure from the request that found a Job live to its pods gone; harvest clipped to the replay', () => {
    const r = computeReport({
      requests: [
        { model: 'a', sentAt: 30_000, ackAt: 30_002 },
        { model: 'a', sentAt: 31_000, ackAt: 31_002 },
        { model: 'b', sentAt: 50_000, ackAt: 50_001 },
      ],
      jobs: [
        { name: 'a-1', model: 'a', addedAt: 11_000, endAt: 30_100, podsGoneAt: 30_250, pods: 1 },
        { name: 'a-2', model: 'a', addedAt: 45_500, pods: 1 },
        { name: 'b-1', model: 'b', addedAt: 10_500, endAt: 50_080, pods: 0 },
      ],
      models: ['a', 'b'],
      insideWindow: [],
      from: 0,
      to: 100_000,
      idleForMs: 10_000,
    })
    expect(r.exposure.items.map((e) => [e.job, e.exposureMs])).toEqual([
      ['a-1', 250],
      ['b-1', 80],
    ])
    expect(r.exposure).toMatchObject({ count: 2, p50Ms: 80, p99Ms: 250, maxMs: 250 })
    expect(r.jobDeleted).toEqual({ p50Ms: 80, p99Ms: 100, maxMs: 100 })
    expect(r.unresolved).toEqual([])
    const a = r.harvest.models.find((m) => m.model === 'a')
    expect(a).toMatchObject({ harvestedMs: 19_100 + 54_500, theoreticalMs: 20_000 + 59_000 })
    expect(r.admissionsInsideWindow).toBe(0)
    expect(renderReport(r, { trace: 'x' }, 'timeline.png')).toContain('Jobs admitted inside an idle window: **0**')
  })
  it('a Job a request should have cancelled that stayed live is reported unresolved', () => {
    const r = computeReport({
      requests: [{ model: 'a', sentAt: 30_000, ackAt: 30_001 }],
      jobs: [{ name: 'a-1', model: 'a', addedAt: 11_000, pods: 1 }],
      models: ['a'],
      insideWindow: [],
      from: 0,
      to: 40_000,
      idleForMs: 10_000,
    })
    expect(r.unresolved).toEqual([{ job: 'a-1', model: 'a', requestSentAt: new Date(30_000).toISOString() }])
  })
})

describe('goodput section', () => {
  // 0..100 s of wall time at 60x (100 min of trace), idleFor 10 s; requests at 30 and 35 s: windows 10..30, 45..100.
  const input = {
    requests: [
      { model: 'a', sentAt: 30_000, ackAt: 30_001 },
      { model: 'a', sentAt: 35_000, ackAt: 35_001 },
    ],
    jobs: [
      { name: 'a-1', model: 'a', addedAt: 11_000, endAt: 30_100, podsGoneAt: 30_200, pods: 1 },
      { name: 'a-2', model: 'a', addedAt: 46_000, pods: 1 },
    ],
    models: ['a'],
    insideWindow: [],
    from: 0,
    to: 100_000,
    idleForMs: 10_000,
  }
  it('reads Jobs as attempt windows in trace time, both semantics side by side', () => {
    // Runs of 30 items of 1 min (trace): a-1 ran 19.1 min (19 items), a-2 54 min, still running at the end.
    const r = computeReport({ ...input, goodput: { workload: { itemMs: 60_000, itemsPerRun: 30 }, speed: 60 } })
    const g = r.goodput
    expect(g).toBeDefined()
    if (!g) return
    expect(g.harvestableMs).toBe((20_000 + 55_000) * 60)
    expect(g.medianIdleWindowMs).toBe(20_000 * 60)
    expect(g.jobs).toMatchObject({ windows: 2, preemptions: 1 })
    // Resumable: 19 + 54 items = 2 runs; restart: a-1 nothing, a-2 one run.
    expect(g.jobs.resumable).toMatchObject({ runs: 2, items: 73, keptMs: 73 * 60_000 })
    expect(g.jobs.resumable.thrownMs).toBeCloseTo(6_000, 6)
    expect(g.jobs.restart).toMatchObject({ runs: 1, keptMs: 30 * 60_000 })
    expect(g.jobs.restart.thrownMs).toBeCloseTo(19.1 * 60_000, 6)
    expect(g.jobs.restart.openMs).toBe(24 * 60_000)
    expect(g.ideal.resumable.keptMs).toBe(75 * 60_000)
    expect(runsRatio(g.jobs)).toBe(2)
    expect(keptRatio(g.jobs.resumable.keptMs, g.harvestableMs)).toBeCloseTo(73 / 75, 9)
    const md = renderReport(r, { trace: 'x' })
    expect(md).toContain('## Goodput: resumable against restart-from-scratch')
    expect(md).toContain('| whole runs completed | 2 | 1 |')
    expect(md).toContain('Resumable completes **2.00×** the runs.')
    expect(md).toContain('a run is 30.0 min (longer) against a median harvestable window of 20.0 min')
  })
  it('no workload, no section; durations read in their unit', () => {
    expect(computeReport(input).goodput).toBeUndefined()
    expect(renderReport(computeReport(input), {})).not.toContain('Goodput')
    expect([traceDuration(30_000), traceDuration(90_000), traceDuration(5_400_000)]).toEqual([
      '30.0 s',
      '1.5 min',
      '1.50 h',
    ])
  })
})

describe('figure', () => {
  it('renders a PNG timeline with three lanes per model', async () => {
    const spec = timelineSpec({
      models: ['a'],
      requests: [{ model: 'a', sentAt: 30_000, ackAt: 30_001 }],
      jobs: [{ name: 'a-1', model: 'a', addedAt: 11_000, endAt: 30_100, pods: 1 }],
      from: 0,
      to: 60_000,
      idleForMs: 10_000,
      title: 'test',
    })
    const values = (spec as { data: { values: { lane: string; kind: string }[] } }).data.values
    expect(new Set(values.map((v) => v.lane))).toEqual(new Set(['a requests', 'a idle beyond idleFor', 'a Jobs']))
    const png = await renderPng(spec)
    expect(png.subarray(1, 4).toString()).toBe('PNG')
    expect(png.length).toBeGreaterThan(2_000)
  })
  it('with a workload, two more lanes per model: kept, then thrown away by the preemption', async () => {
    const spec = timelineSpec({
      models: ['a'],
      requests: [{ model: 'a', sentAt: 30_000, ackAt: 30_001 }],
      jobs: [{ name: 'a-1', model: 'a', addedAt: 10_000, endAt: 30_500, pods: 1 }],
      from: 0,
      to: 60_000,
      idleForMs: 10_000,
      title: 'test',
      workload: { itemMs: 1_000, itemsPerRun: 8 },
    })
    const values = (spec as { data: { values: { lane: string; kind: string; start: number; end: number }[] } }).data
      .values
    const lane = (name: string) => values.filter((v) => v.lane === name).map((v) => [v.kind, v.start, v.end])
    // 20 items of 1 s, 2 runs of 8: resumable keeps 20 s and throws the half item, restart keeps 16 s.
    expect(lane('a resumable')).toEqual([
      ['kept', 10, 30],
      ['thrown away', 30, 30.5],
    ])
    expect(lane('a restart from scratch')).toEqual([
      ['kept', 10, 26],
      ['thrown away', 26, 30.5],
    ])
    expect((await renderPng(spec)).subarray(1, 4).toString()).toBe('PNG')
  })
})
