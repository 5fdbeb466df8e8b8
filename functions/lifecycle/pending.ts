// The sweep's backpressure: a backfill whose `backfill.resync` this instance published is not published
// again until that event has been handled. Without it a lifecycle behind its queue (its first events for new
// backfills still waiting) was sent one more resync per such backfill every sweep, and the backlog grew without
// bound (at 1,000 backfills: ~1,000 more events every 30 s while it handled ~12/s).
//
// Per process and bounded. An entry leaves when its event is handled here, or after `ttlMs`: with several
// replicas another one may handle it, and the backfill must be swept again in the end (at most one more event per
// backfill per ttl). A full set publishes nothing more: what is not published is picked by a later sweep.
//
// The ttl alone re-published what was still queued once a backlog outlived it (at 10,000 backfills:
// 400–740 `NoState` resyncs per sweep after 15 min, while ~20,000 events waited). So each sweep also tells the set
// lifecycle's consumer's ack floor (`floor`): an entry whose event is above it is provably still queued and is held
// on, its ttl restarted — for at most `maxHoldMs` from its publish, in case the floor is stuck. One at or below it
// is left to its ttl as before (not released early: in a test environment another process may ack the shared
// durable's messages without handling ours).

/**
 * How long a published resync holds its backfill back at most (thirty default sweep periods). Longer than a large
 * backlog takes to drain: with 5 min, a run of 10,000 (~20 backfills settled per second) re-published
 * ~1,100 per sweep once the first entries expired. Another replica's sweeps are not held by this set.
 */
export const PENDING_TTL_MS = 15 * 60_000
/** Backfills held back at most: a few tens of bytes each. */
export const PENDING_MAX = 100_000
/** An entry whose event the ack floor shows still queued is held at most this long after its publish. */
export const PENDING_MAX_HOLD_MS = 4 * PENDING_TTL_MS

interface Entry {
  /** When its ttl started (publish, or the last floor that showed it queued). */
  t: number
  /** When its resync was published. */
  first: number
  /** Its event's stream sequence, once the publish was acknowledged. */
  seq?: number
}

export class PendingResyncs {
  /** key → its entry (insertion order is `t` order: the oldest come first). */
  private readonly at = new Map<string, Entry>()

  constructor(
    private readonly now: () => number,
    private readonly ttlMs = PENDING_TTL_MS,
    private readonly max = PENDING_MAX,
    private readonly maxHoldMs = PENDING_MAX_HOLD_MS,
  ) {}

  get size() {
    return this.at.size
  }

  /** Whether an earlier resync of `key` may still be queued. */
  has(key: string): boolean {
    const e = this.at.get(key)
    if (e === undefined) return false
    if (this.now() - e.t < this.ttlMs) return true
    this.at.delete(key)
    return false
  }

  /** Records a resync about to be published; false (publish nothing) when the set is full. */
  add(key: string): boolean {
    this.expire()
    if (!this.at.has(key) && this.at.size >= this.max) return false
    const now = this.now()
    this.at.delete(key)
    this.at.set(key, { t: now, first: now })
    return true
  }

  /** Its publish was acknowledged: the event's stream sequence, for `floor`. */
  published(key: string, seq: number) {
    const e = this.at.get(key)
    if (e) e.seq = seq
  }

  /**
   * The consumer's ack floor (stream sequence): entries above it are still queued and are held on (ttl restarted,
   * up to maxHoldMs after their publish); the others keep their ttl. Once per sweep.
   */
  floor(ackFloor: number) {
    const now = this.now()
    for (const [k, e] of [...this.at]) {
      if (e.seq === undefined || e.seq <= ackFloor) continue
      if (now - e.first < this.maxHoldMs) {
        this.at.delete(k)
        this.at.set(k, { ...e, t: now })
      }
    }
  }

  /** Its event was handled (or its publish failed): the next sweep may pick it again. */
  done(key: string) {
    this.at.delete(key)
  }

  private expire() {
    const cutoff = this.now() - this.ttlMs
    for (const [k, e] of this.at) {
      if (e.t > cutoff) break
      this.at.delete(k)
    }
  }
}
