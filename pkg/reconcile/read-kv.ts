// The KV values a reconcile reads, in this release's shape.
import type { KvEntry } from '@nats-io/kv'
import { type Parsed, parseBackfillState, parseClaim, parseEntry, parseModelIdleState } from '../core/state.js'
import type { Logger } from '../observability/log.js'

/**
 * A KV value in this release's shape (older versions upgraded), or null: absent, deleted, or unreadable. An
 * unreadable value is logged, never thrown: for a backfill state, the decision then takes the object over from its
 * Kubernetes status and Jobs (pkg/core/takeover.ts) and the next write replaces the bad value.
 */
export function readKv<T>(log: Logger, entry: KvEntry | null, parse: (raw: unknown) => Parsed<T>): T | null {
  if (entry?.operation !== 'PUT') return null
  const r = parseEntry(entry.string(), parse)
  if (r.ok) return r.value
  log.error(
    { bucket: entry.bucket, key: entry.key, revision: entry.revision, error: r.error },
    'unreadable KV value ignored; its object is taken over from Kubernetes',
  )
  return null
}
export const readState = (log: Logger, e: KvEntry | null) => readKv(log, e, parseBackfillState)
export const readIdle = (log: Logger, e: KvEntry | null) => readKv(log, e, parseModelIdleState)
export const readClaim = (log: Logger, e: KvEntry | null) => readKv(log, e, parseClaim)
