// What a function is, independent of how events reach it (JetStream pull consumer for KEDA and `npm start`,
// HTTP for Knative): a name, the events it takes, and a handler.
import type { InboundEvent } from '../events/codec.js'
import type { Deps } from './reconcile.js'

export interface Subscription {
  stream: string
  subjects: string[]
  /** Start from new messages when the durable consumer is first created (high-rate, time-stamped events). */
  deliverNew?: boolean
}

export interface EventFunction {
  name: string
  subscriptions: Subscription[]
  /** Events handled at once by one instance. */
  concurrency: number
  /**
   * JetStream: its durable consumers ack in batches (AckAll, runtime/ack-floor.ts) instead of one ack per event.
   * Only for functions whose handlers may finish out of order without harm; provision migrates existing consumers.
   */
  ackAll?: boolean
  /** Optional warm-up (caches, watches) before the first event and teardown after the last. */
  start?(deps: Deps): Promise<void>
  stop?(): Promise<void>
  /** Resolves when the event's effect is durable; rejects to have it redelivered. */
  handle(event: InboundEvent, deps: Deps): Promise<void>
}

/** Thrown for events that can never succeed (redelivery would not help): they go to the dead-letter stream. */
export class PermanentError extends Error {}

/** Durable consumer name of a function on a stream (KEDA's ScaledObjects name these). */
export const consumerName = (fn: string, stream: string) =>
  stream === 'FLEXINFER_EVENTS' ? fn : `${fn}-${stream.replace(/^FLEXINFER_/, '').toLowerCase()}`
