// The JetStream streams: what each keeps and for how long, creating or updating them (provisioning: topology.ts), and
// reading a stream's newest message on a subject from its leader.
import {
  DiscardPolicy,
  type JetStreamManager,
  RetentionPolicy,
  StorageType,
  type StoredMsg,
  type StreamConfig,
} from '@nats-io/jetstream'
import {
  catalog,
  STREAM_DEAD_LETTER,
  STREAM_EVENTS,
  STREAM_FOREGROUND,
  STREAM_FOREGROUND_LAST,
  STREAM_TIMERS,
} from '../../events/catalog.js'
import { acrossLeaderChange, isNotFound, PROVISION_DEADLINE_MS } from './errors.js'

const FOREGROUND_SUBJECT = catalog['ai.flexinfer.foreground.request'].subject

/**
 * Retention, bounded whatever the gateway's rate, and the foreground firehose apart from the control events (a
 * burst of requests must never push a job.completed or backfill.admit out of a drop-oldest stream):
 * - FLEXINFER_FOREGROUND (the foreground subject contract.md documents) keeps at most 15 minutes and 512 MiB (oldest dropped). Requests
 *   carry their time and demand is level-triggered, so nothing older is ever needed.
 * - FLEXINFER_FOREGROUND_LAST (per-model subjects) keeps the newest request per model (max_msgs_per_subject 1),
 *   for FOREGROUND_LAST_MAX_AGE_MS and at most FOREGROUND_LAST_MAX_MODELS models (least recently active dropped
 *   first): admission reads a model's last request from it directly (pkg/admission/fence.ts).
 * - FLEXINFER_EVENTS (control events: Kubernetes changes, cancel/admit requests) keeps 24 hours and 256 MiB: at
 *   Kubernetes-change rates that is days of lag before anything is dropped.
 * - FLEXINFER_TIMERS holds one schedule and one fired message per backfill (max_msgs_per_subject 1), no age limit:
 *   a 24h repeatAfter schedule must outlive the event streams.
 * - FLEXINFER_DEADLETTER keeps 7 days, 64 MiB.
 */
export const EVENTS_MAX_AGE_MS = 24 * 3_600_000
export const FOREGROUND_MAX_AGE_MS = 15 * 60_000
export const FOREGROUND_LAST_MAX_AGE_MS = 30 * 24 * 3_600_000
export const FOREGROUND_LAST_MAX_MODELS = 200_000

/** Milliseconds as the nanoseconds JetStream's configurations count in. */
export const ns = (ms: number) => ms * 1_000_000

export const streamConfigs: (Partial<StreamConfig> & { name: string })[] = [
  {
    name: STREAM_EVENTS,
    description: 'ModelBackfill control events: Kubernetes changes, cancel/admit requests',
    subjects: [
      'flexinfer.events.backfill.>',
      'flexinfer.events.model.>',
      'flexinfer.events.gaming.>',
      'flexinfer.events.gpu.>',
      'flexinfer.events.job.>',
      'flexinfer.events.k8s.>',
    ],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: ns(EVENTS_MAX_AGE_MS),
    max_bytes: 256 * 1024 * 1024,
    discard: DiscardPolicy.Old,
    duplicate_window: ns(60_000),
  },
  {
    name: STREAM_FOREGROUND,
    description: 'Gateway foreground requests on the foreground subject (consumed by demand)',
    subjects: [FOREGROUND_SUBJECT],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: ns(FOREGROUND_MAX_AGE_MS),
    max_bytes: 512 * 1024 * 1024,
    discard: DiscardPolicy.Old,
    duplicate_window: ns(60_000),
  },
  {
    name: STREAM_FOREGROUND_LAST,
    description: 'Gateway foreground requests on per-model subjects: the newest per model (demand, admission)',
    subjects: [`${FOREGROUND_SUBJECT}.>`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_msgs_per_subject: 1,
    max_msgs: FOREGROUND_LAST_MAX_MODELS,
    max_age: ns(FOREGROUND_LAST_MAX_AGE_MS),
    max_bytes: 256 * 1024 * 1024,
    discard: DiscardPolicy.Old,
    duplicate_window: ns(60_000),
  },
  {
    name: STREAM_TIMERS,
    description: 'Per-backfill timers: one JetStream message schedule per backfill and the events they fire',
    // flexinfer.events.resync.>: what the repeating resync schedule (flexinfer.schedules.resync) fires.
    subjects: ['flexinfer.schedules.>', 'flexinfer.events.timer.>', 'flexinfer.events.resync.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_msgs_per_subject: 1,
    // A timer is disarmed by a roll-up tombstone on its schedule subject (Bus.cancelTimer), which expires by its
    // own TTL: no function user needs the purge right, whose subject filter is in the request body, out of reach of
    // permissions (the right to purge one timer would be the right to purge them all).
    allow_rollup_hdrs: true,
    allow_msg_ttl: true,
    allow_msg_schedules: true,
  },
  {
    name: STREAM_DEAD_LETTER,
    description: 'Events a function could not accept, with the reason (header Flexinfer-Dead-Letter-Reason)',
    subjects: ['flexinfer.deadletter.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: ns(7 * 24 * 3_600_000),
    max_bytes: 64 * 1024 * 1024,
    discard: DiscardPolicy.Old,
  },
]

/**
 * Creates the streams, or updates them in place (idempotent): an existing stream gets the configured replicas too,
 * and the server moves its durable consumers (which inherit the stream's replicas) along with it.
 */
export async function ensureStreams(jsm: JetStreamManager, replicas = 1) {
  for (const base of streamConfigs) {
    const config = { ...base, num_replicas: replicas }
    // Each step is idempotent, so a request that timed out (its stream may have been created all the same) is
    // simply asked again from the lookup on.
    await acrossLeaderChange(
      `provisioning stream ${config.name}`,
      async () => {
        try {
          const before = await jsm.streams.info(config.name)
          await jsm.streams.update(config.name, config)
          if (before.config.num_replicas !== replicas) await awaitReplicas(jsm, config.name, replicas)
        } catch (err) {
          if (!isNotFound(err)) throw err
          await jsm.streams.add(config)
        }
      },
      PROVISION_DEADLINE_MS,
    )
  }
}

/**
 * After a change of replicas, waits (bounded) until the stream's new peers have caught up: until then the server
 * is moving the stream and its consumers, and consumer requests right after time out.
 */
export async function awaitReplicas(jsm: JetStreamManager, stream: string, replicas: number, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const info = await jsm.streams.info(stream).catch(() => undefined)
    const peers = info?.cluster?.replicas ?? []
    if (info?.cluster?.leader && peers.length === replicas - 1 && peers.every((p) => p.current)) return
    if (replicas === 1 && info && !info.cluster?.replicas?.length) return
    if (Date.now() > deadline) throw new Error(`stream ${stream} did not reach ${replicas} current replicas`)
    await new Promise((r) => setTimeout(r, 200))
  }
}

/**
 * The newest message stored on `subject` in `stream`, or null when there is none. A STREAM.MSG.GET, answered by the
 * stream's leader: on a cluster it sees every message that got a PubAck (a direct get may be answered by a
 * follower behind it).
 */
export async function lastBySubject(jsm: JetStreamManager, stream: string, subject: string): Promise<StoredMsg | null> {
  try {
    return (await jsm.streams.getMessage(stream, { last_by_subj: subject })) ?? null
  } catch (err) {
    if (isNotFound(err)) return null
    throw err
  }
}
