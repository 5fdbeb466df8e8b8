// The sweep's backpressure (issue 11): a backfill whose `backfill.resync` this instance published is not published
// again until that event has been handled. Without it a lifecycle behind its queue (its first events for new
// backfills still waiting) was sent one more resync per such backfill every sweep, and the backlog grew without
// bound (1,000 backfills, 2026-12-01: ~1,000 more events every 30 s while it handled ~12/s).
//
// Per process and bounded. An entry leaves when its event is handled here, or after `ttlMs`: with several
// replicas another one may handle it, and the backfill must be swept again in the end (at most one more event per
// backfill per ttl). A full set publishes nothing more: what is not published is picked by a later sweep.

/**
 * How long a published resync holds its backfill back at most (thirty default sweep periods). Longer than a large
 * backlog takes to drain: with 5 min, the 10,000 run (2026-12-01, ~20 backfills settled per second) re-published
 * ~1,100 per sweep once the first entries expired. Another replica's sweeps are not held by this set.
 */
export const PENDING_TTL_MS = 15 * 60_000
/** Backfills held back at most: a few tens of bytes each. */
export const PENDING_MAX = 100_000

export class PendingResyncs {
  /** key → when published (insertion order is publish order: the oldest come first). */
  private readonly at = new Map<string, number>()

  constructor(
    private readonly now: () => number,
    private readonly ttlMs = PENDING_TTL_MS,
    private readonly max = PENDING_MAX,
  ) {}

  get size() {
    return this.at.size
  }

  /** Whether an earlier resync of `key` may still be queued. */
  has(key: string): boolean {
    const t = this.at.get(key)
    if (t === undefined) return false
    if (this.now() - t < this.ttlMs) return true
    this.at.delete(key)
    return false
  }

  /** Records a resync about to be published; false (publish nothing) when the set is full. */
  add(key: string): boolean {
    this.expire()
    if (!this.at.has(key) && this.at.size >= this.max) return false
    this.at.delete(key)
    this.at.set(key, this.now())
    return true
  }

  /** Its event was handled (or its publish failed): the next sweep may pick it again. */
  done(key: string) {
    this.at.delete(key)
  }

  private expire() {
    const cutoff = this.now() - this.ttlMs
    for (const [k, t] of this.at) {
      if (t > cutoff) break
      this.at.delete(k)
    }
  }
}
