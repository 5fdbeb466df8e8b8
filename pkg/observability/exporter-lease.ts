// One exporter at a time for the cluster-wide series. Every function process mirrors the same KV state, so each one
// could export the contract's counters — and `sum by (…)` over a PodMonitor's targets would count them once per
// scraped pod. Instead the processes that may export (those running cancel: always on in both overlays) hold a lease
// on one KV key, and only the holder exports. No clock is compared across processes: a holder exports only while its
// last renewal is younger than half the lease (by its own clock); a contender takes the key over only after seeing
// its revision unchanged for a whole lease (by its own). A holder that takes over from another waits a handover
// period (longer than a scrape interval) before it exports: the previous holder's series are marked stale by its next
// scrape (or by its target going away) first, so no query sees both. A key that never existed needs no wait.
import type { KV } from '@nats-io/kv'
import { withDeadline } from '../lib/deadline.js'

/** A lease unrenewed for this long (as a contender sees it) is taken over. */
export const LEASE_MS = 15_000
/** Longer than the PodMonitor's 30 s interval (deploy/monitoring/podmonitor.yaml) plus a margin: METRICS_HANDOVER_MS. */
export const HANDOVER_MS = 45_000
const CALL_DEADLINE_MS = 2_000
/**
 * The lease's key in the claims bucket (cancel's NATS user may write it; demand follows only its `model.` keys).
 * Test systems sharing one server each have their own: `exporter-<instance>`.
 */
export const EXPORTER_KEY = 'exporter'

export interface LeaseOptions {
  /** Who holds it (shown in `nats kv get`): the pod and a per-process id. */
  id: string
  leaseMs?: number
  handoverMs?: number
  now?: () => number
}

export class ExporterLease {
  private revision: number | undefined
  private renewedAt = Number.NEGATIVE_INFINITY
  private exportFrom = Number.POSITIVE_INFINITY
  private seen: { revision: number; at: number } | undefined
  private timer: NodeJS.Timeout | undefined
  private running: Promise<void> = Promise.resolve()
  private stopped = false
  private readonly leaseMs: number
  private readonly handoverMs: number
  private readonly now: () => number

  constructor(
    private readonly kv: KV,
    readonly key: string,
    private readonly opts: LeaseOptions,
  ) {
    this.leaseMs = opts.leaseMs ?? LEASE_MS
    this.handoverMs = opts.handoverMs ?? HANDOVER_MS
    this.now = opts.now ?? Date.now
  }

  /** Whether this process exports the cluster-wide series now. */
  holding(): boolean {
    const now = this.now()
    return this.revision !== undefined && now - this.renewedAt < this.leaseMs / 2 && now >= this.exportFrom
  }

  private value() {
    return JSON.stringify({ holder: this.opts.id, renewedAt: new Date(this.now()).toISOString() })
  }

  private call<T>(p: Promise<T>, what: string) {
    return withDeadline(p, CALL_DEADLINE_MS, what)
  }

  private async take(previous: number, handover: boolean) {
    const at = this.now()
    this.revision = await this.call(this.kv.update(this.key, this.value(), previous), 'lease take-over')
    this.renewedAt = at
    this.exportFrom = handover ? at + this.handoverMs : at
  }

  /** One round: renew what is held, or look at the key and take it when it is free. Never throws. */
  async tick(): Promise<void> {
    const at = this.now()
    try {
      if (this.revision !== undefined) {
        try {
          this.revision = await this.call(this.kv.update(this.key, this.value(), this.revision), 'lease renewal')
          this.renewedAt = at
        } catch (err) {
          // Taken over (wrong revision) — or NATS away, when the key still names our revision: keep trying.
          const entry = await this.call(this.kv.get(this.key), 'lease read')
          if (entry?.revision !== this.revision) this.lose()
          else throw err
        }
        return
      }
      const entry = await this.call(this.kv.get(this.key), 'lease read')
      if (!entry) {
        this.revision = await this.call(this.kv.create(this.key, this.value()), 'lease create')
        this.renewedAt = at
        this.exportFrom = at // nobody exported before
        return
      }
      if (entry.operation !== 'PUT') return await this.take(entry.revision, true) // released by its holder
      if (this.seen?.revision !== entry.revision) this.seen = { revision: entry.revision, at }
      else if (at - this.seen.at >= this.leaseMs) await this.take(entry.revision, true)
    } catch {
      // NATS away or a race lost: the next round looks again; holding() lapses on its own.
    }
  }

  private lose() {
    this.revision = undefined
    this.exportFrom = Number.POSITIVE_INFINITY
  }

  start() {
    const loop = () => {
      if (this.stopped) return
      this.running = this.tick().finally(() => {
        if (!this.stopped) this.timer = setTimeout(loop, this.leaseMs / 3)
      })
    }
    loop()
    return this.running
  }

  /** Gives the key back (a successor then waits the handover, not a whole lease). */
  async stop() {
    this.stopped = true
    clearTimeout(this.timer)
    await this.running
    if (this.revision === undefined) return
    const revision = this.revision
    this.lose()
    await this.call(this.kv.delete(this.key, { previousSeq: revision }), 'lease release').catch(() => {})
  }
}
