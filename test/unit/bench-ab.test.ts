// `npm run bench:ab` (dev/bench/ab.ts): its arguments, the medians, ratios and table (dev/bench/ab-table.ts), and that the
// script refuses a ref that names no commit before it starts anything.
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  AbUsageError,
  abRows,
  benchOnlyFor,
  figuresOf,
  figureValue,
  formatAbTable,
  lastJsonLine,
  median,
  parseAbArgs,
  toolPath,
} from '../../dev/bench/ab-table.js'
import { repoRoot } from '../env/binaries.js'

describe('parseAbArgs', () => {
  it('takes a ref, phases, rounds and --quick', () => {
    expect(parseAbArgs(['main~3'])).toEqual({
      ref: 'main~3',
      phases: ['lateness', 'preemption', 'burst', 'ingest', 'cold'],
      rounds: 3,
      quick: false,
    })
    expect(parseAbArgs(['v1', 'cold,burst,cold', '--rounds', '5'])).toEqual({
      ref: 'v1',
      phases: ['cold', 'burst'],
      rounds: 5,
      quick: false,
    })
    expect(parseAbArgs(['--quick', 'HEAD~1'])).toMatchObject({ rounds: 1, quick: true })
    expect(parseAbArgs(['--quick', '--rounds=2', '--', 'HEAD'])).toMatchObject({ ref: 'HEAD', rounds: 2 })
  })

  it('refuses what it cannot use, saying what', () => {
    const refusal = (argv: string[]) => {
      try {
        parseAbArgs(argv)
      } catch (err) {
        expect(err).toBeInstanceOf(AbUsageError)
        return (err as Error).message
      }
      throw new Error('accepted')
    }
    expect(refusal([])).toMatch(/^no git ref to compare with/)
    expect(refusal(['main', 'ingest,warp'])).toMatch(/^unknown phase "warp"; phases: lateness, preemption/)
    expect(refusal(['main', '--rounds', '0'])).toMatch(/^--rounds must be a whole number from 1 to 20, not "0"/)
    expect(refusal(['main', '--rounds'])).toMatch(/^--rounds must be/)
    expect(refusal(['main', '--fast'])).toMatch(/^unknown option "--fast"/)
    expect(refusal(['a', 'cold', 'b'])).toMatch(/^too many arguments: "b"/)
    expect(refusal(['--', '--upload-pack=x'])).toBe('not a git ref: "--upload-pack=x"')
    expect(refusal(['ma\nin'])).toMatch(/^not a git ref/)
  })
})

describe('benchOnlyFor', () => {
  it('uses the switches every earlier bench knows where it can', () => {
    expect(benchOnlyFor(['cold'])).toBeUndefined()
    expect(benchOnlyFor(['lateness', 'cold'])).toEqual({ BENCH_ONLY: 'lateness' })
    expect(benchOnlyFor(['preemption'])).toEqual({ BENCH_ONLY: 'preemption', BENCH_KNATIVE: 'none' })
    expect(benchOnlyFor(['preemption', 'burst'])).toEqual({ BENCH_ONLY: 'hot' })
    expect(benchOnlyFor(['ingest'])).toEqual({ BENCH_ONLY: 'hot' })
  })
})

describe('the table', () => {
  it('medians: odd, even, none, non-finite left out', () => {
    expect(median([3, 1, 2])).toBe(2)
    expect(median([4, 1, 3, 2])).toBe(2.5)
    expect(median([])).toBeUndefined()
    expect(median([Number.NaN, 5])).toBe(5)
  })

  it('a figure is a number, or the median of a list of runs; anything else is missing', () => {
    expect(figureValue({ x: 7 }, 'x')).toBe(7)
    expect(figureValue({ x: [10, 30, 20] }, 'x')).toBe(20)
    expect(figureValue({ x: null }, 'x')).toBeUndefined()
    expect(figureValue({ x: 'n/a' }, 'x')).toBeUndefined()
    expect(figureValue({}, 'x')).toBeUndefined()
    expect(figureValue(undefined, 'x')).toBeUndefined()
  })

  it('median of the rounds per side, B/A, and "—" for a figure a side never printed', () => {
    const a = [
      { preemption_pod_ms_p50: 40, ingest_events_per_s: 20_000 },
      { preemption_pod_ms_p50: 60, ingest_events_per_s: 30_000 },
      { preemption_pod_ms_p50: 50, ingest_events_per_s: 25_000 },
    ]
    const b = [
      { preemption_pod_ms_p50: 20, ingest_events_per_s: 50_000 },
      { preemption_pod_ms_p50: 30 },
      { preemption_pod_ms_p50: 10 },
    ]
    const rows = abRows(['preemption_pod_ms_p50', 'ingest_events_per_s', 'burst_preemption_pod_ms_p99'], a, b)
    expect(rows).toEqual([
      { figure: 'preemption_pod_ms_p50', a: 50, b: 20, ratio: 0.4 },
      { figure: 'ingest_events_per_s', a: 25_000, b: 50_000, ratio: 2 },
      { figure: 'burst_preemption_pod_ms_p99', a: undefined, b: undefined, ratio: undefined },
    ])
    expect(abRows(['x'], [{ x: 0 }], [{ x: 5 }])[0]?.ratio).toBeUndefined()
    expect(formatAbTable(rows, 'abc', 'main (def)').split('\n')).toEqual([
      '| figure | A: abc | B: main (def) | B/A |',
      '|---|---|---|---|',
      '| preemption_pod_ms_p50 | 50 | 20 | 0.40 |',
      '| ingest_events_per_s | 25000 | 50000 | 2.00 |',
      '| burst_preemption_pod_ms_p99 | — | — | — |',
    ])
  })

  it("cold start's figures come from what the runs printed, per function", () => {
    const results = [{ cold_start_ms_admit: [900], rss_mb_admit: [150], cold_start_cpu_ms_admit: [700] }, {}]
    expect(figuresOf(['ingest', 'cold'], results)).toEqual([
      'ingest_events_per_s',
      'cold_start_ms_admit',
      'cold_start_cpu_ms_admit',
      'rss_mb_admit',
    ])
  })

  it("reads a bench's result from the last JSON line of its output", () => {
    expect(lastJsonLine('starting\n{"a":1}\n{broken\nbye\n')).toEqual({ a: 1 })
    expect(lastJsonLine('[1,2]\nno result')).toBeUndefined()
  })
})

describe('dev/bench/ab.ts', () => {
  it('refuses a ref that names no commit, before it starts anything', () => {
    const run = spawnSync(
      process.execPath,
      ['--import', 'tsx', join(repoRoot, 'dev/bench/ab.ts'), 'no-such-ref-for-bench-ab', '--quick'],
      { cwd: repoRoot, encoding: 'utf8', timeout: 60_000 },
    )
    expect(run.status).toBe(2)
    expect(run.stderr).toContain('bench:ab: "no-such-ref-for-bench-ab" is not a commit in')
    expect(run.stdout).toBe('')
  }, 60_000)
})

describe("a ref's own bench, whichever layout it has", () => {
  it('runs dev/bench/run.ts where it exists, bench/run.ts in a tree from before dev/, and says the new path otherwise', () => {
    const tree =
      (...files: string[]) =>
      (p: string) =>
        files.includes(p)
    expect(toolPath('dev/bench/run.ts', tree('dev/bench/run.ts', 'bench/run.ts'))).toBe('dev/bench/run.ts')
    expect(toolPath('dev/bench/run.ts', tree('bench/run.ts'))).toBe('bench/run.ts')
    expect(toolPath('dev/scripts/bundle.mjs', tree('scripts/bundle.mjs'))).toBe('scripts/bundle.mjs')
    expect(toolPath('dev/bench/run.ts', tree())).toBe('dev/bench/run.ts')
  })

  it('the commit before the moves keeps its bench at the root (the A/B against it runs that one)', () => {
    const show = (path: string) =>
      spawnSync('git', ['cat-file', '-e', `42a6712:${path}`], { cwd: repoRoot }).status === 0
    expect(toolPath('dev/bench/run.ts', show)).toBe('bench/run.ts')
    expect(toolPath('dev/scripts/bundle.mjs', show)).toBe('scripts/bundle.mjs')
  })
})
