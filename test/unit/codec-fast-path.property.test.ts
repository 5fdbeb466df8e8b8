// The foreground decode fast path (events/fast-decode/foreground.ts) against the zod schemas it stands in for: on
// arbitrary and near-miss inputs it accepts only what the schemas accept, with the same value, and everything it
// leaves to them decodes exactly as before (the same errors and dead-letter reasons).
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { catalog } from '../../events/catalog.js'
import { decode, Envelope, validate, validateBySchema } from '../../events/codec.js'
import { fastForeground, isIsoUtcMillis } from '../../events/fast-decode/foreground.js'

const TYPE = 'ai.flexinfer.foreground.request'
const DATA = catalog[TYPE].data
const TIME = Envelope.shape.time

/** Characters that make near misses of names and times. */
const nearChars = fc.constantFrom(...'az09-.:TZ+_A 9\u00e9'.split(''))
const mutate = (base: fc.Arbitrary<string>) =>
  fc.tuple(base, fc.nat(), nearChars, fc.constantFrom('replace', 'insert', 'delete')).map(([s, i, c, op]) => {
    const at = s.length ? i % s.length : 0
    if (op === 'replace') return s.slice(0, at) + c + s.slice(at + 1)
    if (op === 'insert') return s.slice(0, at) + c + s.slice(at)
    return s.slice(0, at) + s.slice(at + 1)
  })

const label = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?$/)
const name = fc.oneof(
  label,
  fc.array(label, { minLength: 1, maxLength: 4 }).map((l) => l.join('.')),
  fc.constant('a'.repeat(63)),
  fc.constant(`${'a'.repeat(62)}.${'b'.repeat(190)}`), // 253 characters
)
const badName = fc.oneof(
  mutate(name),
  fc.constant('a'.repeat(64)),
  fc.constant(`${'a'.repeat(62)}.${'b'.repeat(191)}`), // 254
  fc.constant(''),
)

/** toISOString's form (years 0–9999 are 24 characters, others longer), leap days and near misses. */
const isoTime = fc
  .date({ min: new Date(Date.UTC(-5, 0, 1)), max: new Date(Date.UTC(10_010, 0, 1)), noInvalidDate: true })
  .map((d) => d.toISOString())
const leapish = fc
  .tuple(fc.integer({ min: 0, max: 9999 }), fc.constantFrom('02-29', '02-28', '02-30', '04-31', '12-31', '13-01'))
  .map(([y, md]) => `${String(y).padStart(4, '0')}-${md}T23:59:59.999Z`)
const badTime = fc.oneof(
  mutate(isoTime),
  mutate(leapish),
  fc.constantFrom('2026-12-01T10:00:00Z', '2026-12-01T10:00:00.1+02:00', '2026-12-01T24:00:00.000Z', ''),
)

/** A well-formed foreground request as emitters write it, with or without the optional attributes. */
const request = fc
  .record(
    {
      specversion: fc.constant('1.0'),
      id: fc.uuid(),
      source: fc.constantFrom('gateway', 'flexinfer/model-backfill'),
      type: fc.constant(TYPE),
      time: fc.oneof(isoTime, leapish),
      subject: fc.string(),
      datacontenttype: fc.constant('application/json'),
      dataschema: fc.string(),
      data: fc.record(
        { namespace: name, model: name, workloadClass: fc.constantFrom('foreground', 'background') },
        { requiredKeys: ['namespace', 'model'] },
      ),
      traceparent: fc.string(),
      x1: fc.oneof(fc.integer(), fc.boolean(), fc.constant(null), fc.object()),
    },
    { requiredKeys: ['specversion', 'id', 'source', 'type', 'time', 'data'] },
  )
  .map((e) => e as Record<string, unknown>)

/** What a field may be replaced by: a near miss for its kind, or any JSON value, or nothing (removed). */
const corruption = fc.oneof(
  fc.tuple(fc.constantFrom('time'), badTime),
  fc.tuple(fc.constantFrom('data.namespace', 'data.model'), badName),
  fc.tuple(
    fc.constantFrom('specversion', 'id', 'source', 'type', 'subject', 'datacontenttype', 'dataschema', 'data'),
    fc.constantFrom('0.3', '', 'constructor', 'ai.flexinfer.backfill.cancel', '{"namespace":"ns","model":"m"}'),
  ),
  fc.tuple(
    fc.constantFrom('data.workloadClass', 'data.extra', 'data.__proto__', 'Bad', 'a-b', '__proto__', 'data_base64'),
    fc.constantFrom<unknown>('other', 1, 'x'),
  ),
  fc.tuple(
    fc.constantFrom('specversion', 'id', 'source', 'type', 'time', 'data', 'data.namespace', 'data.model', 'subject'),
    fc.oneof(fc.jsonValue(), fc.constant(undefined)),
  ),
)

/** A request with zero, one or two fields spoiled, as it would arrive: through JSON. */
const requestLike = fc.tuple(request, fc.array(corruption, { maxLength: 2 })).map(([event, spoils]) => {
  const e = JSON.parse(JSON.stringify(event)) as Record<string, unknown>
  for (const [path, value] of spoils) {
    const [head, key] = path.split('.') as [string, string | undefined]
    const target = key === undefined ? e : (e[head] as Record<string, unknown>)
    if (!target || typeof target !== 'object') continue
    const field = key ?? head
    if (value === undefined) delete target[field]
    else Object.defineProperty(target, field, { value, enumerable: true, configurable: true, writable: true })
  }
  return JSON.parse(JSON.stringify(e)) as Record<string, unknown>
})

const anyObject = fc.oneof(fc.object(), fc.dictionary(fc.string(), fc.jsonValue()))

describe('decode fast path for foreground requests', () => {
  it('accepts only what the schemas accept, with the same value', () => {
    let accepted = 0
    fc.assert(
      fc.property(fc.oneof(requestLike, requestLike, anyObject), (raw) => {
        const fast = fastForeground(raw)
        if (!fast) return
        accepted++
        expect(fast).toStrictEqual(validateBySchema(raw))
        // And against the bare schemas, not only the schema path (which has its own envelope shortcut).
        expect(Envelope.safeParse(raw).success).toBe(true)
        const data = DATA.safeParse(raw.data)
        expect(data.success && data.data).toStrictEqual(fast.ok && fast.event.data)
      }),
      { numRuns: 2000, seed: 11 },
    )
    // The generator reaches the fast path often enough for the property to mean something.
    expect(accepted).toBeGreaterThan(100)
  })

  it('leaves everything else to the schemas: validate() answers exactly as the schema path', () => {
    fc.assert(
      fc.property(fc.oneof(requestLike, anyObject), (raw) => {
        const got = validate(raw)
        const want = validateBySchema(raw)
        // The schema path fills a missing time (or a foreground request's unreadable one) with "now": compare it apart.
        if ((raw.time === undefined || !TIME.safeParse(raw.time).success) && got.ok && want.ok) {
          expect({ ...got.event, time: '' }).toStrictEqual({ ...want.event, time: '' })
          return
        }
        expect(got).toStrictEqual(want)
      }),
      { numRuns: 2000, seed: 12 },
    )
  })

  it('the time check accepts only what the envelope schema accepts', () => {
    let accepted = 0
    fc.assert(
      fc.property(fc.oneof(isoTime, leapish, badTime, fc.string()), (time) => {
        if (!isIsoUtcMillis(time)) return
        accepted++
        expect(TIME.safeParse(time).success).toBe(true)
      }),
      { numRuns: 3000, seed: 13 },
    )
    expect(accepted).toBeGreaterThan(500)
    // Gregorian leap days, both ways.
    expect(isIsoUtcMillis('2000-02-29T00:00:00.000Z')).toBe(true)
    expect(isIsoUtcMillis('0000-02-29T00:00:00.000Z')).toBe(true)
    expect(isIsoUtcMillis('2024-02-29T00:00:00.000Z')).toBe(true)
    expect(isIsoUtcMillis('1900-02-29T00:00:00.000Z')).toBe(false)
    expect(isIsoUtcMillis('2023-02-29T00:00:00.000Z')).toBe(false)
  })

  it('takes the usual request (what emitters send) and keeps its extensions', () => {
    const raw = {
      specversion: '1.0',
      id: 'a1',
      source: 'gateway',
      type: TYPE,
      time: '2026-12-01T23:00:00.123Z',
      datacontenttype: 'application/json',
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      data: { namespace: 'team-a', model: 'llama.v3', workloadClass: 'foreground' },
    }
    const fast = fastForeground(raw)
    expect(fast).toStrictEqual(validateBySchema(raw))
    expect(fast?.ok && fast.event.extensions).toEqual({ traceparent: raw.traceparent })
    // Bytes from the wire, as nats.js hands them over (a Buffer view of its read buffer).
    const wire = Buffer.from(`xx${JSON.stringify(raw)}yy`).subarray(2, -2)
    expect(decode(wire)).toStrictEqual(fast)
    expect(decode(new Uint8Array(wire))).toStrictEqual(fast)
  })
})
