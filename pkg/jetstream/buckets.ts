// The KV buckets: per-model idle state, per-backfill attempt state and the exclusive claims. Their configuration,
// creating them (or bringing an existing one to it), and how every client opens them: read through the leader.
import { type JetStreamManager, jetstream } from '@nats-io/jetstream'
import { type KV, Kvm } from '@nats-io/kv'
import type { NatsConnection } from '@nats-io/transport-node'
import { BUCKET_BACKFILLS, BUCKET_CLAIMS, BUCKET_MODEL_IDLE } from '../../events/catalog.js'
import { describeError, type Logger } from '../observability/log.js'
import { acrossLeaderChange, PROVISION_DEADLINE_MS } from './errors.js'
import { republishPrefix } from './kv-mirror.js'
import { awaitReplicas, ns } from './streams.js'

/** Idle state entries expire this long after their model's last write (bounds the bucket; see README Limits). */
export const IDLE_STATE_TTL_MS = 30 * 24 * 3_600_000

export interface Buckets {
  idle: KV
  backfills: KV
  claims: KV
}

/**
 * The buckets functions follow (the metrics exporter: backfills; demand: claims) republish every change to
 * flexinfer.kv.<bucket>.<key>: functions subscribe to that instead of creating watch consumers (kv-mirror.ts).
 */
function republishOf(bucket: string) {
  return { src: `$KV.${bucket}.>`, dest: `${republishPrefix(bucket)}>` }
}

export const bucketConfigs = [
  {
    name: BUCKET_MODEL_IDLE,
    history: 1,
    ttl: IDLE_STATE_TTL_MS,
    description: 'Per-model foreground idle state (demand function)',
  },
  {
    name: BUCKET_BACKFILLS,
    history: 5,
    description: 'Per-backfill attempt state, written by CAS',
    republish: republishOf(BUCKET_BACKFILLS),
  },
  {
    name: BUCKET_CLAIMS,
    history: 1,
    description: 'Exclusive model/node claims of active attempts',
    republish: republishOf(BUCKET_CLAIMS),
    // An admission takes its model and node keys with one atomic batch (pkg/admission/claims.ts).
    atomic: true,
  },
] as const

/**
 * Safety reads never use direct gets. With `allow_direct` any replica of a bucket answers `kv.get`, and a follower
 * may not have applied the newest write yet: admit could read an idle state older than demand's last write, and
 * demand a claims entry older than admit's claim, each missing the other (a Job inside an idle window). A plain
 * STREAM.MSG.GET is answered by the stream leader, which acknowledged every write it knows of, so a read that starts
 * after a write's PubAck sees it. So the buckets are created and kept without allow_direct, and every client opens
 * them with allow_direct false (a bucket someone changed by hand still reads through its leader).
 */
export const LEADER_READS = { allow_direct: false } as const

/** The KV buckets' streams that take atomic batches (Kvm has no option for it: set when the stream is created). */
const ATOMIC_STREAMS = new Set(bucketConfigs.filter((c) => 'atomic' in c && c.atomic).map((c) => `KV_${c.name}`))

/**
 * A JetStream client whose manager creates the buckets' streams with allow_atomic where ATOMIC_STREAMS says: a
 * stream created so needs no update, and an update can be refused where a create is not (a cluster whose reservations
 * exceed a server's max_file_store answers every update "insufficient storage resources available").
 */
function creatingAtomic(nc: NatsConnection) {
  const js = jetstream(nc)
  const manager = js.jetstreamManager.bind(js)
  js.jetstreamManager = async (checkAPI?: boolean) => {
    const jsm = await manager(checkAPI)
    const add = jsm.streams.add.bind(jsm.streams)
    jsm.streams.add = (config) => add(ATOMIC_STREAMS.has(config.name) ? { ...config, allow_atomic: true } : config)
    return jsm
  }
  return js
}

export async function ensureBuckets(
  nc: NatsConnection,
  jsm?: JetStreamManager,
  replicas = 1,
  log?: Logger,
): Promise<Buckets> {
  const kvm = new Kvm(creatingAtomic(nc))
  const [idle, backfills, claims] = await Promise.all(
    bucketConfigs.map(({ name, ...config }) => {
      const { atomic: _, ...options } = config as typeof config & { atomic?: boolean }
      return acrossLeaderChange(
        `provisioning KV bucket ${name}`,
        () => kvm.create(name, { ...options, replicas, ...LEADER_READS }),
        PROVISION_DEADLINE_MS,
      )
    }),
  )
  // Kvm.create binds to an existing bucket as it is: a bucket made with other settings (other replicas, direct gets,
  // no republish of a followed bucket, no atomic batches) is brought to this configuration here.
  for (const config of bucketConfigs) {
    if (!jsm) continue
    const ttl = 'ttl' in config ? ns(config.ttl) : 0
    const republish = 'republish' in config ? config.republish : undefined
    const info = await acrossLeaderChange(
      `provisioning KV bucket ${config.name}`,
      () => jsm.streams.info(`KV_${config.name}`),
      PROVISION_DEADLINE_MS,
    )
    const current = info.config
    const republishStale =
      republish && (current.republish?.src !== republish.src || current.republish?.dest !== republish.dest)
    const atomic = 'atomic' in config && config.atomic
    const update = (changes: Partial<typeof current>) =>
      acrossLeaderChange(
        `provisioning KV bucket ${config.name}`,
        () => jsm.streams.update(current.name, { ...current, ...changes }),
        PROVISION_DEADLINE_MS,
      )
    if (current.max_age !== ttl || current.num_replicas !== replicas || current.allow_direct || republishStale) {
      await update({
        max_age: ttl,
        num_replicas: replicas,
        allow_direct: false,
        ...(republish ? { republish } : {}),
        ...(atomic ? { allow_atomic: true } : {}),
      })
      if (current.num_replicas !== replicas) await awaitReplicas(jsm, current.name, replicas)
    } else if (atomic && !current.allow_atomic) {
      // A speed-up, not a safety setting: refused, admit takes the claims one by one (pkg/admission/nats-ports.ts).
      await update({ allow_atomic: true }).catch((err) =>
        log?.warn(
          { stream: current.name, error: describeError(err) },
          'allow_atomic not set on the claims bucket: admissions take their claims one key at a time',
        ),
      )
    }
  }
  return { idle, backfills, claims } as Buckets
}
