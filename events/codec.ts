// CloudEvents 1.0 in structured JSON mode over NATS, through the cloudevents SDK: it validates the envelope
// (specversion, id, source, type), the catalog's zod schema validates the data.
import { randomUUID } from 'node:crypto'
import { CloudEvent } from 'cloudevents'
import { APISERVER_TYPES, catalog, type EventData, type EventType, isCatalogType, SOURCE } from './catalog.js'

export type ApiServerType = (typeof APISERVER_TYPES)[number]

/** A decoded, validated event. ApiServerSource events carry the Kubernetes object as data. */
export type InboundEvent =
  | {
      [T in EventType]: { type: T; id: string; source: string; time: string; subject?: string; data: EventData<T> }
    }[EventType]
  | { type: ApiServerType; id: string; source: string; time: string; subject?: string; data: KubeObject }

export interface KubeObject {
  apiVersion?: string
  kind?: string
  metadata: { name: string; namespace?: string; [key: string]: unknown }
  [key: string]: unknown
}

export type DecodeResult = { ok: true; event: InboundEvent } | { ok: false; reason: string }

export function encode<T extends EventType>(
  type: T,
  data: EventData<T>,
  options: { time?: string; id?: string; source?: string } = {},
): string {
  const event = new CloudEvent({
    specversion: '1.0',
    id: options.id ?? randomUUID(),
    source: options.source ?? SOURCE,
    type,
    time: options.time ?? new Date().toISOString(),
    datacontenttype: 'application/json',
    data,
  })
  return JSON.stringify(event)
}

const isApiServerType = (type: string): type is ApiServerType => (APISERVER_TYPES as readonly string[]).includes(type)

/** Accepts an already-parsed structured event (from NATS or the HTTP binding) and validates it. */
export function validate(raw: unknown): DecodeResult {
  // The SDK fills in a missing id and time; on the wire they are required (time: we need the request time).
  const envelope = raw as Record<string, unknown>
  const missing = ['specversion', 'id', 'source', 'type'].filter((k) => typeof envelope[k] !== 'string' || !envelope[k])
  if (missing.length) return { ok: false, reason: `invalid CloudEvent envelope: missing ${missing.join(', ')}` }
  let event: CloudEvent<unknown>
  try {
    event = new CloudEvent(raw as Record<string, unknown>)
  } catch (err) {
    return { ok: false, reason: `invalid CloudEvent envelope: ${describe(err)}` }
  }
  const base = {
    id: event.id,
    source: event.source,
    time: event.time ?? new Date().toISOString(),
    subject: event.subject,
  }
  let data: unknown = event.data
  if (typeof data === 'string' && event.datacontenttype?.includes('json')) {
    try {
      data = JSON.parse(data)
    } catch {
      return { ok: false, reason: `event ${event.type} ${event.id}: data is not valid JSON` }
    }
  }
  if (isCatalogType(event.type)) {
    const parsed = catalog[event.type].data.safeParse(data)
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => `${i.path.join('.') || 'data'}: ${i.message}`).join('; ')
      return { ok: false, reason: `event ${event.type} ${event.id}: invalid data: ${issues}` }
    }
    return { ok: true, event: { ...base, type: event.type, data: parsed.data } as InboundEvent }
  }
  if (isApiServerType(event.type)) {
    const obj = data as KubeObject | undefined
    if (!obj || typeof obj !== 'object' || typeof obj.metadata?.name !== 'string') {
      return { ok: false, reason: `event ${event.type} ${event.id}: data is not a Kubernetes object` }
    }
    return { ok: true, event: { ...base, type: event.type, data: obj } }
  }
  return { ok: false, reason: `unknown event type "${event.type}"` }
}

/** Decodes structured-mode bytes. Never throws: a malformed event is a result, not a crash. */
export function decode(bytes: Uint8Array | string): DecodeResult {
  const text = typeof bytes === 'string' ? bytes : Buffer.from(bytes).toString('utf8')
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (err) {
    return { ok: false, reason: `not JSON: ${describe(err)}` }
  }
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return { ok: false, reason: 'not a JSON object' }
  return validate(raw)
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
