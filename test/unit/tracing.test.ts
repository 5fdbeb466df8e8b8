// CloudEvents distributed tracing without servers: decode keeps the extension attributes (traceparent/tracestate
// above all), the bridge forwards them unchanged, encode() inside a traced context records a `CloudEvents Create`
// span and carries its context, and a handler runs in a `CloudEvents Process` span that is the child of the event's
// traceparent, with the CloudEvents semantic-convention attributes. (One trace across the real servers, from a
// gateway's request to the Job's DELETE: test/integration/transport/tracing.test.ts.)
import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api'
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace'
import { beforeAll, describe, expect, it } from 'vitest'
import { decode, encode } from '../../events/codec.js'
import {
  CE_ATTR,
  formatTraceparent,
  inEventSpan,
  parseTraceparent,
  startTracing,
  tracingConfigured,
} from '../../pkg/observability/tracing.js'
import { toStructured } from '../../pkg/transport/bridge.js'

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736'
const PARENT = `00-${TRACE_ID}-00f067aa0ba902b7-01`
const exporter = new InMemorySpanExporter()

const cancel = (extra: Record<string, unknown>) =>
  JSON.stringify({
    specversion: '1.0',
    id: 'c-1',
    source: 'test',
    type: 'ai.flexinfer.backfill.cancel',
    time: '2026-01-01T00:00:00Z',
    datacontenttype: 'application/json',
    data: {
      namespace: 'ns',
      backfill: 'b',
      jobName: 'b-1-abc',
      reason: 'ForegroundDemand',
      at: '2026-01-01T00:00:00Z',
    },
    ...extra,
  })

describe('without tracing set up', () => {
  it('decode keeps primitive extension attributes, drops other values, and the bridge forwards them', () => {
    const decoded = decode(cancel({ traceparent: PARENT, tracestate: 'vendor=x', partitionkey: 7, nested: { a: 1 } }))
    expect(decoded.ok).toBe(true)
    if (!decoded.ok) return
    expect(decoded.event.extensions).toEqual({ traceparent: PARENT, tracestate: 'vendor=x', partitionkey: 7 })
    const forwarded = decode(toStructured(decoded.event))
    expect(forwarded.ok && forwarded.event.extensions).toEqual(decoded.event.extensions)
    // An event without extensions has none (nothing added on the hot path).
    const plain = decode(cancel({}))
    expect(plain.ok && 'extensions' in plain.event).toBe(false)
  })

  it('encode outside a traced context adds no traceparent; given extensions are written as they are', () => {
    const data = { namespace: 'ns', backfill: 'b' }
    expect(JSON.parse(encode('ai.flexinfer.backfill.admit', data))).not.toHaveProperty('traceparent')
    const body = JSON.parse(encode('ai.flexinfer.backfill.admit', data, { extensions: { traceparent: PARENT } }))
    expect(body.traceparent).toBe(PARENT)
  })

  it('parses W3C traceparents strictly (a malformed one is ignored, never fatal)', () => {
    expect(parseTraceparent(PARENT, 'a=b')).toMatchObject({
      traceId: TRACE_ID,
      spanId: '00f067aa0ba902b7',
      traceFlags: 1,
      isRemote: true,
    })
    expect(formatTraceparent(parseTraceparent(PARENT, 'a=b') as never)).toEqual({
      traceparent: PARENT,
      tracestate: 'a=b',
    })
    for (const bad of [
      undefined,
      42,
      'garbage',
      `ff-${TRACE_ID}-00f067aa0ba902b7-01`,
      `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`,
      `00-${TRACE_ID}-${'0'.repeat(16)}-01`,
      `00-${TRACE_ID.toUpperCase()}-00f067aa0ba902b7-01`,
    ])
      expect(parseTraceparent(bad)).toBeUndefined()
  })

  it('is off unless an OTLP endpoint or exporter is configured', () => {
    expect(tracingConfigured({})).toBe(false)
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' })).toBe(true)
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' })).toBe(true)
    expect(tracingConfigured({ OTEL_TRACES_EXPORTER: 'otlp' })).toBe(true)
    expect(tracingConfigured({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' })).toBe(false)
    expect(
      tracingConfigured({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }),
    ).toBe(false)
  })
})

describe('with tracing set up (in-memory exporter)', () => {
  beforeAll(() => startTracing({ exporter, simple: true }))

  it('a handler runs in a CloudEvents Process span, the child of the event traceparent; what it publishes is its child', async () => {
    exporter.reset()
    const decoded = decode(cancel({ traceparent: PARENT }))
    if (!decoded.ok) throw new Error(decoded.reason)
    let published = ''
    await inEventSpan(decoded.event, 'cancel', async () => {
      await new Promise((r) => setTimeout(r, 5)) // the context survives awaits
      published = encode('ai.flexinfer.backfill.admit', { namespace: 'ns', backfill: 'b' }, { id: 'a-1' })
    })
    const spans = exporter.getFinishedSpans()
    const process = spans.find((s) => s.name === 'CloudEvents Process ai.flexinfer.backfill.cancel')
    const create = spans.find((s) => s.name === 'CloudEvents Create ai.flexinfer.backfill.admit')
    expect(process?.kind).toBe(SpanKind.CONSUMER)
    expect(process?.spanContext().traceId).toBe(TRACE_ID)
    expect(process?.parentSpanContext?.spanId).toBe('00f067aa0ba902b7')
    expect(process?.attributes).toMatchObject({
      [CE_ATTR.id]: 'c-1',
      [CE_ATTR.type]: 'ai.flexinfer.backfill.cancel',
      [CE_ATTR.source]: 'test',
      [CE_ATTR.specVersion]: '1.0',
      'flexinfer.function': 'cancel',
    })
    expect(create?.kind).toBe(SpanKind.PRODUCER)
    expect(create?.parentSpanContext?.spanId).toBe(process?.spanContext().spanId)
    expect(create?.attributes[CE_ATTR.id]).toBe('a-1')
    expect(JSON.parse(published).traceparent).toBe(formatTraceparent(create?.spanContext() as never).traceparent)
  })

  it('an event without a traceparent starts a trace; a failing handler marks its span and still throws', async () => {
    exporter.reset()
    const decoded = decode(cancel({}))
    if (!decoded.ok) throw new Error(decoded.reason)
    await expect(
      inEventSpan(decoded.event, 'cancel', async () => {
        throw new Error('apiserver down')
      }),
    ).rejects.toThrow('apiserver down')
    const [span] = exporter.getFinishedSpans()
    expect(span?.parentSpanContext).toBeUndefined()
    expect(span?.status).toMatchObject({ code: SpanStatusCode.ERROR, message: 'apiserver down' })
    // Outside any span again: encode adds nothing.
    expect(trace.getActiveSpan()).toBeUndefined()
    expect(JSON.parse(encode('ai.flexinfer.backfill.admit', { namespace: 'ns', backfill: 'b' }))).not.toHaveProperty(
      'traceparent',
    )
  })
})
