// The foreground request's decode fast path: every gateway request is one, at up to ~100k/s on one demand
// instance. The usual well-formed request (as clients/ts and the cloudevents SDK write it) is checked by hand
// against exactly the rules of the zod schemas (events/codec.ts's envelope, events/catalog.ts's data) — no zod parse,
// no copy of the data object. Anything it does not accept returns undefined and goes through the schemas, which
// stay the one source of truth and say what is wrong: this only ever accepts what they accept, with the same value
// (test/unit/codec-fast-path.property.test.ts).
import { DNS_SUBDOMAIN } from '../../pkg/core/names.js'
import type { DecodeResult, Extensions, InboundEvent } from '../envelope.js'

const TYPE = 'ai.flexinfer.foreground.request'
/** catalog's `namespace`: a DNS label of at most 63 characters. */
const NAMESPACE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/

/** A foreground request decoded without zod, or undefined: let the schemas decide. Never throws on JSON values. */
export function fastForeground(raw: Record<string, unknown>): DecodeResult | undefined {
  const { specversion, id, source, type, time, subject, data } = raw
  if (type !== TYPE || specversion !== '1.0') return undefined
  if (typeof id !== 'string' || id.length === 0 || typeof source !== 'string' || source.length === 0) return undefined
  // The time is required here (the schema's default is "now"); only toISOString's form, the usual one.
  if (typeof time !== 'string' || !isIsoUtcMillis(time)) return undefined
  if (subject !== undefined && typeof subject !== 'string') return undefined
  if (raw.dataschema !== undefined && typeof raw.dataschema !== 'string') return undefined
  if (raw.datacontenttype !== undefined && typeof raw.datacontenttype !== 'string') return undefined
  if (!isForegroundData(data)) return undefined
  let extensions: Extensions | undefined
  for (const key in raw) {
    switch (key) {
      case 'specversion':
      case 'id':
      case 'source':
      case 'type':
      case 'time':
      case 'subject':
      case 'datacontenttype':
      case 'dataschema':
      case 'data':
      case 'data_base64':
        continue
    }
    if (!isExtensionName(key)) return undefined
    const value = raw[key]
    if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') {
      extensions ??= {}
      extensions[key] = value
    }
  }
  // The same shape as the schema path builds (events/codec.ts validate).
  const event = { type: TYPE, id, source, time, subject, data } as InboundEvent
  if (extensions) event.extensions = extensions
  return { ok: true, event }
}

/**
 * The data object exactly as the schema would output it: namespace and model (and workloadClass) valid, no other
 * key (the schema strips other keys: a copy, left to it).
 */
function isForegroundData(data: unknown): data is { namespace: string; model: string } {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return false
  const d = data as Record<string, unknown>
  for (const key in d) if (key !== 'namespace' && key !== 'model' && key !== 'workloadClass') return false
  const { namespace, model, workloadClass } = d
  if (workloadClass !== undefined && workloadClass !== 'foreground' && workloadClass !== 'background') return false
  return (
    typeof namespace === 'string' &&
    namespace.length > 0 &&
    namespace.length <= 63 &&
    NAMESPACE.test(namespace) &&
    typeof model === 'string' &&
    model.length > 0 &&
    model.length <= 253 &&
    DNS_SUBDOMAIN.test(model)
  )
}

/** Lower-case alphanumeric (codec's EXTENSION_NAME), without a regex. */
function isExtensionName(key: string): boolean {
  if (key.length === 0) return false
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i)
    if (!((c >= 48 && c <= 57) || (c >= 97 && c <= 122))) return false
  }
  return true
}

const digit = (s: string, i: number) => {
  const c = s.charCodeAt(i) - 48
  return c >= 0 && c <= 9 ? c : -1
}
/** Two digits at i, or -1. */
const two = (s: string, i: number) => {
  const a = digit(s, i)
  const b = digit(s, i + 1)
  return a < 0 || b < 0 ? -1 : a * 10 + b
}

/**
 * `YYYY-MM-DDTHH:MM:SS.sssZ` (Date#toISOString for years 0–9999) and a real calendar date: a subset of what
 * `z.iso.datetime({ offset: true })` accepts (its pattern checks the day of the month, Feb 29 in Gregorian leap
 * years only, hours < 24, minutes and seconds < 60).
 */
export function isIsoUtcMillis(s: string): boolean {
  if (s.length !== 24) return false
  if (s[4] !== '-' || s[7] !== '-' || s[10] !== 'T' || s[13] !== ':' || s[16] !== ':' || s[19] !== '.' || s[23] !== 'Z')
    return false
  const hi = two(s, 0)
  const lo = two(s, 2)
  const month = two(s, 5)
  const day = two(s, 8)
  const hour = two(s, 11)
  const minute = two(s, 14)
  const second = two(s, 17)
  if (hi < 0 || lo < 0 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23) return false
  if (minute < 0 || minute > 59 || second < 0 || second > 59) return false
  if (digit(s, 20) < 0 || digit(s, 21) < 0 || digit(s, 22) < 0) return false
  const year = hi * 100 + lo
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0)
  const days = month === 2 ? (leap ? 29 : 28) : month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31
  return day <= days
}
