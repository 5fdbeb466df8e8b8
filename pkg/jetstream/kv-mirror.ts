// Following a KV bucket without a consumer. nats-server does not check the deliver subject a consumer-create request
// names, so a function allowed to create its watch consumer could have the server deliver a bucket to an event
// subject. Functions therefore get no consumer right at all: the provision step sets `republish` on the bucket's
// stream ($KV.<bucket>.> → flexinfer.kv.<bucket>.>, which no user may publish), a mirror subscribes to that with
// core NATS, and loads the current values with one stream info (the keys) and a get per key. A reconnect may
// have dropped republished messages: the mirror loads the values again.
import type { KV, KvEntry } from '@nats-io/kv'
import type { NatsConnection, Subscription } from '@nats-io/transport-node'

/** Where the provision step republishes a bucket's changes (pkg/jetstream/buckets.ts ensureBuckets). */
export const republishPrefix = (bucket: string) => `flexinfer.kv.${bucket}.`

/** Keys read per snapshot at most: a bound on memory and on the time a (re)load takes. */
export const SNAPSHOT_MAX_KEYS = 200_000
/** Between loads that failed (NATS unreachable, the bucket without a leader). */
const RELOAD_RETRY_MS = 500
/** Gets in flight at once while loading. */
const SNAPSHOT_CONCURRENCY = 32

/**
 * The current entries of the keys under `filters` (KV key filters, e.g. `model.>`), read without a consumer: one
 * stream info per filter lists the keys (with the stream's last sequence then), then one get per key, which the
 * bucket's leader answers (pkg/jetstream/buckets.ts LEADER_READS). Deleted or purged keys are left out.
 */
export async function kvSnapshot(kv: KV, filters: string[]): Promise<{ entries: KvEntry[]; lastSeq: number }> {
  const b = kv as unknown as { bucket: string; jsm: import('@nats-io/jetstream').JetStreamManager }
  const prefix = `$KV.${b.bucket}.`
  const keys = new Set<string>()
  let lastSeq = 0
  for (const filter of filters) {
    const info = await b.jsm.streams.info(`KV_${b.bucket}`, { subjects_filter: `${prefix}${filter}` })
    lastSeq = Math.max(lastSeq, info.state.last_seq)
    for (const subject of Object.keys(info.state.subjects ?? {})) {
      if (keys.size >= SNAPSHOT_MAX_KEYS) throw new Error(`KV ${b.bucket}: more than ${SNAPSHOT_MAX_KEYS} keys`)
      keys.add(subject.slice(prefix.length))
    }
  }
  const list = [...keys]
  const entries: KvEntry[] = []
  for (let i = 0; i < list.length; i += SNAPSHOT_CONCURRENCY) {
    const got = await Promise.all(list.slice(i, i + SNAPSHOT_CONCURRENCY).map((k) => kv.get(k)))
    for (const e of got) if (e && e.operation === 'PUT') entries.push(e)
  }
  return { entries, lastSeq }
}

/** A bucket's current values (or the keys under a filter) in memory, kept current by its republished changes. */
export class KvMirror<T> {
  readonly values = new Map<string, T>()
  /** The stream sequence each key was last set or removed at: a stale snapshot read never overwrites a newer change. */
  private readonly revisions = new Map<string, number>()
  private sub?: Subscription
  private status?: { stop?: () => void }
  private done?: Promise<unknown>
  private stopped = false
  private loading?: Promise<void>
  private reloadAgain = false
  private retrying?: Promise<void>
  private loadAgain = false
  /** Loads that failed and were tried again (tests, logs). */
  failedLoads = 0

  /** parse: turns a stored value into T, or null for one that cannot be read (then it is left out). */
  constructor(private readonly parse: (raw: unknown, key: string) => T | null = (raw) => raw as T) {}

  /**
   * Subscribes to the republished changes first, then loads the current values; resolves once they are loaded. NATS
   * going away meanwhile (a restart, a server of the cluster killed) is waited out up to `waitMs`: the flush's PING
   * is rejected as "connection disconnected" by the first failed reconnect, and a process that exited on it would
   * sit out a crash-loop back-off after the outage had ended.
   */
  async start(nc: NatsConnection, kv: KV, key = '>', waitMs = 120_000) {
    const bucket = (kv as unknown as { bucket: string }).bucket
    const prefix = republishPrefix(bucket)
    const sub = nc.subscribe(`${prefix}${key}`)
    this.sub = sub
    const follow = (async () => {
      for await (const m of sub) {
        const seq = Number(m.headers?.get('Nats-Sequence'))
        if (!Number.isFinite(seq)) continue
        const op = m.headers?.get('KV-Operation')
        this.apply(m.subject.slice(prefix.length), seq, op === 'DEL' || op === 'PURGE' ? null : m.string())
      }
    })()
    // Republished messages sent while disconnected are lost: load again after every reconnect, until a load
    // succeeds (one that failed — the bucket leaderless right after a server died — would leave them lost).
    const status = nc.status() as AsyncIterable<{ type: string }> & { stop?: () => void }
    this.status = status
    const reconnects = (async () => {
      for await (const s of status) {
        if (this.stopped) break
        if (s.type === 'reconnect') this.loadAfterReconnect(nc, kv, key)
      }
    })()
    this.done = Promise.all([follow, reconnects.catch(() => {})])
    await this.loadUntilDone(nc, kv, key, waitMs)
  }

  /** One retrying load at a time; a reconnect while it runs makes it load once more when done. */
  private loadAfterReconnect(nc: NatsConnection, kv: KV, key: string) {
    if (this.retrying) {
      this.loadAgain = true
      return
    }
    this.retrying = this.loadUntilDone(nc, kv, key, Number.POSITIVE_INFINITY)
      .catch(() => {}) // stopped or closed
      .finally(() => {
        this.retrying = undefined
        if (this.loadAgain && !this.stopped) {
          this.loadAgain = false
          this.loadAfterReconnect(nc, kv, key)
        }
      })
  }

  /** Flush (the subscription is on the server) and load, again every RELOAD_RETRY_MS until one succeeds. */
  private async loadUntilDone(nc: NatsConnection, kv: KV, key: string, waitMs: number) {
    const deadline = Date.now() + waitMs
    for (;;) {
      try {
        await nc.flush()
        await this.reload(kv, key)
        return
      } catch (err) {
        if (this.stopped || nc.isClosed()) throw err
        if (Date.now() + RELOAD_RETRY_MS > deadline) throw err
        this.failedLoads++
        await new Promise((r) => setTimeout(r, RELOAD_RETRY_MS))
      }
    }
  }

  async stop() {
    this.stopped = true
    this.sub?.unsubscribe()
    this.status?.stop?.()
    await Promise.race([this.done, new Promise((r) => setTimeout(r, 1_000))])
  }

  /** One load at a time; a reconnect during a load runs one more after it. */
  private async reload(kv: KV, key: string): Promise<void> {
    if (this.loading) {
      this.reloadAgain = true
      return this.loading
    }
    this.loading = (async () => {
      try {
        do {
          this.reloadAgain = false
          const { entries, lastSeq } = await kvSnapshot(kv, [key])
          const seen = new Set<string>()
          for (const e of entries) {
            seen.add(e.key)
            this.apply(e.key, e.revision, e.string())
          }
          // Keys gone from the bucket (removed while we could not hear it) and not changed since the listing.
          for (const k of [...this.revisions.keys()]) {
            if (!seen.has(k) && (this.revisions.get(k) ?? 0) <= lastSeq) {
              this.values.delete(k)
              this.revisions.delete(k)
            }
          }
        } while (this.reloadAgain && !this.stopped)
      } finally {
        this.loading = undefined
      }
    })()
    return this.loading
  }

  private apply(key: string, seq: number, text: string | null) {
    if (seq <= (this.revisions.get(key) ?? 0)) return
    this.revisions.set(key, seq)
    const value = text === null ? null : this.read(key, text)
    if (value !== null) this.values.set(key, value)
    else this.values.delete(key)
  }

  private read(key: string, text: string): T | null {
    try {
      return this.parse(JSON.parse(text), key)
    } catch {
      return null
    }
  }
}
