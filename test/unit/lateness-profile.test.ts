// The admission lateness profile: admit's step timings add up per step, and the benchmark's reader of its log lines
// gives each step's percentiles and survives lines it cannot read.
import { describe, expect, it } from 'vitest'
import { admissionLines, latenessProfile } from '../../dev/bench/lateness-profile.js'
import { StepTimings } from '../../pkg/observability/step-timings.js'

describe('StepTimings', () => {
  it('charges the time since the previous mark to each step, adding up a step met twice', async () => {
    let t = 100
    const timings = new StepTimings(() => t)
    t = 103.04
    timings.mark('backfill')
    t = 110
    timings.mark('claims')
    t = 111
    timings.mark('backfill')
    expect(timings.ms).toEqual({ backfill: 4, claims: 7 })
  })

  it('times a concurrent operation on its own, without moving the sequential marks', async () => {
    let t = 0
    const timings = new StepTimings(() => t)
    const op = timings.time('observe.template', new Promise<string>((r) => setTimeout(() => r('x'), 0)))
    t = 5
    expect(await op).toBe('x')
    t = 9
    timings.mark('observe')
    expect(timings.ms).toEqual({ 'observe.template': 5, observe: 9 })
  })
})

describe('latenessProfile', () => {
  it('gives p50 and p99 of every step from the admission lines only', () => {
    const lines = [
      ...Array.from({ length: 100 }, (_, i) =>
        JSON.stringify({
          msg: 'admission timings',
          lateMs: i + 1,
          earlyMs: 300,
          slotMs: 900,
          ms: { claims: 2, fence: i },
        }),
      ),
      JSON.stringify({ msg: 'job created', lateMs: 1e9 }),
      '{"msg":"admission timings", cut off',
      '',
    ]
    const rows = Object.fromEntries(latenessProfile(lines.join('\n')).map((r) => [r.step, r]))
    expect(rows.lateMs).toMatchObject({ n: 100, p50: 50, p99: 99 })
    expect(rows.claims).toMatchObject({ n: 100, p50: 2, p99: 2, mean: 2 })
    expect(rows.fence).toMatchObject({ p50: 49, p99: 98 })
    expect(rows.slotMs).toMatchObject({ n: 100, p50: 900 })
    expect(Object.keys(rows)).toEqual(['lateMs', 'earlyMs', 'slotMs', 'claims', 'fence'])
    expect(admissionLines(lines.join('\n'))).toBe(101) // the cut-off line counts: it was written
  })
})
