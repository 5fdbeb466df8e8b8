// KV state versioning: values written by the release before versioning (test/fixtures/kv-v1, no `v`) are read as
// version 1 and upgraded; this release's values round-trip; a value that cannot be read is an error value, never
// a throw.
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { decide } from '../../pkg/core/decide.js'
import {
  parseBackfillState,
  parseClaim,
  parseEntry,
  parseModelIdleState,
  STATE_VERSION,
  toKv,
} from '../../pkg/core/state.js'
import { aJob, aWorld, iso, J, MINUTE, T0 } from './support/world.js'

const fixture = (name: string) => readFileSync(new URL(`../fixtures/kv-v1/${name}`, import.meta.url), 'utf8')

describe('KV values of the release before versioning (fixtures)', () => {
  for (const name of [
    'backfill-running.json',
    'backfill-waiting.json',
    'backfill-succeeded-repeat.json',
    'backfill-preempted.json',
  ]) {
    it(`${name} is read as version 1 and upgraded, every field kept`, () => {
      const text = fixture(name)
      const r = parseEntry(text, parseBackfillState)
      expect(r.ok).toBe(true)
      if (!r.ok) return
      expect(r.value).toEqual({ ...JSON.parse(text), v: STATE_VERSION })
    })
  }

  it('model-idle.json and claim.json are read and upgraded', () => {
    const idle = parseEntry(fixture('model-idle.json'), parseModelIdleState)
    expect(idle).toEqual({ ok: true, value: { ...JSON.parse(fixture('model-idle.json')), v: STATE_VERSION } })
    const claim = parseEntry(fixture('claim.json'), parseClaim)
    expect(claim).toEqual({ ok: true, value: { ...JSON.parse(fixture('claim.json')), v: STATE_VERSION } })
  })

  it('an old Running state decides on as it did: the attempt carries on, counters untouched', () => {
    const r = parseEntry(fixture('backfill-running.json'), parseBackfillState)
    if (!r.ok) throw new Error(r.error)
    const d = decide(
      aWorld({ state: r.value, job: aJob(J(1), { started: true }) }),
      { type: 'timer' },
      T0 + 11 * MINUTE,
    )
    expect(d.state).toMatchObject({ phase: 'Running', jobName: J(1), attempts: 1, counters: r.value.counters })
    expect(d.actions).toEqual([])
  })

  it('an old preempted state keeps its counters (no reset on upgrade)', () => {
    const r = parseEntry(fixture('backfill-preempted.json'), parseBackfillState)
    if (!r.ok) throw new Error(r.error)
    expect(r.value.counters).toEqual({
      starts: 3,
      success: 1,
      failed: 1,
      preemptions: { foreground: 1, other: 2 },
      usefulSeconds: 1234.5,
    })
  })
})

describe('this release', () => {
  it('toKv stamps the version; the value round-trips', () => {
    const r = parseEntry(fixture('backfill-waiting.json'), parseBackfillState)
    if (!r.ok) throw new Error(r.error)
    const text = toKv(r.value)
    expect(JSON.parse(text).v).toBe(STATE_VERSION)
    expect(parseEntry(text, parseBackfillState)).toEqual({ ok: true, value: r.value })
  })
})

describe('unreadable values are errors, not throws', () => {
  const running = JSON.parse(fixture('backfill-running.json'))
  const cases: [string, string][] = [
    ['not JSON', '{"namespace": '],
    ['a JSON string', '"hello"'],
    ['null', 'null'],
    ['a phase outside the vocabulary', JSON.stringify({ ...running, phase: 'Exploded' })],
    ['counters missing', JSON.stringify({ ...running, counters: undefined })],
    ['a negative counter', JSON.stringify({ ...running, counters: { ...running.counters, starts: -1 } })],
    ['a bad timestamp', JSON.stringify({ ...running, windowStart: 'yesterday' })],
    ['a version from the future', JSON.stringify({ ...running, v: 99 })],
  ]
  for (const [what, text] of cases) {
    it(what, () => {
      const r = parseEntry(text, parseBackfillState)
      expect(r.ok).toBe(false)
      if (!r.ok) expect(r.error.length).toBeGreaterThan(0)
    })
  }

  it('a claim without a jobName and an idle entry with a bad time are refused too', () => {
    expect(parseClaim({ namespace: 'ns', backfill: 'bf', attempt: 1, claimedAt: iso(T0) }).ok).toBe(false)
    expect(parseModelIdleState({ namespace: 'ns', model: 'm', lastForegroundAt: 'x', updatedAt: iso(T0) }).ok).toBe(
      false,
    )
  })
})
