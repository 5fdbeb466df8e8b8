// The transport-independent part of delivering one event to a function: handle it (in its span) and classify the
// outcome. Each transport maps the outcome to its own vocabulary (JetStream: ack / term / nak; HTTP: status codes)
// and both dead-letter through deps.bus.deadLetter, so functions never know how an event reached them.
import type { DecodeResult, InboundEvent } from '../../events/codec.js'
import { describeError } from '../observability/log.js'
import { eventSpans, inEventSpan } from '../observability/tracing.js'
import type { Deps } from './function.js'
import { type EventFunction, type HandleContext, PermanentError } from './function.js'

export type Outcome =
  /** Handled: its effect is durable. */
  | { kind: 'handled' }
  /** Could not be decoded or validated: never retry, dead-letter it. */
  | { kind: 'malformed'; reason: string }
  /** The handler said it can never succeed (PermanentError): never retry, dead-letter it. */
  | { kind: 'permanent'; event: InboundEvent; reason: string }
  /** Anything else: retry later (the transport decides how often). */
  | { kind: 'transient'; event: InboundEvent; reason: string; err: unknown }

const HANDLED: Outcome = Object.freeze({ kind: 'handled' })

/**
 * Runs the function's handler on a decoded event: in a `CloudEvents Process <type>` span, a child of the event's
 * traceparent, when tracing is on (pkg/observability/tracing.ts); otherwise (the usual case) directly, with no closure
 * per event — this runs for every foreground request. May throw or reject: failedOutcome() says what that means.
 */
export function handleEvent(fn: EventFunction, deps: Deps, event: InboundEvent, ctx?: HandleContext): Promise<void> {
  return eventSpans() ? inEventSpan(event, fn.name, () => fn.handle(event, deps, ctx)) : fn.handle(event, deps, ctx)
}

/** What a handler's failure means: never to be retried (PermanentError), or to be retried later. */
export function failedOutcome(event: InboundEvent, err: unknown): Outcome {
  const reason = `${event.type} ${event.id}: ${describeError(err)}`
  if (err instanceof PermanentError) return { kind: 'permanent', event, reason }
  return { kind: 'transient', event, reason, err }
}

/** Handles an already decoded (or rejected) event. Never throws. */
export async function processDecoded(
  fn: EventFunction,
  deps: Deps,
  decoded: DecodeResult,
  ctx?: HandleContext,
): Promise<Outcome> {
  if (!decoded.ok) return { kind: 'malformed', reason: decoded.reason }
  try {
    await handleEvent(fn, deps, decoded.event, ctx)
    return HANDLED
  } catch (err) {
    return failedOutcome(decoded.event, err)
  }
}
