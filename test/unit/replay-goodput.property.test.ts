// The replay's goodput accounting (dev/replay/goodput.ts): a workload of items over the windows it was given, resumable
// against restart-from-scratch. Properties over random windows and workloads, and worked examples.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  checkWorkload,
  compareGoodput,
  keptUntil,
  medianWindowMs,
  restart,
  resumable,
  type Window,
} from '../../dev/replay/goodput.js'

/** Windows in whole ms (exact arithmetic), in time order, the last one possibly still open. */
const windowsArb = fc
  .array(fc.tuple(fc.integer({ min: 0, max: 50_000 }), fc.integer({ min: 0, max: 200_000 })), { maxLength: 30 })
  .chain((spans) =>
    fc.boolean().map((lastOpen) => {
      let t = 0
      return spans.map(([gap, length], i): Window => {
        const start = t + gap
        t = start + length
        return { start, end: t, preempted: !(lastOpen && i === spans.length - 1) }
      })
    }),
  )
const workloadArb = fc.record({
  itemMs: fc.integer({ min: 1, max: 20_000 }),
  itemsPerRun: fc.integer({ min: 1, max: 40 }),
  attemptStartMs: fc.integer({ min: 0, max: 5_000 }),
})

const total = (ws: Window[]) => ws.reduce((s, w) => s + (w.end - w.start), 0)

describe('goodput properties', () => {
  it('resumable keeps at least what restart keeps, completes at least its runs, throws away at most what it does', () => {
    fc.assert(
      fc.property(windowsArb, workloadArb, (ws, w) => {
        const { resumable: a, restart: b } = compareGoodput(ws, w)
        expect(a.keptMs).toBeGreaterThanOrEqual(b.keptMs)
        expect(a.runs).toBeGreaterThanOrEqual(b.runs)
        expect(a.thrownMs).toBeLessThanOrEqual(b.thrownMs)
        expect(a.items).toBe(b.items)
      }),
    )
  })
  it('every window splits into kept + thrown + open + attempt starts; kept + thrown never exceed the windows', () => {
    fc.assert(
      fc.property(windowsArb, workloadArb, (ws, w) => {
        for (const g of [resumable(ws, w), restart(ws, w)]) {
          expect(g.windowMs).toBe(total(ws))
          expect(g.keptMs + g.thrownMs + g.openMs + g.overheadMs).toBe(g.windowMs)
          expect(g.keptMs + g.thrownMs).toBeLessThanOrEqual(g.windowMs)
          for (const v of [g.keptMs, g.thrownMs, g.openMs, g.overheadMs]) expect(v).toBeGreaterThanOrEqual(0)
        }
      }),
    )
  })
  it('nothing is thrown away without a preemption; at most the item in flight is, resumable', () => {
    fc.assert(
      fc.property(windowsArb, workloadArb, (ws, w) => {
        const open = ws.map((x) => ({ ...x, preempted: false }))
        expect(resumable(open, w).thrownMs).toBe(0)
        expect(restart(open, w).thrownMs).toBe(0)
        expect(resumable(ws, w).thrownMs).toBeLessThan(Math.max(1, ws.filter((x) => x.preempted).length) * w.itemMs)
      }),
    )
  })
  it('restart loses less than one run per window, never more', () => {
    fc.assert(
      fc.property(windowsArb, workloadArb, (ws, w) => {
        const gap = resumable(ws, w).keptMs - restart(ws, w).keptMs
        expect(gap).toBeLessThanOrEqual(ws.length * (w.itemsPerRun - 1) * w.itemMs)
      }),
    )
  })
  it('runs of one item: both semantics are the same', () => {
    fc.assert(
      fc.property(windowsArb, workloadArb, (ws, w) => {
        const one = { ...w, itemsPerRun: 1 }
        expect(restart(ws, one)).toEqual(resumable(ws, one))
      }),
    )
  })
  it('windows that hold whole runs exactly (plus the attempt start): both keep the same and complete the same runs', () => {
    fc.assert(
      fc.property(
        workloadArb,
        fc.array(fc.tuple(fc.integer({ min: 0, max: 5 }), fc.boolean()), { maxLength: 20 }),
        (w, shape) => {
          const runMs = w.itemMs * w.itemsPerRun
          let t = 0
          const ws = shape.map(([runs, preempted]) => {
            const start = t + 1_000
            t = start + w.attemptStartMs + runs * runMs
            return { start, end: t, preempted }
          })
          const a = resumable(ws, w)
          const b = restart(ws, w)
          expect(b.keptMs).toBe(a.keptMs)
          expect(b.runs).toBe(a.runs)
          expect(b.thrownMs).toBe(0)
        },
      ),
    )
  })
  it('the kept stretch keptUntil draws adds up to the kept totals', () => {
    fc.assert(
      fc.property(windowsArb, workloadArb, (ws, w) => {
        const spans = ws.map((x) => keptUntil(x, w))
        expect(spans.reduce((s, k) => s + (k.resumable - k.workFrom), 0)).toBe(resumable(ws, w).keptMs)
        expect(spans.reduce((s, k) => s + (k.restart - k.workFrom), 0)).toBe(restart(ws, w).keptMs)
        for (const [i, k] of spans.entries()) {
          const x = ws[i] as Window
          expect(k.workFrom).toBeGreaterThanOrEqual(x.start)
          expect(k.restart).toBeLessThanOrEqual(k.resumable)
          expect(k.resumable).toBeLessThanOrEqual(Math.max(x.end, k.workFrom))
        }
      }),
    )
  })
})

describe('goodput examples', () => {
  const w = { itemMs: 60_000, itemsPerRun: 30 } // runs of 30 min
  it('windows shorter than a run: resumable finishes runs across them, restart none', () => {
    // Four preempted windows of 20.5 min: 20 items each, the half item in flight thrown away.
    const ws = [0, 1, 2, 3].map((i) => ({ start: i * 3_600_000, end: i * 3_600_000 + 1_230_000, preempted: true }))
    const c = compareGoodput(ws, w)
    expect(c.resumable).toMatchObject({ runs: 2, items: 80, keptMs: 80 * 60_000, thrownMs: 4 * 30_000, openMs: 0 })
    expect(c.restart).toMatchObject({ runs: 0, items: 80, keptMs: 0, thrownMs: 4 * 1_230_000, openMs: 0 })
    expect(c.preemptions).toBe(4)
  })
  it('runs shorter than every window are not enough for the two to agree: what a window holds past its last run counts', () => {
    // Two windows of 45 min (1.5 runs each): restart keeps one run per window, resumable three runs in all.
    const ws = [
      { start: 0, end: 2_700_000, preempted: true },
      { start: 3_600_000, end: 6_300_000, preempted: true },
    ]
    expect(resumable(ws, w)).toMatchObject({ runs: 3, keptMs: 5_400_000, thrownMs: 0 })
    expect(restart(ws, w)).toMatchObject({ runs: 2, keptMs: 3_600_000, thrownMs: 1_800_000 })
  })
  it('the attempt start is overhead, and the window still running at the end is open, not thrown away', () => {
    const ws = [{ start: 0, end: 600_000, preempted: false }]
    const g = restart(ws, { itemMs: 60_000, itemsPerRun: 30, attemptStartMs: 90_000 })
    expect(g).toMatchObject({ overheadMs: 90_000, items: 8, keptMs: 0, thrownMs: 0, openMs: 510_000 })
    expect(resumable(ws, { itemMs: 60_000, itemsPerRun: 30, attemptStartMs: 90_000 })).toMatchObject({
      keptMs: 480_000,
      openMs: 30_000,
    })
    // A window shorter than the attempt start is all overhead.
    expect(resumable([{ start: 0, end: 1_000, preempted: true }], { ...w, attemptStartMs: 5_000 })).toMatchObject({
      overheadMs: 1_000,
      thrownMs: 0,
    })
  })
  it('bad settings are refused with what was given', () => {
    expect(() => checkWorkload({ itemMs: 0, itemsPerRun: 3 })).toThrow(/item duration must be positive \(got 0\)/)
    expect(() => checkWorkload({ itemMs: 1, itemsPerRun: 2.5 })).toThrow(/items per run must be a whole number/)
    expect(() => checkWorkload({ itemMs: 1, itemsPerRun: 1, attemptStartMs: -1 })).toThrow(/attempt start/)
    expect(checkWorkload({ itemMs: 1, itemsPerRun: 1 })).toEqual({ itemMs: 1, itemsPerRun: 1, attemptStartMs: 0 })
  })
  it('median window', () => {
    expect(medianWindowMs([])).toBeNull()
    const ws = [5, 1, 3, 9].map((l) => ({ start: 0, end: l, preempted: true }))
    expect(medianWindowMs(ws)).toBe(3)
  })
})
