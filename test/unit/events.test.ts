import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { catalog, EVENT_TYPES, subjectFor } from '../../events/catalog.js'
import { decode, encode, encodeApiServerEvent } from '../../events/codec.js'
import { README, renderReadme, SCHEMA_DIR, schemaFiles } from '../../events/generate.js'

const fg = (data: unknown, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    specversion: '1.0',
    id: 'r1',
    source: 'gw',
    type: 'ai.flexinfer.foreground.request',
    time: '2026-11-29T12:00:00Z',
    datacontenttype: 'application/json',
    data,
    ...extra,
  })

describe('event codec', () => {
  it('round-trips every catalog type through structured JSON', () => {
    const samples: { [T in (typeof EVENT_TYPES)[number]]: unknown } = {
      'ai.flexinfer.foreground.request': { namespace: 'ns', model: 'm' },
      'ai.flexinfer.backfill.cancel': {
        namespace: 'ns',
        backfill: 'b',
        jobName: 'b-1-abc',
        reason: 'ForegroundDemand',
        at: '2026-11-29T12:00:00.000Z',
      },
      'ai.flexinfer.backfill.admit': { namespace: 'ns', backfill: 'b' },
      'ai.flexinfer.timer.fired': { namespace: 'ns', backfill: 'b', due: '2026-11-29T12:00:00.000Z' },
      'ai.flexinfer.backfill.changed': { namespace: 'ns', backfill: 'b', generation: 2, deleted: false },
      'ai.flexinfer.model.ready': { namespace: 'ns', model: 'm', ready: true, node: 'n', deleted: false },
      'ai.flexinfer.gaming.session': { namespace: 'ns', name: 'g', nodeName: 'n', deleted: true },
      'ai.flexinfer.gpu.lease': { namespace: 'ns', name: 'l', group: 'g', deleted: false },
      'ai.flexinfer.job.completed': { namespace: 'ns', job: 'j', backfill: 'b', outcome: 'Complete' },
      'ai.flexinfer.resync.due': { intervalMs: 30_000 },
      'ai.flexinfer.backfill.resync': { namespace: 'ns', backfill: 'b', reason: 'TimerLost' },
    }
    for (const type of EVENT_TYPES) {
      const result = decode(encode(type, samples[type] as never, { time: '2026-11-29T12:00:00.000Z' }))
      expect(result, type).toEqual({ ok: true, event: expect.objectContaining({ type, data: samples[type] }) })
    }
  })

  it('accepts the gateway contract with and without workloadClass', () => {
    expect(decode(fg({ namespace: 'ns', model: 'm' })).ok).toBe(true)
    expect(decode(fg({ namespace: 'ns', model: 'm', workloadClass: 'background' }))).toMatchObject({
      ok: true,
      event: { data: { workloadClass: 'background' } },
    })
  })

  it.each([
    ['not JSON', 'garbage', /not JSON/],
    ['a JSON array', '[1]', /not a JSON object/],
    ['a missing id', fg({ namespace: 'ns', model: 'm' }, { id: undefined }), /invalid CloudEvent envelope/],
    ['an unknown type', fg({}, { type: 'com.example.other' }), /unknown event type "com.example.other"/],
    ['another specversion', fg({ namespace: 'ns', model: 'm' }, { specversion: '0.3' }), /specversion/],
    [
      'a time that is not RFC 3339 (another type than a foreground request)',
      fg({ model: 'm', namespace: 'ns', ready: true }, { type: 'ai.flexinfer.model.ready', time: 'yesterday' }),
      /time/,
    ],
    [
      'an extension attribute that is not lower-case alphanumeric',
      fg({ namespace: 'ns', model: 'm' }, { Trace_ID: 'x' }),
      /extension attribute "Trace_ID"/,
    ],
    ['a missing model', fg({ namespace: 'ns' }), /model: .*expected string/i],
    ['an invalid workloadClass', fg({ namespace: 'ns', model: 'm', workloadClass: 'batch' }), /workloadClass/],
    ['an upper-case namespace', fg({ namespace: 'NS', model: 'm' }), /namespace: must be a Kubernetes namespace/],
    [
      'a non-object ApiServerSource payload',
      fg(5, { type: 'dev.knative.apiserver.resource.add' }),
      /not a Kubernetes object/,
    ],
  ])('rejects %s with a specific reason', (_what, body, reason) => {
    const result = decode(body)
    expect(result.ok).toBe(false)
    if (!result.ok) expect(result.reason).toMatch(reason)
  })

  it.each([
    ['empty', ''],
    ['not RFC 3339', 'yesterday'],
    ['not a string', 1764590400],
  ])('a foreground request whose time is %s still counts: its time is read as absent', (_what, time) => {
    // Dead-lettered, it would leave a backfill running under that traffic; demand measures from the store time.
    const before = Date.now()
    const result = decode(fg({ namespace: 'ns', model: 'm' }, { time }))
    expect(result).toMatchObject({ ok: true, event: { data: { namespace: 'ns', model: 'm' } } })
    if (result.ok) expect(Date.parse(result.event.time)).toBeGreaterThanOrEqual(before - 1)
  })

  it('keeps lower-case extension attributes (a Broker adds its own) and fills in a missing time', () => {
    const result = decode(
      fg({ namespace: 'ns', model: 'm' }, { knativearrivaltime: '2026-11-29T12:00:01Z', time: undefined }),
    )
    expect(result).toMatchObject({ ok: true, event: { id: 'r1', source: 'gw', data: { namespace: 'ns', model: 'm' } } })
    if (result.ok) expect(Number.isNaN(Date.parse(result.event.time))).toBe(false)
  })

  it('decodes ApiServerSource events with the object as data', () => {
    const obj = { apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'j', namespace: 'ns' } }
    const result = decode(encodeApiServerEvent('delete', obj, { source: 'https://k', subject: '/x', id: 'u.1.delete' }))
    expect(result).toMatchObject({ ok: true, event: { type: 'dev.knative.apiserver.resource.delete', data: obj } })
  })

  it('gives each backfill its own timer subject', () => {
    expect(subjectFor('ai.flexinfer.timer.fired', { namespace: 'ns', backfill: 'b', due: '' })).toBe(
      'flexinfer.events.timer.ns.b',
    )
  })

  it('publishes foreground requests on their per-model subject, background ones on the foreground subject', () => {
    const documented = catalog['ai.flexinfer.foreground.request'].subject
    expect(subjectFor('ai.flexinfer.foreground.request', { namespace: 'ns', model: 'm.v1' })).toBe(
      `${documented}.ns.m.v1`,
    )
    expect(
      subjectFor('ai.flexinfer.foreground.request', { namespace: 'ns', model: 'm', workloadClass: 'background' }),
    ).toBe(documented)
  })
})

describe('generated catalog', () => {
  it('events/schemas and the README table match the zod schemas (run npm run gen:events)', () => {
    for (const [name, text] of Object.entries(schemaFiles())) {
      expect(readFileSync(join(SCHEMA_DIR, name), 'utf8'), `${name} is stale: run npm run gen:events`).toBe(text)
    }
    const readme = readFileSync(README, 'utf8')
    expect(renderReadme(readme), 'events/README.md is stale: run npm run gen:events').toBe(readme)
  })

  it('the foreground schema pins the gateway contract', () => {
    const schema = JSON.parse(schemaFiles()['ai.flexinfer.foreground.request.json'] as string)
    expect(schema.required).toEqual(['namespace', 'model'])
    expect(schema.properties.workloadClass.enum).toEqual(['foreground', 'background'])
  })
})
