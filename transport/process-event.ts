// The transport-independent part of delivering one event to a function: decode/validate, handle, and classify the
// outcome. Each transport maps the outcome to its own vocabulary (JetStream: ack / term / nak; HTTP: status codes)
// and both dead-letter through deps.bus.deadLetter, so functions never know how an event reached them.
import { type DecodeResult, decode, type InboundEvent } from '../events/codec.js'
import { describeError } from '../observability/log.js'
import { inEventSpan } from '../observability/tracing.js'
import type { Deps } from './function.js'
import { type EventFunction, type HandleContext, PermanentError } from './function.js'

export type Outcome =
  /** Handled: its effect is durable. */
  | { kind: 'handled'; event: InboundEvent }
  /** Could not be decoded or validated: never retry, dead-letter it. */
  | { kind: 'malformed'; reason: string }
  /** The handler said it can never succeed (PermanentError): never retry, dead-letter it. */
  | { kind: 'permanent'; event: InboundEvent; reason: string }
  /** Anything else: retry later (the transport decides how often). */
  | { kind: 'transient'; event: InboundEvent; reason: string; err: unknown }

/** Handles an already decoded (or rejected) event. Never throws. */
export async function processDecoded(
  fn: EventFunction,
  deps: Deps,
  decoded: DecodeResult,
  ctx?: HandleContext,
): Promise<Outcome> {
  if (!decoded.ok) return { kind: 'malformed', reason: decoded.reason }
  const event = decoded.event
  try {
    // Tracing on: in a `CloudEvents Process <type>` span, a child of the event's traceparent (observability/tracing.ts).
    await inEventSpan(event, fn.name, () => fn.handle(event, deps, ctx))
    return { kind: 'handled', event }
  } catch (err) {
    const reason = `${event.type} ${event.id}: ${describeError(err)}`
    if (err instanceof PermanentError) return { kind: 'permanent', event, reason }
    return { kind: 'transient', event, reason, err }
  }
}

/** Decodes structured-mode bytes (NATS) and handles the event. Never throws. */
export function processEvent(
  fn: EventFunction,
  deps: Deps,
  bytes: Uint8Array | string,
  storedAt?: number,
  ctx?: HandleContext,
): Promise<Outcome> {
  const decoded = decode(bytes)
  if (decoded.ok && storedAt !== undefined) decoded.event.storedAt = storedAt
  return processDecoded(fn, deps, decoded, ctx)
}
