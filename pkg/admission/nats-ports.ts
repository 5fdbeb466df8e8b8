// The admission ports on the real servers: the claims and backfill-state buckets and the foreground streams on
// NATS JetStream, Jobs on the Kubernetes API.

import type { JetStreamManager, MsgRequest } from '@nats-io/jetstream'
import type { KV, KvEntry } from '@nats-io/kv'
import { BUCKET_CLAIMS, catalog, STREAM_FOREGROUND } from '../../events/catalog.js'
import { decode } from '../../events/codec.js'
import { modelKey } from '../core/names.js'
import { isCasConflict, isNotFound } from '../jetstream/errors.js'
import { isAtomicDisabled, jsRequestsOf, KvBatchRefused, kvWriteTogether } from '../jetstream/js-requests.js'
import { withDeadline } from '../lib/deadline.js'
import type { Deps } from '../transport/function.js'
import { checkFence, lastRequestAt } from './fence.js'
import type { AdmissionPorts, CasStore, ClaimStore, Cursor, Entry, RequestLog } from './ports.js'
import { POST_READ_DEADLINE_MS } from './protocol.js'

/**
 * Most foreground-subject requests one newest-request read looks at (one leader-answered read each, in parallel).
 * Past it the read answers with its own time: the admission waits for a quieter moment (the fence re-check).
 */
export const MAX_UNSEEN_REQUESTS = 256

const DOCUMENTED_SUBJECT = catalog['ai.flexinfer.foreground.request'].subject

const entry = (e: KvEntry | null): Entry | null =>
  e ? { operation: e.operation as Entry['operation'], revision: e.revision, text: e.string() } : null

export function kvStore(kv: KV): CasStore {
  return {
    get: async (key) => entry(await kv.get(key)),
    create: (key, text) => kv.create(key, text),
    update: (key, text, revision) => kv.update(key, text, revision),
    delete: (key, revision) => kv.delete(key, { previousSeq: revision }),
  }
}

/**
 * Claims buckets whose stream refused an atomic batch, and until when they are written one key at a time: tried again
 * after that (the provision step of an upgrade sets allow_atomic), logged the first time only.
 */
const noAtomicUntil = new WeakMap<KV, number>()
const ATOMIC_RETRY_MS = 60_000

/** The claims bucket: a free model and node key are taken with one atomic batch, one round trip. */
export function claimStore(deps: Deps): ClaimStore {
  const kv = deps.bus.kv.claims
  return {
    ...kvStore(kv),
    async writeTogether(writes) {
      if ((noAtomicUntil.get(kv) ?? 0) > deps.now()) return false
      try {
        await kvWriteTogether(jsRequestsOf(deps.bus.nc), BUCKET_CLAIMS, writes)
        return true
      } catch (err) {
        // A lost compare-and-set is the caller's to judge; a batch whose answer never came may have been stored.
        if (!(err instanceof KvBatchRefused) || isCasConflict(err)) throw err
        // Refused, nothing stored: the keys one by one this time (too many batches in flight on the stream, say).
        if (!isAtomicDisabled(err)) {
          deps.log.warn({ bucket: BUCKET_CLAIMS, error: err.message }, 'claims batch refused: claims taken one by one')
          return false
        }
        if (!noAtomicUntil.has(kv))
          deps.log.warn(
            { bucket: BUCKET_CLAIMS, error: err.message },
            'claims bucket refuses atomic batches (provisioned by an older release?): claims taken one key at a time, ' +
              'one round trip more per admission, until provision runs again',
          )
        noAtomicUntil.set(kv, deps.now() + ATOMIC_RETRY_MS)
        return false
      }
    },
  }
}

/**
 * The foreground requests stored on the foreground subject (contract.md) after `since`, up to the stream's end when the read
 * began: the newest store time among those for `namespace`/`model` (foreground class only), and where the read
 * ended. Requests there carry their model only in the payload, so each is read (STREAM.MSG.GET: the stream leader
 * answers, and has every request that got a PubAck).
 */
export async function foregroundSince(
  jsm: JetStreamManager,
  namespace: string,
  model: string,
  since: Cursor,
  now: () => number,
): Promise<{ at: string | null; cursor: Cursor }> {
  // The common case, nothing stored past the cursor, in one round trip: the stream leader's first message at or
  // after since + 1. None: the stream ended at or before the cursor when the leader answered.
  const next = await jsm.streams
    .getMessage(STREAM_FOREGROUND, { seq: since + 1, next_by_subj: DOCUMENTED_SUBJECT } as MsgRequest)
    .catch((err) => {
      if (isNotFound(err)) return null
      throw err
    })
  if (!next) return { at: null, cursor: since }
  const last = (await jsm.streams.info(STREAM_FOREGROUND)).state.last_seq
  if (last <= since) return { at: null, cursor: since }
  if (last - since > MAX_UNSEEN_REQUESTS) return { at: new Date(now()).toISOString(), cursor: since }
  const seqs = Array.from({ length: last - since }, (_, i) => since + 1 + i)
  const stored = await Promise.all(
    seqs.map((seq) =>
      jsm.streams.getMessage(STREAM_FOREGROUND, { seq }).catch((err) => {
        // Removed by the stream's limits (or never stored at that sequence): nothing to look at.
        if (isNotFound(err)) return null
        throw err
      }),
    ),
  )
  let newest: Date | null = null
  for (const m of stored) {
    if (!m) continue
    const r = decode(m.data)
    // An undecodable one is demand's to dead-letter; a background one is no demand.
    if (!r.ok || r.event.type !== 'ai.flexinfer.foreground.request') continue
    const d = r.event.data
    if (d.namespace !== namespace || d.model !== model || d.workloadClass === 'background') continue
    if (!newest || m.time > newest) newest = m.time
  }
  return { at: newest ? newest.toISOString() : null, cursor: last }
}

export function natsRequestLog(deps: Deps): RequestLog {
  const { bus } = deps
  return {
    fence: () => checkFence(deps),
    idle: async (namespace, model) => entry(await bus.kv.idle.get(modelKey(namespace, model))),
    async newest(namespace, model, since) {
      if (since === undefined) return { at: await lastRequestAt(bus.jsm, namespace, model) }
      // The reads around the POST: a late answer is as good as none (pkg/admission/protocol.ts), and the JetStream API's
      // own timeout (5 s) is far longer than a raced Job may run.
      const [perModel, documented] = await withDeadline(
        Promise.all([
          lastRequestAt(bus.jsm, namespace, model),
          foregroundSince(bus.jsm, namespace, model, since, deps.now),
        ]),
        POST_READ_DEADLINE_MS,
        'newest foreground request read',
      )
      const at = [perModel, documented.at].filter((t): t is string => t !== null).sort()
      return { at: at[at.length - 1] ?? null, cursor: documented.cursor }
    },
  }
}

export function admissionPorts(deps: Deps): AdmissionPorts {
  return {
    claims: claimStore(deps),
    states: kvStore(deps.bus.kv.backfills),
    requests: natsRequestLog(deps),
    jobs: {
      create: (job) => deps.kube.createJob(job),
      delete: (namespace, name, uid) => deps.kube.deleteJob(namespace, name, uid),
    },
    clock: { now: deps.now },
    log: deps.log,
  }
}
