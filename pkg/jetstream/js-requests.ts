// JetStream requests for a hot path, without nats.js's request machinery: nats-core (3.4) builds an Error with a
// stack trace for every request it answers (RequestOne.cancel() after resolve), and JetStream's API answers "not
// found" as a thrown JetStreamApiError, costs a hot path such as demand's drain pays on every request. Here one
// wildcard inbox subscription per connection answers every request by token; a reply is handed back as parsed JSON
// (an API error is data, not an exception). Only a failure of the request itself (deadline, no responders, full)
// rejects. Every request has a deadline and the requests in flight are bounded.
import { randomUUID } from 'node:crypto'
import { createInbox, type Msg, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node'

/** JetStream's error object in an API reply or a PubAck. */
export interface JsApiError {
  code: number
  err_code?: number
  description?: string
}

interface Pending {
  resolve: (reply: unknown) => void
  reject: (err: Error) => void
  timer: NodeJS.Timeout
}

export class JsRequests {
  private readonly prefix: string
  private readonly pending = new Map<string, Pending>()
  private readonly sub: { unsubscribe(): void }
  private next = 0

  constructor(
    private readonly nc: NatsConnection,
    private readonly opts: { timeoutMs?: number; maxInFlight?: number } = {},
  ) {
    // The connection's inbox prefix (`_INBOX_<user>`): the only inboxes a function's NATS user may subscribe to.
    const inboxPrefix = (nc as unknown as { options?: { inboxPrefix?: string } }).options?.inboxPrefix
    this.prefix = `${createInbox(inboxPrefix)}.`
    this.sub = nc.subscribe(`${this.prefix}*`, { callback: (err, msg) => (err ? undefined : this.answer(msg)) })
  }

  /** Requests in flight (tests, logs). */
  get inFlight() {
    return this.pending.size
  }

  /** Publishes `body` to `subject` and resolves with the reply's JSON (an API error included, as data). */
  request(subject: string, body: string | Uint8Array, hdrs?: Record<string, string>): Promise<unknown> {
    if (this.pending.size >= (this.opts.maxInFlight ?? 16_384))
      return Promise.reject(new Error(`too many JetStream requests in flight (${this.pending.size})`))
    this.next = (this.next + 1) % Number.MAX_SAFE_INTEGER
    const token = this.next.toString(36)
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(token)
        reject(new Error(`JetStream request to ${subject} timed out`))
      }, this.opts.timeoutMs ?? 5_000)
      this.pending.set(token, { resolve, reject, timer })
      try {
        let h: ReturnType<typeof natsHeaders> | undefined
        if (hdrs) {
          h = natsHeaders()
          for (const [k, v] of Object.entries(hdrs)) h.set(k, v)
        }
        this.nc.publish(subject, body, { reply: `${this.prefix}${token}`, headers: h })
      } catch (err) {
        clearTimeout(timer)
        this.pending.delete(token)
        reject(err as Error)
      }
    })
  }

  /** Publishes without waiting for an answer (a message of an atomic batch before its commit). */
  publish(subject: string, body: string | Uint8Array, hdrs: Record<string, string>) {
    const h = natsHeaders()
    for (const [k, v] of Object.entries(hdrs)) h.set(k, v)
    this.nc.publish(subject, body, { headers: h })
  }

  private answer(msg: Msg) {
    const token = msg.subject.slice(this.prefix.length)
    const p = this.pending.get(token)
    if (!p) return // timed out already
    this.pending.delete(token)
    clearTimeout(p.timer)
    if (msg.data.length === 0 && msg.headers?.code === 503) {
      p.reject(new Error(`no responders for a JetStream request (${msg.headers.description || 503})`))
      return
    }
    try {
      p.resolve(msg.json())
    } catch {
      p.reject(new Error('unreadable JetStream reply'))
    }
  }

  close() {
    this.sub.unsubscribe()
    for (const [token, p] of this.pending) {
      clearTimeout(p.timer)
      p.reject(new Error('closed'))
      this.pending.delete(token)
    }
  }
}

/** A KV entry as read from its stream (what a hot path needs of nats.js's KvEntry). */
export interface RawKvEntry {
  revision: number
  operation: 'PUT' | 'DEL' | 'PURGE'
  text: string
}

const apiError = (reply: unknown): JsApiError | undefined => (reply as { error?: JsApiError } | null)?.error

/**
 * The key's newest entry, or null when it has none: a STREAM.MSG.GET, which the stream leader answers (never a
 * direct get: pkg/jetstream/buckets.ts LEADER_READS), so a read that starts after a write's PubAck sees that write.
 */
export async function kvLast(js: JsRequests, bucket: string, key: string): Promise<RawKvEntry | null> {
  const reply = await js.request(
    `$JS.API.STREAM.MSG.GET.KV_${bucket}`,
    JSON.stringify({ last_by_subj: `$KV.${bucket}.${key}` }),
  )
  const error = apiError(reply)
  if (error) {
    if (error.code === 404) return null
    throw new Error(`KV ${bucket} read of ${key}: ${error.description ?? error.code}`)
  }
  const m = (reply as { message?: { seq?: number; hdrs?: string; data?: string } }).message
  if (!m || typeof m.seq !== 'number') throw new Error(`KV ${bucket} read of ${key}: unreadable reply`)
  const op = m.hdrs ? /KV-Operation:\s*(DEL|PURGE)/i.exec(Buffer.from(m.hdrs, 'base64').toString('latin1')) : null
  return {
    revision: m.seq,
    operation: op ? (op[1]?.toUpperCase() as 'DEL' | 'PURGE') : 'PUT',
    text: m.data ? Buffer.from(m.data, 'base64').toString('utf8') : '',
  }
}

/**
 * Compare-and-set of a KV value at `revision` (its entry's stream sequence); resolves with the new revision. A
 * conflict rejects with JetStream's "wrong last sequence" description, as nats.js's kv.update does.
 */
export async function kvUpdate(
  js: JsRequests,
  bucket: string,
  key: string,
  value: string,
  revision: number,
): Promise<number> {
  const reply = await js.request(`$KV.${bucket}.${key}`, value, {
    'Nats-Expected-Last-Subject-Sequence': String(revision),
  })
  const error = apiError(reply)
  if (error) throw new Error(error.description ?? `KV ${bucket} write of ${key} refused (${error.code})`)
  const seq = (reply as { seq?: number }).seq
  if (typeof seq !== 'number') throw new Error(`KV ${bucket} write of ${key}: unreadable PubAck`)
  return seq
}

/** One compare-and-set of a batch: `revision` is the key's newest entry as read (0: the key was never written). */
export interface KvWrite {
  key: string
  value: string
  revision: number
}

/**
 * An atomic batch the server answered with an error: nothing of it was stored (a batch is stored whole or not at
 * all), unlike a batch whose answer never came. `errCode`: JetStream's, e.g. 10071 a compare-and-set that lost
 * (isCasConflict), 10174 a stream without allow_atomic, 10210 too many batches in flight on the stream.
 */
export class KvBatchRefused extends Error {
  constructor(
    message: string,
    readonly errCode: number | undefined,
  ) {
    super(message)
  }
}

/** The bucket's stream refuses atomic batches (created without allow_atomic, or with it turned off by hand). */
export const isAtomicDisabled = (err: unknown) => err instanceof KvBatchRefused && err.errCode === 10174

/**
 * Compare-and-sets of several keys of one bucket as one atomic batch (nats-server ≥ 2.12, the bucket's stream with
 * allow_atomic): every value stored or none. One round trip: only the commit, the last message, waits for an answer;
 * the messages before it go out on the same connection, so the server has them first. Every refusal is a
 * KvBatchRefused, nothing stored: a key that moved ("wrong last sequence": isCasConflict), a stream without
 * allow_atomic (isAtomicDisabled), too many batches in flight. A batch whose answer never came may have been stored.
 */
export async function kvWriteTogether(js: JsRequests, bucket: string, writes: readonly KvWrite[]): Promise<void> {
  const id = randomUUID()
  let reply: Promise<unknown> | undefined
  writes.forEach((w, i) => {
    const hdrs: Record<string, string> = {
      'Nats-Batch-Id': id,
      'Nats-Batch-Sequence': String(i + 1),
      'Nats-Expected-Last-Subject-Sequence': String(w.revision),
    }
    if (i < writes.length - 1) js.publish(`$KV.${bucket}.${w.key}`, w.value, hdrs)
    else reply = js.request(`$KV.${bucket}.${w.key}`, w.value, { ...hdrs, 'Nats-Batch-Commit': '1' })
  })
  if (!reply) return
  const answer = await reply
  const error = apiError(answer)
  if (error) {
    const what = writes.map((w) => w.key).join(', ')
    const why = `${error.description ?? ''} (${error.err_code ?? error.code})`
    throw new KvBatchRefused(`KV ${bucket} write of ${what} refused: ${why}`, error.err_code)
  }
  if (typeof (answer as { seq?: number }).seq !== 'number') throw new Error(`KV ${bucket} batch: unreadable PubAck`)
}

/** One JsRequests per connection, for the hot paths that share it (one inbox subscription each). */
const perConnection = new WeakMap<NatsConnection, JsRequests>()
export function jsRequestsOf(nc: NatsConnection): JsRequests {
  let js = perConnection.get(nc)
  if (!js) {
    js = new JsRequests(nc, { timeoutMs: 5_000 })
    perConnection.set(nc, js)
  }
  return js
}

/**
 * The stream's version as its leader knows it — when it was created and its last sequence — answered after every
 * write acknowledged before the request (a reply from another member counts as a new version: versionOf). While it
 * is unchanged nothing was stored in the stream (messages can only have been removed).
 */
let notFromLeader = 0
export async function streamVersion(js: JsRequests, stream: string): Promise<string> {
  const reply = await js.request(`$JS.API.STREAM.INFO.${stream}`, '')
  const error = apiError(reply)
  if (error) throw new Error(`stream ${stream} info: ${error.description ?? error.code}`)
  return versionOf(stream, reply)
}

/**
 * The version in a STREAM.INFO reply, or one that matches nothing when the reply may be behind. A replicated stream's
 * leader is not the only one that answers: while the stream has no leader its members answer (`cluster.leader`
 * empty), and a member whose Raft node was created less than 10 s ago answers too when it is the group's preferred
 * leader (nats-server jsStreamInfoRequest) — a server just restarted, maybe still catching up, with the real
 * leader's name in `cluster.leader`. The answering server leaves itself out of `cluster.replicas`, so a reply that
 * lists the leader among them did not come from it.
 */
export function versionOf(stream: string, reply: unknown): string {
  const r = reply as {
    created?: string
    state?: { last_seq?: number }
    cluster?: { leader?: string; replicas?: { name?: string }[] }
  }
  if (typeof r.state?.last_seq !== 'number') throw new Error(`stream ${stream} info: unreadable reply`)
  const cluster = r.cluster
  if (cluster && (!cluster.leader || cluster.replicas?.some((p) => p.name === cluster.leader))) {
    return `not-from-the-leader/${++notFromLeader}`
  }
  return `${r.created ?? ''}/${r.state.last_seq}`
}
