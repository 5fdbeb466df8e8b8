// sameState compares states field by field instead of by their JSON: it must say exactly what comparing the JSON said.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { sameState } from '../../pkg/core/decide.js'
import { sameJson } from '../../pkg/core/same-json.js'
import type { BackfillState } from '../../pkg/core/state.js'

const json = (v: unknown, skip?: string) =>
  JSON.stringify(skip !== undefined && v && typeof v === 'object' ? { ...v, [skip]: undefined } : v)

const values = fc.anything({
  withNullPrototype: true,
  withDate: true,
  withSparseArray: true,
  withBoxedValues: true,
  values: [
    fc.constantFrom(undefined, null, Number.NaN, -0, 0, Number.POSITIVE_INFINITY, '', 'updatedAt', true, false),
    fc.string(),
    fc.integer(),
  ],
  key: fc.constantFrom('a', 'b', 'c', 'updatedAt', 'phase'),
})

describe('sameJson', () => {
  it('says what comparing JSON.stringify says: random pairs, equal copies, and with a key left out', () => {
    fc.assert(
      fc.property(values, values, (a, b) => {
        expect(sameJson(a, b)).toBe(json(a) === json(b))
        expect(sameJson(a, b, 'updatedAt')).toBe(json(a, 'updatedAt') === json(b, 'updatedAt'))
      }),
      { numRuns: 2000 },
    )
    fc.assert(
      fc.property(fc.clone(values, 2), ([a, b]) => {
        expect(sameJson(a, b)).toBe(json(a) === json(b))
      }),
      { numRuns: 1000 },
    )
  })

  it('tells key order, undefined fields, non-finite numbers and -0 as JSON does', () => {
    expect(sameJson({ a: 1, b: 2 }, { b: 2, a: 1 })).toBe(false)
    expect(sameJson({ a: 1, b: undefined }, { a: 1 })).toBe(true)
    expect(sameJson({ a: Number.NaN }, { a: null })).toBe(true)
    expect(sameJson({ a: -0 }, { a: 0 })).toBe(true)
    expect(sameJson([undefined], [null])).toBe(true)
    expect(sameJson({ d: new Date(0) }, { d: '1970-01-01T00:00:00.000Z' })).toBe(true)
  })

  it('sameState leaves updatedAt out', () => {
    const s = {
      phase: 'Idle',
      updatedAt: '2026-01-01T00:00:00.000Z',
      counters: { starts: 1 },
    } as unknown as BackfillState
    expect(sameState(s, { ...s, updatedAt: '2026-01-02T00:00:00.000Z' })).toBe(true)
    expect(sameState(s, { ...s, counters: { starts: 2 } } as BackfillState)).toBe(false)
    expect(sameState(s, null)).toBe(false)
  })
})
