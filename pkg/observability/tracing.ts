// Distributed tracing: a foreground request followed to the Job's DELETE and the status write.
//
// Events carry the trace in the CloudEvents distributed-tracing extension (`traceparent`, `tracestate`: W3C Trace
// Context). Spans follow the CloudEvents semantic conventions: `CloudEvents Create <type>` (PRODUCER) when an event
// is made inside a traced context — its context becomes the event's traceparent — and `CloudEvents Process <type>`
// (CONSUMER) around each handler, a child of the event's traceparent, with the cloudevents.* attributes. Whatever
// a handler does runs in its span's context: the events it publishes (encode() injects it) and the Kubernetes
// calls wrapped in traced() (cancel's DELETE, the status write) join the same trace.
//
// Off by default: nothing is set up and the hooks cost a boolean test. On when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set or OTEL_TRACES_EXPORTER=otlp (not when OTEL_TRACES_EXPORTER=none or
// OTEL_SDK_DISABLED=true): spans
// go to the OTLP/HTTP exporter (the standard OTEL_EXPORTER_OTLP_* variables configure it), batched; the sampler is
// parent-based, so a gateway that does not sample a request is not overruled here. Tests call startTracing() with an
// in-memory exporter.
import {
  type Attributes,
  context,
  createTraceState,
  ROOT_CONTEXT,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api'

/** CloudEvents semantic conventions (incubating in @opentelemetry/semantic-conventions: copied, as it advises). */
export const CE_ATTR = {
  id: 'cloudevents.event_id',
  source: 'cloudevents.event_source',
  specVersion: 'cloudevents.event_spec_version',
  type: 'cloudevents.event_type',
  subject: 'cloudevents.event_subject',
} as const

/** The CloudEvents extension attributes of distributed tracing. */
export interface TraceExtensions {
  traceparent: string
  tracestate?: string
}

/** What a span is made from: the event's envelope. */
export interface EventEnvelope {
  type: string
  id: string
  source: string
  subject?: string
  extensions?: Record<string, unknown>
}

const TRACER = 'model-backfill'
let enabled = false
let provider: { shutdown(): Promise<void> } | undefined
/** The SDK being loaded (startTracing). */
let starting: Promise<void> | undefined

/**
 * Whether the OpenTelemetry variables ask for spans (cmd/manager/config.ts reads them; the SDK reads the exporter's own,
 * OTEL_EXPORTER_OTLP_*, itself).
 */
export function tracingConfigured(env: Readonly<Record<string, string | undefined>>): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false
  // An exporter list, when given, decides (`none`: off even with an endpoint set).
  const exporters = env.OTEL_TRACES_EXPORTER?.split(',')
    .map((e) => e.trim())
    .filter(Boolean)
  if (exporters?.length) return exporters.includes('otlp')
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim())
}

export type { TracingOptions } from './tracing-sdk.js'

import type { TracingOptions } from './tracing-sdk.js'

/**
 * Sets up the tracer provider and the context manager for this process (once; later calls are ignored). The SDK
 * and the exporter are imported here, not at load: with tracing off a process never loads them (cold start, issue
 * 11). The entry point awaits it before serving, when its configuration turns tracing on.
 */
export function startTracing(opts: TracingOptions = {}): Promise<void> {
  starting ??= import('./tracing-sdk.js').then((sdk) => {
    provider = sdk.startProvider(opts)
    enabled = true
  })
  return starting
}

/** Exports what is pending and stops (a process about to exit). */
export async function stopTracing(): Promise<void> {
  await starting?.catch(() => {})
  const p = provider
  provider = undefined
  starting = undefined
  enabled = false
  await p?.shutdown()
}

/** Whether this process records spans (startTracing has set the SDK up). */
export function tracingEnabled(): boolean {
  return enabled
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/

/** A W3C traceparent as a remote span context; undefined when absent or malformed (it is then ignored). */
export function parseTraceparent(traceparent: unknown, tracestate?: unknown): SpanContext | undefined {
  if (typeof traceparent !== 'string') return undefined
  const m = TRACEPARENT.exec(traceparent.trim())
  if (!m || m[1] === 'ff' || (m[1] === '00' && m[5])) return undefined
  const [traceId, spanId] = [m[2] as string, m[3] as string]
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined
  let traceState: SpanContext['traceState']
  if (typeof tracestate === 'string' && tracestate.length <= 512) {
    try {
      traceState = createTraceState(tracestate)
    } catch {
      traceState = undefined
    }
  }
  return { traceId, spanId, traceFlags: Number.parseInt(m[4] as string, 16) & 1, isRemote: true, traceState }
}

export function formatTraceparent(sc: SpanContext): TraceExtensions {
  const traceparent = `00-${sc.traceId}-${sc.spanId}-0${sc.traceFlags & 1}`
  const tracestate = sc.traceState?.serialize()
  return tracestate ? { traceparent, tracestate } : { traceparent }
}

const ceAttributes = (e: EventEnvelope): Attributes => ({
  [CE_ATTR.id]: e.id,
  [CE_ATTR.source]: e.source,
  [CE_ATTR.specVersion]: '1.0',
  [CE_ATTR.type]: e.type,
  ...(e.subject === undefined ? {} : { [CE_ATTR.subject]: e.subject }),
})

/**
 * The trace extensions for an event being made now: inside a traced context (a handler's span, or a gateway's
 * request span), a `CloudEvents Create <type>` span is recorded and its context returned; outside one, nothing
 * (no new trace per event).
 */
export function eventTraceContext(e: EventEnvelope): TraceExtensions | undefined {
  const parent = trace.getSpanContext(context.active())
  if (!parent || !trace.isSpanContextValid(parent)) return undefined
  const span = trace.getTracer(TRACER).startSpan(`CloudEvents Create ${e.type}`, {
    kind: SpanKind.PRODUCER,
    attributes: ceAttributes(e),
  })
  span.end()
  // A non-recording span (no SDK in this process) carries its parent's context: the parent's trace goes on.
  return formatTraceparent(span.spanContext())
}

/** Whether an event's handler runs in a span (or waits for the SDK still loading): false, inEventSpan just calls it. */
export function eventSpans(): boolean {
  return enabled || starting !== undefined
}

/**
 * Runs a handler in a `CloudEvents Process <type>` span, a child of the event's traceparent (a new trace when it
 * has none). Errors mark the span and are rethrown. Tracing off: just runs it.
 */
export function inEventSpan<T>(event: EventEnvelope, fn: string, handle: () => Promise<T>): Promise<T> {
  if (!tracingEnabled()) {
    // Started and still loading: this event waits for the SDK (once per process).
    if (starting) return starting.then(() => (enabled ? inEventSpan(event, fn, handle) : handle()), handle)
    return handle()
  }
  const remote = parseTraceparent(event.extensions?.traceparent, event.extensions?.tracestate)
  const parent = remote ? trace.setSpanContext(ROOT_CONTEXT, remote) : ROOT_CONTEXT
  const span = trace
    .getTracer(TRACER)
    .startSpan(
      `CloudEvents Process ${event.type}`,
      { kind: SpanKind.CONSUMER, attributes: { ...ceAttributes(event), 'flexinfer.function': fn } },
      parent,
    )
  return context.with(trace.setSpan(parent, span), () => settle(span, handle))
}

/** Runs `work` in a child span of the active one (a Kubernetes call, the status write). Tracing off: just runs it. */
export function traced<T>(name: string, attributes: Attributes, work: () => Promise<T>): Promise<T> {
  if (!enabled) return work()
  const span = trace.getTracer(TRACER).startSpan(name, { kind: SpanKind.CLIENT, attributes })
  return context.with(trace.setSpan(context.active(), span), () => settle(span, work))
}

async function settle<T>(span: ReturnType<ReturnType<typeof trace.getTracer>['startSpan']>, work: () => Promise<T>) {
  try {
    return await work()
  } catch (err) {
    span.recordException(err instanceof Error ? err : String(err))
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) })
    throw err
  } finally {
    span.end()
  }
}
