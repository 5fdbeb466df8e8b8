// CloudEvents distributed tracing from the gateway's active OpenTelemetry span (its request): a `CloudEvents Create`
// producer span whose context goes into the event as `traceparent`/`tracestate`. @opentelemetry/api is optional:
// without it (or without an active span) events carry no trace context.
import { createRequire } from 'node:module'
import { EVENT_TYPE } from './contract.js'

type Otel = typeof import('@opentelemetry/api')
let otel: Otel | null | undefined

function api(): Otel | null {
  if (otel === undefined) {
    try {
      otel = createRequire(import.meta.url)('@opentelemetry/api') as Otel
    } catch {
      otel = null
    }
  }
  return otel
}

export function traceContext(id: string, source: string): Record<string, string> {
  const o = api()
  if (!o) return {}
  const parent = o.trace.getSpanContext(o.context.active())
  if (!parent || !o.trace.isSpanContextValid(parent)) return {}
  const span = o.trace.getTracer('@flexinfer/gateway-emitter').startSpan(`CloudEvents Create ${EVENT_TYPE}`, {
    kind: o.SpanKind.PRODUCER,
    attributes: {
      'cloudevents.event_id': id,
      'cloudevents.event_source': source,
      'cloudevents.event_spec_version': '1.0',
      'cloudevents.event_type': EVENT_TYPE,
    },
  })
  span.end()
  // A non-recording span (no SDK in this process) carries its parent's context: the parent's trace goes on.
  const sc = span.spanContext()
  const traceparent = `00-${sc.traceId}-${sc.spanId}-0${sc.traceFlags & 1}`
  const tracestate = sc.traceState?.serialize()
  return tracestate ? { traceparent, tracestate } : { traceparent }
}
