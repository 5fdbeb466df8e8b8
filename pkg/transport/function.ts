// What a function is, independent of how events reach it (JetStream pull consumer for KEDA and `npm start`,
// HTTP for Knative): a name, the events it takes, and a handler.

import type { InboundEvent } from '../../events/codec.js'
import type { GateDeployment } from '../core/gate.js'
import type { BackfillState } from '../core/state.js'
import type { Bus } from '../jetstream/bus.js'
import type { KubeApi, KubeClients } from '../kube/port.js'
import type { SharedCaches } from '../kube/shared-caches.js'
import type { Timers } from '../lib/timers.js'
import type { Logger } from '../observability/log.js'

export interface Subscription {
  stream: string
  subjects: string[]
  /** Start from new messages when the durable consumer is first created (high-rate, time-stamped events). */
  deliverNew?: boolean
}

/** What every function's handler is given: the process's connections and settings. */
export interface Deps {
  kube: KubeApi & KubeClients
  bus: Bus
  log: Logger
  now: () => number
  /** The timers handlers wait on (in step with `now`); unset: setTimeout. The simulation's run in virtual time. */
  timers?: Timers
  /** Namespaces this deployment manages; undefined: the whole cluster. */
  namespaces?: string[]
  /** The watched copies this process's functions share (admit's, read by cancel and lifecycle); without them, each asks the apiserver or watches for itself. */
  caches?: SharedCaches
  /** The runner's instance name (tests): its functions' durable consumers carry it (see pkg/transport/deps.ts). */
  instance?: string
  /**
   * Every backfill state by KV key, kept current from the bucket's republished changes by the mirror the metrics
   * exporter already holds in every runner process (pkg/transport/metrics.ts): lifecycle's sweep reads it instead of one
   * direct get per backfill.
   */
  backfillStates?: ReadonlyMap<string, BackfillState>
  /** The background gate admit injects into the Jobs of backfills that opt in (GATE_IMAGE, GATE_NATS_URL). */
  gate?: GateDeployment
  /** What the process was configured with (cmd/manager/config.ts reads it from the environment); unset: defaults. */
  settings?: Settings
}

/**
 * The settings the functions and the JetStream adapter read, as cmd/manager/config.ts parsed them from the environment
 * at start. Each one unset means its default (as a process started without that variable), so tests and tools that
 * build Deps by hand need none of them.
 */
export interface Settings {
  /** MAX_DELIVER: deliveries of a failing event before it is dead-lettered (default 8). */
  maxDeliver?: number
  /** RETRY_BACKOFF_MS, RETRY_BACKOFF_MAX_MS: the doubling delay before a failed event is redelivered. */
  retryBackoffMs?: number
  retryBackoffMaxMs?: number
  /** DEMAND_ACK_POLICY=all: demand's consumers ack in batches. */
  demandAckAll?: boolean
  /** CANCEL_DELETE_PODS (default true): cancel deletes the attempt's pods right after its Job. */
  cancelDeletePods?: boolean
  /** FAILSAFE_BLIND_MS: foreground demand unobservable this long and cancel's fail-safe engages. */
  failSafeBlindMs?: number
  /** INGRESS_READY_URL: the gateway ingress's /readyz; unset: no ingress is watched. */
  ingressReadyUrl?: string
  /** RESYNC_MS: lifecycle's sweep period (0: off). */
  resyncMs?: number
}

export interface EventFunction {
  name: string
  subscriptions: Subscription[]
  /** Events handled at once by one instance (a handler that released its place no longer counts). */
  concurrency: number
  /**
   * JetStream: events one instance may hold unacknowledged (its consumers' max_ack_pending); default twice
   * `concurrency`, at least 1,000. More than `concurrency` for a function whose handlers release their place early.
   */
  maxAckPending?: number
  /**
   * JetStream: its durable consumers ack in batches (AckAll, pkg/transport/ack-floor.ts) instead of one ack per event.
   * Only for functions whose handlers may finish out of order without harm; provision migrates existing consumers.
   */
  ackAll?: boolean
  /** Optional warm-up (caches, watches) before the first event and teardown after the last. */
  start?(deps: Deps): Promise<void>
  stop?(): Promise<void>
  /** Served over HTTP: why this instance cannot do its work now (its /readyz answers 503 with it), or undefined. */
  notReady?(): string | undefined
  /** Resolves when the event's effect is durable; rejects to have it redelivered. */
  handle(event: InboundEvent, deps: Deps, ctx?: HandleContext): Promise<void>
}

/** What a transport gives a handler besides its event. */
export interface HandleContext {
  /**
   * The part of this event that must not wait is done: its place among the function's `concurrency` goes to the next
   * event now, while this handler finishes (and only then is its event acknowledged). cancel calls it once its
   * DELETEs are answered, so a burst of cancels larger than its handlers never waits behind the bookkeeping of
   * earlier ones. Idempotent. What is released stays bounded by what the transport holds unacknowledged.
   */
  release(): void
}

/** The context of a handler holding one place: release() gives it back (`free`) once, however often it is called. */
export function holdPlace(free: () => void): HandleContext {
  let holding = true
  return {
    release: () => {
      if (!holding) return
      holding = false
      free()
    },
  }
}

/** Thrown for events that can never succeed (redelivery would not help): they go to the dead-letter stream. */
export class PermanentError extends Error {}
