// The durable consumers of an event function, one per (function, stream): their configuration (ack wait, a delivery
// limit just above the retry budget) and their provisioning, made by the provision step (or every local process)
// and awaited by a deployed one. pkg/transport/jetstream-adapter.ts pulls from them.
import { AckPolicy, DeliverPolicy } from '@nats-io/jetstream'
import { migrateAckPolicy, type Retried } from '../jetstream/consumer-migration.js'
import { acrossLeaderChange, isNotFound, PROVISION_DEADLINE_MS } from '../jetstream/errors.js'
import { consumerName } from '../jetstream/names.js'
import { awaitProvisioned } from '../jetstream/topology.js'
import type { Deps, EventFunction, Settings } from './function.js'

/**
 * The retry budget of a failing event, ~62 s by default: MAX_DELIVER deliveries, naked with a doubling backoff from
 * RETRY_BACKOFF_MS up to RETRY_BACKOFF_MAX_MS, then dead-lettered (Deps.settings overrides them: tests shorten it).
 */
export const DEFAULT_MAX_DELIVER = 8
export const DEFAULT_BACKOFF_MS = 250
export const DEFAULT_BACKOFF_MAX_MS = 30_000
/** The default budget (MAX_DELIVER unset). */
export const MAX_DELIVER = DEFAULT_MAX_DELIVER
/**
 * The server's delivery limit on every durable consumer, a little above MAX_DELIVER: an event that can never be
 * dead-lettered (the publish keeps failing) stops being redelivered; without it such poison messages cycled
 * forever and, enough of them, filled max_ack_pending and stopped the consumer.
 */
export const consumerMaxDeliver = (maxDeliver = DEFAULT_MAX_DELIVER) => maxDeliver + 3
/** The consumers' delivery limit with the default MAX_DELIVER. */
export const CONSUMER_MAX_DELIVER = consumerMaxDeliver()
export const ACK_WAIT_MS = 30_000
/** The delay before a failed event's next delivery, from the process's settings (RETRY_BACKOFF_MS, ..._MAX_MS). */
export const backoffMs = (settings: Settings | undefined, deliveries: number) =>
  Math.min(
    settings?.retryBackoffMaxMs ?? DEFAULT_BACKOFF_MAX_MS,
    (settings?.retryBackoffMs ?? DEFAULT_BACKOFF_MS) * 2 ** Math.min(deliveries, 7),
  )

export interface ConsumerOptions {
  /** ack_wait of the consumers ensureConsumers creates or updates (default 30 s). */
  ackWaitMs?: number
  /** How long a consumer migration waits for in-flight messages to be acked (pkg/jetstream/consumer-migration.ts). */
  migrationSettleMs?: number
}

/** Creates or updates the function's durable consumers (the provision step, and every process run locally). */
export async function ensureConsumers(
  deps: Pick<Deps, 'bus'> & { log?: Deps['log']; settings?: Settings },
  fn: EventFunction,
  opts: ConsumerOptions = {},
) {
  for (const sub of fn.subscriptions) {
    const durable = consumerName(fn.name, sub.stream)
    const config = {
      durable_name: durable,
      ack_policy: fn.ackAll ? AckPolicy.All : AckPolicy.Explicit,
      ack_wait: (opts.ackWaitMs ?? ACK_WAIT_MS) * 1_000_000,
      max_deliver: consumerMaxDeliver(deps.settings?.maxDeliver),
      max_ack_pending: fn.maxAckPending ?? Math.max(1000, fn.concurrency * 2),
      filter_subjects: sub.subjects,
    }
    // Each server call rides out a leader change (an election, a server rolling, a consumer moving after its stream
    // was scaled: pkg/jetstream/streams.ts ensureStreams) and is idempotent, so one whose reply was lost — it may have
    // taken effect all the same — is simply asked again (an add repeated with the same config answers the consumer it
    // made).
    const retried: Retried = (call) =>
      acrossLeaderChange(`provisioning consumer ${durable} on ${sub.stream}`, call, PROVISION_DEADLINE_MS)
    const info = () => retried(() => deps.bus.jsm.consumers.info(sub.stream, durable))
    let existing = await info().catch((err) => {
      if (isNotFound(err)) return undefined
      throw err
    })
    if (!existing) {
      const deliver_policy = sub.deliverNew ? DeliverPolicy.New : DeliverPolicy.All
      const created = await retried(() => deps.bus.jsm.consumers.add(sub.stream, { ...config, deliver_policy })).catch(
        (err) => {
          // Created meanwhile with another config (another process provisioning): brought to this one below.
          if (/consumer already exists/i.test(String(err?.message))) return undefined
          throw err
        },
      )
      if (created) continue
      existing = await info()
    }
    // The ack policy cannot change in place: the consumer is re-created where the old one stopped.
    if (existing.config.ack_policy !== config.ack_policy)
      await migrateAckPolicy(deps.bus.jsm, existing, config, {
        log: deps.log,
        settleMs: opts.migrationSettleMs,
        retried,
      })
    else await retried(() => deps.bus.jsm.consumers.update(sub.stream, durable, config))
  }
}

/** Deployed (NATS_PROVISION=false): the provision step made the consumers; wait for them, never create one. */
export async function bindConsumers(deps: Deps, fn: EventFunction) {
  for (const sub of fn.subscriptions) {
    const durable = consumerName(fn.name, sub.stream)
    await awaitProvisioned(
      `consumer ${durable} on ${sub.stream}`,
      () => deps.bus.jsm.consumers.info(sub.stream, durable),
      {
        ...deps.bus.topology,
        log: deps.log,
      },
    )
  }
}
