// NATS topology (streams, KV buckets) and the small bus every function uses to publish events, arm timers and
// dead-letter what it cannot accept. Provisioning is idempotent. Locally (`npm start`, tests) every process ensures
// the topology at start; deployed, one provision step does (`FUNCTION=provision`, cmd/manager/provision.ts) and the
// functions only bind to it (NATS_PROVISION=false), so their NATS users need no right to create or change streams.

import { readFileSync } from 'node:fs'
import {
  DiscardPolicy,
  type JetStreamClient,
  type JetStreamManager,
  JsHeaders,
  jetstream,
  jetstreamManager,
  PubHeaders,
  RetentionPolicy,
  StorageType,
  type StoredMsg,
  type StreamConfig,
} from '@nats-io/jetstream'
import { type KV, Kvm } from '@nats-io/kv'
import {
  type Authenticator,
  connect,
  credsAuthenticator,
  headers,
  type NatsConnection,
  nkeyAuthenticator,
} from '@nats-io/transport-node'
import {
  BUCKET_BACKFILLS,
  BUCKET_CLAIMS,
  BUCKET_MODEL_IDLE,
  catalog,
  type EventData,
  type EventType,
  RESYNC_SCHEDULE_SUBJECT,
  STREAM_DEAD_LETTER,
  STREAM_EVENTS,
  STREAM_FOREGROUND,
  STREAM_FOREGROUND_LAST,
  STREAM_TIMERS,
  scheduleSubject,
  subjectFor,
} from '../../events/catalog.js'
import { type Extensions, encode } from '../../events/codec.js'
import { scheduleAt } from '../core/timer-tick.js'
import { describeError, type Logger } from '../observability/log.js'
import { republishPrefix } from './kv-mirror.js'

const FOREGROUND_SUBJECT = catalog['ai.flexinfer.foreground.request'].subject

/**
 * Retention, bounded whatever the gateway's rate, and the foreground firehose apart from the control events (a
 * burst of requests must never push a job.completed or backfill.admit out of a drop-oldest stream):
 * - FLEXINFER_FOREGROUND (the documented subject) keeps at most 15 minutes and 512 MiB (oldest dropped). Requests
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
/** Idle state entries expire this long after their model's last write (bounds the bucket; see README Limits). */
export const IDLE_STATE_TTL_MS = 30 * 24 * 3_600_000
const ns = (ms: number) => ms * 1_000_000

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
    description: 'Gateway foreground requests on the documented subject (consumed by demand)',
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
    // own TTL: no function user needs the purge right, whose filter would be in the body (it purged everything).
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

/** Most replicas a JetStream stream may have (nats-server's limit). */
export const MAX_REPLICAS = 5

/**
 * How many servers keep a copy of every stream, KV bucket and durable consumer: NATS_REPLICAS, default 1 (one
 * nats-server). On a JetStream cluster set 3 (the deployment manifests do): a server can then die without losing
 * a timer, a claim or an event. Parsed once at start (cmd/manager/config.ts); a bad value throws.
 */
export function natsReplicas(env: { NATS_REPLICAS?: string }): number {
  const raw = env.NATS_REPLICAS?.trim()
  if (!raw) return 1
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 1 || n > MAX_REPLICAS) {
    throw new Error(`NATS_REPLICAS=${raw} is not a whole number from 1 to ${MAX_REPLICAS}`)
  }
  return n
}

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
 * How long provisioning rides out a JetStream that does not answer: a cluster that lost its meta leader (a server
 * crashed or is rolling) creates and looks up nothing until the others have elected a new one, several seconds —
 * more than one request's deadline, and a busy cluster may take as long to create a replicated stream.
 */
export const PROVISION_DEADLINE_MS = 90_000

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

/** JetStream's "stream not found", "consumer not found", "no message found". */
export const isNotFound = (err: unknown) => /not found|no message found/i.test(String((err as Error)?.message ?? err))

/**
 * A compare-and-set write refused because the key moved (KV update, create of an existing key, or an expected-last
 * sequence publish): JetStream's descriptions and error codes, as nats.js and the raw requests (js-requests.ts)
 * report them.
 */
export const isCasConflict = (err: unknown) =>
  /wrong last sequence|key exists|10071|10164/i.test(String((err as Error)?.message ?? err))

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

/**
 * Nothing answers for a stream while its leader changes (a scale, a stepdown, a server rolling): a publish gets "no
 * responders" (nats.js: JetStreamNotEnabled), a leader read times out or is answered "JetStream system temporarily
 * unavailable". The election takes well under a second to a
 * few seconds; callers that must not fail an install or a sweep on it ride it out here, within `deadlineMs`.
 */
export const isLeaderless = (err: unknown) =>
  err instanceof Error &&
  (/TimeoutError|NoResponders|JetStreamNotEnabled/.test(err.name) ||
    /no responders|jetstream is not enabled|temporarily unavailable|timeout/i.test(err.message))

export async function acrossLeaderChange<T>(what: string, call: () => Promise<T>, deadlineMs = 30_000): Promise<T> {
  const deadline = Date.now() + deadlineMs
  for (let pause = 100; ; pause = Math.min(pause * 2, 1_000)) {
    try {
      return await call()
    } catch (err) {
      if (!isLeaderless(err) || Date.now() + pause > deadline) {
        if (isLeaderless(err)) {
          throw new Error(
            `${what}: JetStream did not answer for ${deadlineMs / 1000} s — no leader (an election, a server restarting) or JetStream not enabled (${err})`,
          )
        }
        throw err
      }
      await new Promise((r) => setTimeout(r, pause))
    }
  }
}

export interface TopologyOptions {
  /**
   * true (default): create or update the streams and buckets. false: bind to what the provision step created,
   * waiting up to `waitMs` for it (a function may start before the provision Job has run).
   */
  provision?: boolean
  /** Default 120 s. */
  waitMs?: number
  log?: Logger
  /** Replicas of what provisioning creates or updates (NATS_REPLICAS); default 1. */
  replicas?: number
  /** How long the first connection waits for NATS (NATS_CONNECT_WAIT_MS); default 120 s. */
  connectWaitMs?: number
  /** The credential files of a mounted Secret (NATS_CREDS_FILE, NATS_NKEY_SEED_FILE); see natsServerOptions. */
  credentials?: NatsCredentialFiles
}

/**
 * Socket errors of a dial that say NATS is not there yet, waited out like a refusal: a server (or a proxy in front of
 * it) still starting accepts and resets, a Service's name does not resolve before it exists.
 */
const DIAL_UNAVAILABLE = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
])

/** How long a process waits for NATS at start before it gives up (NATS_CONNECT_WAIT_MS). */
export const DEFAULT_CONNECT_WAIT_MS = 120_000

/**
 * The first connection, waiting for NATS while it is down or restarting (every 500 ms, a 5 s dial deadline each,
 * up to `waitMs`): a function started during an outage used to exit at once (refused) or after a 20 s dial that
 * hung, and its restart came after NATS was back — in a cluster after the pod's crash-loop back-off — so cancels
 * waited for it (chaos.test.ts: a Job deleted 17.7 s after its request). A refused credential fails at once: it
 * will not get better by waiting. Later disconnects reconnect forever (maxReconnectAttempts -1).
 */
export async function connectWaiting(servers: string, name: string, topology: TopologyOptions = {}) {
  const waitMs = topology.waitMs ?? topology.connectWaitMs ?? DEFAULT_CONNECT_WAIT_MS
  const deadline = Date.now() + waitMs
  // noAsyncTraces: no Error (and stack capture) per request; on the hot path that was a fifth of the CPU.
  const options = {
    ...natsServerOptions(servers, topology.credentials),
    name,
    maxReconnectAttempts: -1,
    noAsyncTraces: true,
  }
  for (let attempt = 1; ; attempt++) {
    try {
      return await connect({ ...options, timeout: 5_000 })
    } catch (err) {
      const unavailable =
        err instanceof Error &&
        (/ConnectionError|TimeoutError/.test(err.name) ||
          DIAL_UNAVAILABLE.has((err as NodeJS.ErrnoException).code ?? ''))
      if (!unavailable || /authori[sz]ation|authentication/i.test(String(err))) throw err
      const why = `${err.name}: ${describeError(err)}`
      if (Date.now() + 500 > deadline) {
        throw new Error(`NATS at ${servers} not reachable within ${Math.round(waitMs / 1000)} s: ${why}`)
      }
      if (attempt === 1 || attempt % 20 === 0) {
        topology.log?.warn({ servers, attempt, error: why }, 'NATS not reachable yet; waiting for it')
      }
      await new Promise((r) => setTimeout(r, 500))
    }
  }
}

/**
 * Waits for something the provision step creates: retries `lookup` while it answers "not found", logs a hint every
 * 10 s, and gives up with a specific error after `waitMs`.
 */
export async function awaitProvisioned<T>(what: string, lookup: () => Promise<T>, opts: TopologyOptions = {}) {
  const waitMs = opts.waitMs ?? 120_000
  const started = Date.now()
  let lastHint = started
  const hint = `${what} does not exist yet: the provision step creates it (FUNCTION=provision; deployed, the model-backfill-provision Job)`
  for (;;) {
    try {
      return await lookup()
    } catch (err) {
      if (!isNotFound(err)) throw err
      const waited = Date.now() - started
      if (waited >= waitMs) throw new Error(`${hint}; gave up after ${Math.round(waited / 1000)} s`)
      if (Date.now() - lastHint >= 10_000) {
        opts.log?.warn({ waitedMs: waited }, hint)
        lastHint = Date.now()
      }
      await new Promise((r) => setTimeout(r, 500))
    }
  }
}

export interface Buckets {
  idle: KV
  backfills: KV
  claims: KV
}

/**
 * The buckets functions follow (the metrics exporter: backfills; demand: claims) republish every change to
 * flexinfer.kv.<bucket>.<key>: functions subscribe to that instead of creating watch consumers (pkg/jetstream/kv-mirror.ts).
 */
function republishOf(bucket: string) {
  return { src: `$KV.${bucket}.>`, dest: `${republishPrefix(bucket)}>` }
}

const bucketConfigs = [
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
const LEADER_READS = { allow_direct: false } as const

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
  // Kvm.create binds to an existing bucket as it is: a bucket made by an older release (or with other replicas, or
  // direct gets, or without the republish of the followed buckets) is brought to this configuration here.
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

/** The topology as the provision step left it: every stream must exist; buckets are bound, never created. */
export async function bindTopology(jsm: JetStreamManager, nc: NatsConnection, opts: TopologyOptions) {
  for (const { name } of streamConfigs) await awaitProvisioned(`stream ${name}`, () => jsm.streams.info(name), opts)
  const kvm = new Kvm(nc)
  const [idle, backfills, claims] = await Promise.all(
    bucketConfigs.map(async ({ name }) => {
      await awaitProvisioned(`KV bucket ${name}`, () => jsm.streams.info(`KV_${name}`), opts)
      return kvm.open(name, LEADER_READS)
    }),
  )
  return { idle, backfills, claims } as Buckets
}

/** The credential files of a mounted Secret, by the variables that name them (cmd/manager/config.ts reads them). */
export interface NatsCredentialFiles {
  NATS_CREDS_FILE?: string
  NATS_NKEY_SEED_FILE?: string
}

/**
 * Connection options from `NATS_URL` and the credential files of a mounted Secret (deploy/nats/README.md):
 * - `NATS_CREDS_FILE` (a JWT `.creds` file) or `NATS_NKEY_SEED_FILE` (an NKey seed, `SU…`): the deployed form. The
 *   file is read at every (re)connect, so a rotated Secret is picked up without a restart. A URL may carry them
 *   instead as `?creds_file=` / `?nkey_seed_file=` (several identities in one process: tests).
 * - `nats://user:password@host:4222`: passwords in the URL, for a local nats-server only (development).
 * The user in the URL (`nats://demand@host:4222`) names the reply inbox prefix, `_INBOX_<user>`, the only one
 * deploy/nats/auth.conf lets that user subscribe to (no user can read another's replies). Never logged.
 */
export function natsServerOptions(
  servers: string,
  env: NatsCredentialFiles = {},
): {
  servers: string[]
  user?: string
  pass?: string
  inboxPrefix?: string
  authenticator?: Authenticator
} {
  let user: string | undefined
  let pass: string | undefined
  const files: { creds?: string; seed?: string } = {}
  const list = servers.split(',').map((entry) => {
    let s = entry.trim()
    const query = s.indexOf('?')
    if (query >= 0) {
      const params = new URLSearchParams(s.slice(query + 1))
      files.creds = params.get('creds_file') ?? files.creds
      files.seed = params.get('nkey_seed_file') ?? files.seed
      s = s.slice(0, query)
    }
    const m = /^([a-z]+:\/\/)?([^:@/]+)(?::([^@/]*))?@(.+)$/i.exec(s)
    if (!m) return s
    user = decodeURIComponent(m[2] as string)
    pass = m[3] === undefined ? undefined : decodeURIComponent(m[3])
    return `${m[1] ?? ''}${m[4]}`
  })
  const creds = files.creds ?? (files.seed ? undefined : env.NATS_CREDS_FILE)
  const seed = files.seed ?? (creds ? undefined : env.NATS_NKEY_SEED_FILE)
  const inbox = user === undefined ? {} : { inboxPrefix: `_INBOX_${user}` }
  if (creds) return { servers: list, ...inbox, authenticator: credsAuthenticator(() => readCredential(creds)) }
  if (seed) {
    readNkeySeed(seed) // a missing, unreadable or placeholder seed stops the process here, with the file named
    return { servers: list, ...inbox, authenticator: nkeyAuthenticator(() => readNkeySeed(seed)) }
  }
  return { servers: list, ...(user === undefined ? {} : { user, pass }), ...inbox }
}

// The same reading as the gateway client's (clients/ts/src/connection.ts): the client package must import nothing of
// ours, and the functions must not load a client's sources (the compiled plugin and the image run without a
// TypeScript loader).
function readCredential(file: string): Uint8Array {
  const bytes = readFileSync(file)
  if (bytes.length === 0) throw new Error(`NATS credentials file ${file} is empty`)
  return new Uint8Array(bytes)
}

/** The seed, trimmed; a value that is not a user seed (a placeholder left in the Secret) is refused by name. */
function readNkeySeed(file: string): Uint8Array {
  const seed = readFileSync(file, 'utf8').trim()
  if (!/^SU[A-Z2-7]{56}$/.test(seed))
    throw new Error(
      `NKey seed file ${file} holds no user seed (SU…, 58 characters): make every identity with \`npm run gen:secrets\``,
    )
  return new TextEncoder().encode(seed)
}

export { KvMirror } from './kv-mirror.js'

export const DEAD_LETTER_REASON = 'Flexinfer-Dead-Letter-Reason'
/** Set when the dead-lettered payload was cut to DEAD_LETTER_MAX_PAYLOAD: the original size in bytes. */
export const DEAD_LETTER_TRUNCATED = 'Flexinfer-Dead-Letter-Truncated'
/** Bytes of a rejected payload kept: enough to see what it was; 1 MiB bodies would evict the rest of the stream. */
export const DEAD_LETTER_MAX_PAYLOAD = 64 * 1024

/**
 * A header value that NATS (and a person) can read whatever the input: CR, LF and tab become the two characters
 * `\r`, `\n`, `\t`, other control characters `\u00XX`; cut to `max` characters (ending in …).
 */
export function headerSafe(value: string, max = 1024): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
  const safe = value.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => {
    if (c === '\r') return '\\r'
    if (c === '\n') return '\\n'
    if (c === '\t') return '\\t'
    return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`
  })
  return safe.length <= max ? safe.trim() : `${safe.slice(0, max - 1).trim()}…`
}

/** How long a disarmed timer's tombstone stays stored (Nats-TTL; the server's minimum is 1 s). */
export const TIMER_TOMBSTONE_TTL = '1s'

export class Bus {
  readonly js: JetStreamClient
  constructor(
    readonly nc: NatsConnection,
    readonly jsm: JetStreamManager,
    readonly kv: Buckets,
    /** How this bus came by its topology: consumers are then created or bound the same way. */
    readonly topology: TopologyOptions = {},
  ) {
    this.js = jetstream(nc)
  }

  static async connect(servers: string, name: string, topology: TopologyOptions = {}): Promise<Bus> {
    const nc = await connectWaiting(servers, name, topology)
    try {
      return await Bus.open(nc, topology)
    } catch (err) {
      await nc.close()
      throw err
    }
  }

  static async open(nc: NatsConnection, topology: TopologyOptions = {}): Promise<Bus> {
    // Its first request (the account's JetStream info) goes unanswered while a cluster elects its meta leader.
    const jsm = await acrossLeaderChange('reaching JetStream', () => jetstreamManager(nc), PROVISION_DEADLINE_MS)
    if (topology.provision === false) return new Bus(nc, jsm, await bindTopology(jsm, nc, topology), topology)
    const replicas = topology.replicas ?? 1
    await ensureStreams(jsm, replicas)
    return new Bus(nc, jsm, await ensureBuckets(nc, jsm, replicas, topology.log), topology)
  }

  /**
   * Publishes a catalog event and waits for JetStream to store it (id/source/extensions: when relaying someone's
   * event; without extensions, the active trace context, if any, is carried: events/codec.ts).
   */
  async publish<T extends EventType>(
    type: T,
    data: EventData<T>,
    options: { time?: string; msgID?: string; id?: string; source?: string; extensions?: Extensions } = {},
  ) {
    const { time, id, source, extensions } = options
    const body = encode(type, data, { time, id, source, extensions })
    return this.js.publish(subjectFor(type, data), body, options.msgID ? { msgID: options.msgID } : undefined)
  }

  /**
   * Arms the backfill's single timer at `at` (replacing any earlier one: one schedule per subject). Nothing waits
   * in memory: the server stores the schedule and publishes the timer event when due, so every function may be
   * scaled to zero meanwhile.
   */
  async armTimer(namespace: string, backfill: string, at: string) {
    const data = { namespace, backfill, due: at }
    const target = subjectFor('ai.flexinfer.timer.fired', data)
    // Stored to fire early by the scheduler's tick (pkg/core/timer-tick.ts); admit waits out the rest.
    const fireAt = scheduleAt(Date.parse(at), Date.now())
    await this.js.publish(scheduleSubject(namespace, backfill), encode('ai.flexinfer.timer.fired', data), {
      schedule: { specification: new Date(fireAt), target },
    })
  }

  /** Whether the backfill's timer schedule is stored (armed and not yet fired); a tombstone is no timer. */
  async timerArmed(namespace: string, backfill: string): Promise<boolean> {
    const stored = await lastBySubject(this.jsm, STREAM_TIMERS, scheduleSubject(namespace, backfill))
    return Boolean(stored?.header.get(PubHeaders.Schedule))
  }

  /**
   * Makes sure the repeating resync schedule is stored with this interval: one schedule for the whole system
   * (`@every`, fired by the server into FLEXINFER_TIMERS, so it keeps firing while every function is scaled to
   * zero). Left alone when already stored with the same interval: re-publishing it would restart its period, and
   * processes that restart more often than that would then never see a sweep. Returns whether it (re)armed it.
   */
  async armResync(intervalMs: number): Promise<boolean> {
    const specification = `@every ${Math.max(1000, Math.round(intervalMs))}ms`
    const data = { intervalMs: Math.max(1000, Math.round(intervalMs)) }
    // Provision arms it right after scaling the streams, when FLEXINFER_TIMERS may still be electing its leader.
    return acrossLeaderChange('arming the resync schedule', async () => {
      const stored = await lastBySubject(this.jsm, STREAM_TIMERS, RESYNC_SCHEDULE_SUBJECT)
      if (stored?.header.get(PubHeaders.Schedule) === specification) return false
      await this.js.publish(RESYNC_SCHEDULE_SUBJECT, encode('ai.flexinfer.resync.due', data), {
        schedule: { specification, target: subjectFor('ai.flexinfer.resync.due', data) },
      })
      return true
    })
  }

  /**
   * Disarms the backfill's timer without a purge: a tombstone (no Nats-Schedule header, so the server stores it and
   * never fires it) rolls up the schedule on its subject, then expires by its TTL so the sweep's listing of stored
   * schedules (functions/lifecycle/resync.ts) stops showing it. Arming again simply replaces the tombstone.
   */
  async cancelTimer(namespace: string, backfill: string) {
    const h = headers()
    h.set(JsHeaders.RollupHdr, JsHeaders.RollupValueSubject)
    h.set(PubHeaders.MessageTTL, TIMER_TOMBSTONE_TTL)
    await this.js.publish(scheduleSubject(namespace, backfill), new Uint8Array(), { headers: h })
  }

  /**
   * Keeps what could not be accepted, with why, so nothing is lost and a person can see the reason. The reason is
   * made header-safe (it often quotes the input: a CR/LF in it made the header invalid, so the publish failed and
   * the poison message was redelivered forever). A payload that, with the headers, would not fit the server's
   * max_payload (or would crowd the 64 MiB stream: 1 MiB hostile bodies) is kept truncated, with its real size.
   */
  async deadLetter(fn: string, reason: string, payload: Uint8Array | string, originalSubject?: string) {
    const h = headers()
    h.set(DEAD_LETTER_REASON, headerSafe(reason))
    if (originalSubject) h.set('Flexinfer-Original-Subject', headerSafe(originalSubject, 256))
    let body = typeof payload === 'string' ? Buffer.from(payload) : payload
    const limit = Math.min(DEAD_LETTER_MAX_PAYLOAD, (this.nc.info?.max_payload ?? 1024 * 1024) - 8 * 1024)
    if (body.byteLength > limit) {
      h.set(DEAD_LETTER_TRUNCATED, String(body.byteLength))
      body = body.subarray(0, limit)
    }
    await this.js.publish(`flexinfer.deadletter.${fn}`, body, { headers: h })
  }

  async close() {
    await this.nc.drain()
  }
}
