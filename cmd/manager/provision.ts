// The deployed NATS topology in one step (`FUNCTION=provision`, the model-backfill-provision Job of deploy/base/): the
// streams, the KV buckets and the durable consumers of the functions an overlay runs over JetStream. Functions then
// start with NATS_PROVISION=false and only bind to it, so no function's NATS user may create or change a stream or
// a durable consumer (deploy/nats/auth.conf): only the `provision` user may, and only these. It also stores the repeating
// resync schedule (functions/lifecycle/resync.ts). Idempotent: run it again after an upgrade and streams and
// consumers are updated in place.
import { BUCKET_BACKFILLS, BUCKET_CLAIMS, BUCKET_MODEL_IDLE, STREAM_EVENTS } from '../../events/catalog.js'
import { ensureResyncSchedule } from '../../functions/lifecycle/resync.js'
import { FUNCTION_NAMES, loadFunction } from '../../functions/registry.js'
import { Bus } from '../../pkg/jetstream/bus.js'
import { acrossLeaderChange, isNotFound, PROVISION_DEADLINE_MS } from '../../pkg/jetstream/errors.js'
import { consumerName } from '../../pkg/jetstream/names.js'
import { streamConfigs } from '../../pkg/jetstream/streams.js'
import type { Logger } from '../../pkg/observability/log.js'
import { createBridge } from '../../pkg/transport/bridge.js'
import { ensureConsumers } from '../../pkg/transport/consumers.js'
import type { EventFunction, Settings } from '../../pkg/transport/function.js'
import { type Config, loadConfig, processSettings } from './config.js'

/** Durable consumers an older release made that nothing reads any more (they would hold messages forever). */
const OBSOLETE_CONSUMERS = [[STREAM_EVENTS, 'demand']] as const

/** Whose durable consumers the provision step can create: the functions and the knative overlay's bridge. */
export const CONSUMER_OWNERS = [...FUNCTION_NAMES, 'bridge'] as const

/** The keda overlay's default: every function pulls from its own consumers (the bridge is Knative's). */
export const DEFAULT_CONSUMER_OWNERS = FUNCTION_NAMES

/** The owner's function, its code loaded (only the owners provisioned). */
async function consumerOwner(name: string, settings: Settings): Promise<EventFunction> {
  const factory = await loadFunction(name)
  if (factory) return factory(settings)
  // Only the bridge's name, subscriptions and concurrency are read here; the sink is never called.
  if (name === 'bridge') return createBridge({ sink: 'http://127.0.0.1/' })
  throw new Error(`cannot provision consumers for "${name}": known owners are ${CONSUMER_OWNERS.join(', ')}`)
}

export interface ProvisionOptions {
  natsUrl: string
  /** Functions (and/or `bridge`) whose durable consumers to create; default DEFAULT_CONSUMER_OWNERS. */
  consumers?: readonly string[]
  log?: Logger
  /** Period of the resync schedule; default RESYNC_MS (config), else 30 s. */
  resyncMs?: number
  /**
   * Replicas of every stream, KV bucket and durable consumer (consumers inherit their stream's); default
   * NATS_REPLICAS, else 1. Existing ones are changed to it in place, so re-running provision scales a topology.
   */
  replicas?: number
  /** How long migrating a consumer's ack policy waits for its in-flight messages (default ~30 s). */
  migrationSettleMs?: number
  /** The configuration main.ts parsed; without it (tests) the environment is parsed here. */
  config?: Config
}

export interface Provisioned {
  replicas: number
  streams: string[]
  buckets: string[]
  consumers: string[]
}

export async function provision(opts: ProvisionOptions): Promise<Provisioned> {
  const config = opts.config ?? loadConfig(process.env)
  const { settings, connectWaitMs, natsCredentials } = processSettings(config)
  const owners = await Promise.all(
    (opts.consumers ?? DEFAULT_CONSUMER_OWNERS).map((name) => consumerOwner(name, settings)),
  )
  const replicas = opts.replicas ?? config.natsReplicas
  const bus = await Bus.connect(opts.natsUrl, 'model-backfill:provision', {
    replicas,
    connectWaitMs,
    credentials: natsCredentials,
    log: opts.log,
  })
  try {
    // Consumers of older releases: foreground requests moved from FLEXINFER_EVENTS to their own streams.
    for (const [stream, name] of OBSOLETE_CONSUMERS) {
      // Across a leader change like every other provision step; a delete repeated after its lost reply finds nothing.
      await acrossLeaderChange(
        `removing consumer ${name} on ${stream}`,
        () => bus.jsm.consumers.delete(stream, name),
        PROVISION_DEADLINE_MS,
      ).then(
        () => opts.log?.info({ stream, consumer: name }, 'removed a consumer an older release used'),
        (err) => {
          if (!isNotFound(err)) throw err
        },
      )
    }
    const consumers: string[] = []
    for (const fn of owners) {
      // An existing consumer with another ack policy (demand's: explicit → all) is migrated without losing events
      // (pkg/jetstream/consumer-migration.ts).
      await ensureConsumers({ bus, log: opts.log, settings }, fn, { migrationSettleMs: opts.migrationSettleMs })
      consumers.push(...fn.subscriptions.map((s) => `${s.stream}/${consumerName(fn.name, s.stream)}`))
    }
    // The repeating resync schedule (every RESYNC_MS), whichever overlay: stored from the start, so sweeps run even
    // before lifecycle has ever been scaled up (keda: its lifecycle-timers consumer; knative: the bridge's).
    await ensureResyncSchedule({ bus, log: opts.log }, opts.resyncMs ?? config.resyncMs)
    const done: Provisioned = {
      replicas,
      streams: streamConfigs.map((c) => c.name),
      buckets: [BUCKET_MODEL_IDLE, BUCKET_BACKFILLS, BUCKET_CLAIMS],
      consumers,
    }
    opts.log?.info(done, 'NATS topology provisioned')
    return done
  } finally {
    await bus.close()
  }
}
