// The NATS topology (streams.ts, buckets.ts) as a process finds it. Provisioning is idempotent. Locally (`npm start`,
// tests) every process ensures the topology at start; deployed, one provision step does (`FUNCTION=provision`,
// cmd/manager/provision.ts) and the functions only bind to it (NATS_PROVISION=false), so their NATS users need no
// right to create or change streams.
import type { JetStreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import type { NatsConnection } from '@nats-io/transport-node'
import { type Buckets, bucketConfigs, LEADER_READS } from './buckets.js'
import type { ConnectOptions } from './connect.js'
import { isLeaderless, isNotFound } from './errors.js'
import { streamConfigs } from './streams.js'

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

export interface TopologyOptions extends ConnectOptions {
  /**
   * true (default): create or update the streams and buckets. false: bind to what the provision step created,
   * waiting up to `waitMs` for it (a function may start before the provision Job has run).
   */
  provision?: boolean
  /** Default 120 s. */
  waitMs?: number
  /** Replicas of what provisioning creates or updates (NATS_REPLICAS); default 1. */
  replicas?: number
}

/**
 * Waits for something the provision step creates: retries `lookup` while it answers "not found" — or nothing
 * answers it, the stream being without a leader (an election, a cluster that lost its quorum while servers restart)
 * — logs a hint every 10 s, and gives up with a specific error after `waitMs`. A function scaled up during an
 * election then starts when the cluster answers again instead of crash-looping on one request's timeout.
 */
export async function awaitProvisioned<T>(what: string, lookup: () => Promise<T>, opts: TopologyOptions = {}) {
  const waitMs = opts.waitMs ?? 120_000
  const started = Date.now()
  let lastHint = started
  const missing = `${what} does not exist yet: the provision step creates it (FUNCTION=provision; deployed, the model-backfill-provision Job)`
  const leaderless = `${what}: JetStream does not answer (no leader: an election, or a cluster without its quorum)`
  for (;;) {
    try {
      return await lookup()
    } catch (err) {
      const hint = isNotFound(err) ? missing : isLeaderless(err) ? leaderless : undefined
      if (!hint) throw err
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
