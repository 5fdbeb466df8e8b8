// CloudEvents 1.0 in structured JSON mode over NATS. Outgoing events are built by the cloudevents SDK; incoming
// ones are checked by a zod schema of the 1.0 envelope (below) and the catalog's zod schema of their data.
import { randomUUID } from 'node:crypto'
import { CloudEvent } from 'cloudevents'
import { z } from 'zod'
import { eventTraceContext } from '../pkg/observability/tracing.js'
import { APISERVER_TYPES, catalog, type EventData, type EventType, isCatalogType, SOURCE } from './catalog.js'
import { fastForeground } from './fast-decode/foreground.js'

export type { ApiServerType, DecodeResult, Extensions, InboundEvent, KubeObject } from './envelope.js'

import type { ApiServerType, DecodeResult, Extensions, InboundEvent, KubeObject } from './envelope.js'

/**
 * A structured-mode event. Made inside a traced context (a handler's span, a gateway's request span), it carries
 * that trace in the distributed-tracing extension (pkg/observability/tracing.ts); `extensions` given: exactly those.
 */
export function encode<T extends EventType>(
  type: T,
  data: EventData<T>,
  options: { time?: string; id?: string; source?: string; extensions?: Extensions } = {},
): string {
  const id = options.id ?? randomUUID()
  const source = options.source ?? SOURCE
  const extensions = options.extensions ?? eventTraceContext({ type, id, source })
  const event = new CloudEvent({
    specversion: '1.0',
    id,
    source,
    type,
    time: options.time ?? new Date().toISOString(),
    datacontenttype: 'application/json',
    data,
    ...extensions,
  })
  return JSON.stringify(event)
}

const isApiServerType = (type: string): type is ApiServerType => (APISERVER_TYPES as readonly string[]).includes(type)

/**
 * The CloudEvents 1.0 envelope: specversion, id, source and type required; time RFC 3339; extension attributes
 * lower-case alphanumeric. Checked with zod instead of constructing the SDK's CloudEvent, which copies, freezes and
 * validates again with ajv: work the foreground hot path pays on every request for nothing it needs.
 */
export const Envelope = z.looseObject({
  specversion: z.literal('1.0'),
  id: z.string().min(1),
  source: z.string().min(1),
  type: z.string().min(1),
  time: z.iso.datetime({ offset: true }).optional(),
  subject: z.string().optional(),
  datacontenttype: z.string().optional(),
  dataschema: z.string().optional(),
})
const CONTEXT_ATTRIBUTES = new Set([...Object.keys(Envelope.shape), 'data', 'data_base64'])
const TIME = Envelope.shape.time
const FOREGROUND = 'ai.flexinfer.foreground.request'
const optionalString = (v: unknown) => v === undefined || typeof v === 'string'

/**
 * The usual well-formed envelope, checked without zod's copy of the whole event (the hot path: ~100k events/s on
 * one demand instance). Only ever accepts what Envelope accepts (the same rules, the time by Envelope's own
 * schema); anything else goes through Envelope, which also says what is wrong.
 */
function plainEnvelope(e: Record<string, unknown>): e is z.infer<typeof Envelope> {
  return (
    e.specversion === '1.0' &&
    typeof e.id === 'string' &&
    e.id.length > 0 &&
    typeof e.source === 'string' &&
    e.source.length > 0 &&
    typeof e.type === 'string' &&
    e.type.length > 0 &&
    (e.time === undefined || (typeof e.time === 'string' && TIME.safeParse(e.time).success)) &&
    optionalString(e.subject) &&
    optionalString(e.datacontenttype) &&
    optionalString(e.dataschema)
  )
}
const EXTENSION_NAME = /^[a-z0-9]+$/
const REQUIRED = ['specversion', 'id', 'source', 'type']

/** Accepts an already-parsed structured event (from NATS or the HTTP binding) and validates it. */
export function validate(raw: unknown): DecodeResult {
  // The usual foreground request without zod (events/fast-decode); everything else, and every error, by the schemas.
  const fast = raw && typeof raw === 'object' ? fastForeground(raw as Record<string, unknown>) : undefined
  return fast ?? validateBySchema(raw)
}

/** validate() by the zod schemas alone (the reference the fast path is tested against). */
export function validateBySchema(raw: unknown): DecodeResult {
  // On the wire id and time matter (time: we need the request time); say plainly which required one is missing.
  const given = raw as Record<string, unknown>
  if (!(given.specversion && given.id && given.source && given.type)) {
    const missing = REQUIRED.filter((k) => typeof given[k] !== 'string' || !given[k])
    if (missing.length) return { ok: false, reason: `invalid CloudEvent envelope: missing ${missing.join(', ')}` }
  }
  let event: z.infer<typeof Envelope>
  if (plainEnvelope(given)) event = given
  else {
    // A foreground request whose time is unreadable still says which model is busy, and demand measures the window
    // from the request's store time, not from it: dead-lettered, it would leave a backfill running under that
    // traffic. Its time is read as absent (the request's own time, now, when there is no store time).
    const unreadableTime = given.type === FOREGROUND && given.time !== undefined && !TIME.safeParse(given.time).success
    const checked = Envelope.safeParse(unreadableTime ? { ...given, time: undefined } : raw)
    if (!checked.success) {
      const issues = checked.error.issues.map((i) => `${i.path.join('.') || 'envelope'}: ${i.message}`).join('; ')
      return { ok: false, reason: `invalid CloudEvent envelope: ${issues}` }
    }
    event = checked.data
  }
  let extensions: Extensions | undefined
  for (const key in event) {
    if (CONTEXT_ATTRIBUTES.has(key)) continue
    if (!EXTENSION_NAME.test(key))
      return {
        ok: false,
        reason: `invalid CloudEvent envelope: extension attribute "${key}" is not lower-case alphanumeric`,
      }
    // Kept (traceparent/tracestate above all) so they travel on with the event; values of no CloudEvents type
    // (objects, arrays, null) are left out.
    const value = event[key]
    if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') {
      extensions ??= {}
      extensions[key] = value
    }
  }
  const time = event.time ?? new Date().toISOString()
  let data: unknown = event.data
  if (typeof data === 'string' && event.datacontenttype?.includes('json')) {
    try {
      data = JSON.parse(data)
    } catch {
      return { ok: false, reason: `event ${event.type} ${event.id}: data is not valid JSON` }
    }
  }
  // Own keys only: `type: "constructor"` is `in` the catalog object (its prototype) and crashed the lookup below.
  if (Object.hasOwn(catalog, event.type) && isCatalogType(event.type)) {
    const parsed = catalog[event.type].data.safeParse(data)
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => `${i.path.join('.') || 'data'}: ${i.message}`).join('; ')
      return { ok: false, reason: `event ${event.type} ${event.id}: invalid data: ${issues}` }
    }
    // One object of one shape per event (no spread of a base object: this runs for every foreground request).
    const inbound = {
      type: event.type,
      id: event.id,
      source: event.source,
      time,
      subject: event.subject,
      data: parsed.data,
    }
    if (extensions) (inbound as { extensions?: Extensions }).extensions = extensions
    return { ok: true, event: inbound as InboundEvent }
  }
  if (isApiServerType(event.type)) {
    const obj = data as KubeObject | undefined
    if (!obj || typeof obj !== 'object' || typeof obj.metadata?.name !== 'string') {
      return { ok: false, reason: `event ${event.type} ${event.id}: data is not a Kubernetes object` }
    }
    const inbound: InboundEvent = {
      type: event.type,
      id: event.id,
      source: event.source,
      time,
      subject: event.subject,
      data: obj,
    }
    if (extensions) inbound.extensions = extensions
    return { ok: true, event: inbound }
  }
  return { ok: false, reason: `unknown event type "${event.type}"` }
}

/** Decodes structured-mode bytes. Never throws: a malformed event is a result, not a crash. */
export function decode(bytes: Uint8Array | string): DecodeResult {
  // A view of the message's bytes, not a copy (Buffer.from(uint8Array) would copy every event); nats.js already
  // hands over a Buffer (a view of its read buffer), which needs no second view.
  const text =
    typeof bytes === 'string'
      ? bytes
      : Buffer.isBuffer(bytes)
        ? bytes.toString('utf8')
        : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8')
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (err) {
    return { ok: false, reason: `not JSON: ${describe(err)}` }
  }
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return { ok: false, reason: 'not a JSON object' }
  try {
    return validate(raw)
  } catch (err) {
    // Hostile shapes (e.g. nesting deep enough to overflow the stack) are a malformed event, never a crash.
    return { ok: false, reason: `invalid CloudEvent: ${describe(err)}` }
  }
}

function describe(err: unknown): string {
  if (err && typeof err === 'object' && 'errors' in err && Array.isArray(err.errors) && err.errors.length) {
    return err.errors
      .map((e: { instancePath?: string; message?: string }) => `${e.instancePath ?? ''} ${e.message ?? ''}`.trim())
      .join('; ')
  }
  return err instanceof Error ? err.message : String(err)
}

/** An ApiServerSource-shaped event (Resource mode), as Knative would deliver it; the local watcher emits these. */
export function encodeApiServerEvent(
  verb: 'add' | 'update' | 'delete',
  obj: KubeObject,
  options: { source: string; subject: string; id: string },
): string {
  const event = new CloudEvent({
    specversion: '1.0',
    id: options.id,
    source: options.source,
    subject: options.subject,
    type: `dev.knative.apiserver.resource.${verb}`,
    time: new Date().toISOString(),
    datacontenttype: 'application/json',
    data: obj,
  })
  return JSON.stringify(event)
}
