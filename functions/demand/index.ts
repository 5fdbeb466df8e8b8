// demand: the hot path. Every gateway foreground request lands here. It costs no Kubernetes API call: the
// cancel decision is made from a watched copy of the claims bucket (who runs on which model), and idle state
// is written to KV coalesced — at most one write per model per COALESCE_MS, the first one after a quiet period
// immediately (leading edge) — while a cancel is never delayed by any of it.

import { catalog, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST } from '../../events/catalog.js'
import type { InboundEvent } from '../../events/codec.js'
import { type Entry, isCasConflict } from '../../pkg/admission/ports.js'
import { modelClaimKey, modelKey } from '../../pkg/core/names.js'
import {
  type Claim,
  type ModelIdleState,
  parseClaim,
  parseEntry,
  parseModelIdleState,
  toKv,
} from '../../pkg/core/state.js'
import { breaksWindow } from '../../pkg/core/window.js'
import type { Logger } from '../../pkg/observability/log.js'
import type { Deps, EventFunction, Settings } from '../../pkg/transport/function.js'
import { NatsDemandPorts } from './nats-ports.js'
import type { DemandPorts } from './ports.js'

export const COALESCE_MS = 250
const DONE = Promise.resolve()
/**
 * A cancel is sent once per admitted window and sent again, at most this often, while requests keep breaking that
 * window and the claim still stands: one that did not end the attempt (dropped by cancel as not breaking the window
 * it saw, lost with a process) must not leave the Job running under foreground traffic. Each send has its own
 * msgID, so JetStream stores it; replicas and redeliveries within one interval still collapse into one message.
 */
export const CANCEL_RESEND_MS = 2_000
/**
 * Models tracked in memory before idle ones are forgotten (a gateway sending random model names must not grow
 * the process without bound). Forgetting costs nothing but one extra KV read on that model's next request.
 */
export const MAX_TRACKED_MODELS = 20_000
const REQUEST_SUBJECT = catalog['ai.flexinfer.foreground.request'].subject

/** The requests one idle write answers: they share one promise (no promise or closure per request). */
interface Batch {
  promise: Promise<void>
  resolve: () => void
  reject: (err: unknown) => void
}

function batch(): Batch {
  let resolve!: () => void
  let reject!: (err: unknown) => void
  const promise = new Promise<void>((res, rej) => {
    resolve = res
    reject = rej
  })
  // Each request's handler awaits it; a batch nobody joined must not be an unhandled rejection.
  promise.catch(() => {})
  return { promise, resolve, reject }
}

interface ModelEntry {
  namespace: string
  model: string
  /** `<namespace>.<model>` (the idle key) and its claim's key, made once per model, not per request. */
  key: string
  claimKey: string
  /** Newest foreground request time seen / persisted. */
  seen: number
  persisted: number
  /**
   * Newest time known to be in the bucket (at `revision`): a write of ours, or a newer time a write found stored.
   * Known as soon as the write returns, before the claim read that `persisted` waits for: a claim read failing after
   * a write that found a newer time must not leave `revision` at that newer entry with nothing saying it is newer —
   * the redelivered requests' write would then succeed over it by compare-and-set and move the time back.
   */
  stored: number
  requests: number
  lastWriteAt: number
  revision: number
  writing: boolean
  timer?: unknown
  /** Requests after the write in flight (or with none in flight): answered by the next write. */
  next?: Batch
  /** Requests the write in flight covers (at or before its target). */
  current?: Batch
  target: number
}

export class Demand {
  /** Namespace → model → entry: a request's lookup builds no key string. */
  private readonly models = new Map<string, Map<string, ModelEntry>>()
  private tracked = 0
  /**
   * Cancels sent per admitted window (cancelKeyOf): when, and the publish while it is in flight. A request that
   * breaks the same window meanwhile waits for that publish instead of being acknowledged before the cancel is
   * stored: were it the same message delivered twice (a redelivery racing the first delivery), its ack would end
   * the message, and a crash before the publish lands would lose the cancel for good.
   */
  private readonly cancelled = new Map<string, { at: number; sending?: Promise<void> }>()
  /** Counters for logs and the benchmark. */
  readonly stats = { requests: 0, background: 0, kvWrites: 0, cancels: 0 }

  constructor(
    private readonly ports: DemandPorts,
    private readonly log: Logger,
    private readonly maxTrackedModels = MAX_TRACKED_MODELS,
  ) {}

  /** Demand on NATS, as the function runs it. */
  static overNats(deps: Deps, maxTrackedModels = MAX_TRACKED_MODELS) {
    return new Demand(new NatsDemandPorts(deps), deps.log, maxTrackedModels)
  }

  start() {
    return this.ports.start()
  }

  /** Claim reads made so far on NATS (tests, logs): stream versions read, keys read, answered from memory. */
  get claimReadStats() {
    return this.ports.claimReadStats
  }

  async stop() {
    const entries = [...this.models.values()].flatMap((byModel) => [...byModel.values()])
    for (const entry of entries) this.ports.timers.clear(entry.timer)
    await Promise.all(entries.map((e) => (e.seen > e.persisted || e.next ? this.flush(e) : undefined)))
    await this.ports.stop()
  }

  handle(event: InboundEvent): Promise<void> | undefined {
    if (event.type !== 'ai.flexinfer.foreground.request') return
    const { namespace, model, workloadClass } = event.data
    if (workloadClass === 'background') {
      // Background requests (our own Jobs) serve a Ready model without counting as demand.
      this.stats.background++
      return
    }
    this.stats.requests++
    const now = this.ports.now()
    // The window is measured from when NATS accepted the request (its store time), not the gateway's clock: one
    // that lags would shorten the window, one that runs ahead would hold the model busy into the future. In whole
    // milliseconds, as windows are written (ISO times): a store time's microseconds would make the request that
    // opened a window look later than the window's start, and cancel the attempt admitted on it.
    const at = Math.floor(event.storedAt ?? sentAt(event.time, now))
    const entry = this.entry(namespace, model)

    // Only a claimed model can need a cancel: the usual request allocates nothing for it (no key, no promise).
    const claim = this.ports.watchedClaim(entry.claimKey)
    const cancelling = claim ? this.cancelIfClaimed(at, claim, 'watch', entry.model) : undefined
    entry.requests++
    if (at <= entry.persisted) return cancelling
    entry.seen = Math.max(entry.seen, at)
    let durable: Promise<void>
    if (entry.writing && entry.current && at <= entry.target) durable = entry.current.promise
    else {
      entry.next ??= batch()
      durable = entry.next.promise
    }
    if (!entry.writing && !entry.timer) {
      const wait = entry.lastWriteAt + COALESCE_MS - now
      if (wait <= 0) void this.flush(entry)
      else entry.timer = this.ports.timers.set(() => void this.flush(entry), wait)
    }
    return cancelling ? Promise.all([cancelling, durable]).then(() => undefined) : durable
  }

  private entry(namespace: string, model: string): ModelEntry {
    let entry = this.models.get(namespace)?.get(model)
    if (!entry) {
      // Before the new entry goes in, or it would be forgotten at once (it has nothing pending yet).
      if (this.tracked >= this.maxTrackedModels) this.forgetIdle()
      const key = modelKey(namespace, model)
      entry = {
        namespace,
        model,
        key,
        claimKey: modelClaimKey(namespace, model),
        seen: 0,
        persisted: 0,
        stored: 0,
        requests: 0,
        lastWriteAt: 0,
        revision: 0,
        writing: false,
        target: 0,
      }
      // Looked up after forgetIdle, which drops a namespace's map once it is empty.
      let byModel = this.models.get(namespace)
      if (!byModel) {
        byModel = new Map()
        this.models.set(namespace, byModel)
      }
      byModel.set(model, entry)
      this.tracked++
    }
    return entry
  }

  /** Drops the models with nothing pending (no waiter, no write, no timer): their state is in KV. */
  private forgetIdle() {
    const now = this.ports.now()
    for (const [namespace, byModel] of this.models) {
      for (const [model, e] of byModel) {
        if (!e.writing && !e.timer && !e.next && now - e.lastWriteAt >= COALESCE_MS) {
          byModel.delete(model)
          this.tracked--
        }
      }
      if (byModel.size === 0) this.models.delete(namespace)
    }
  }

  /** Models held in memory (tests, logs). */
  get trackedModels() {
    return this.tracked
  }

  /**
   * Cancels the attempt holding the model if this request breaks the window it was admitted on. `via`: the watched
   * claim (on the request itself) or the read after the idle write (the slow way: it waits for that write).
   */
  private async cancelIfClaimed(at: number, claim: Claim, via: 'watch' | 'read', model: string) {
    if (!breaksWindow(at, claim.idleSince ?? claim.claimedAt)) return
    // The attempt's background gate, if it has one, closes on this at once instead of waiting for the Job's deletion.
    // Core NATS, nothing stored, so it is sent for every request that breaks the window, not once: a gate that missed
    // one (NATS away for less than its bound) closes on the next.
    this.ports.publishPreempt(claim.namespace, model, { job: claim.jobName, at })
    const cancelKey = cancelKeyOf(claim)
    const sent = this.cancelled.get(cancelKey)
    const now = this.ports.now()
    if (sent !== undefined && now - sent.at < CANCEL_RESEND_MS) return sent.sending
    const record: { at: number; sending?: Promise<void> } = { at: now }
    this.cancelled.set(cancelKey, record)
    if (this.cancelled.size > 10_000) this.pruneCancelled(now)
    const sending = this.sendCancel(at, claim, via, cancelKey, now).then(
      () => {
        // Stored: later requests breaking this window are answered without waiting.
        record.sending = undefined
      },
      (err) => {
        // Not stored: the next request (or this one's redelivery) sends it again.
        if (this.cancelled.get(cancelKey) === record) this.cancelled.delete(cancelKey)
        throw err
      },
    )
    record.sending = sending
    return sending
  }

  private async sendCancel(
    at: number,
    claim: Claim,
    via: 'watch' | 'read',
    cancelKey: string,
    now: number,
  ): Promise<void> {
    const interval = Math.floor(now / CANCEL_RESEND_MS)
    this.stats.cancels++
    // Rare (once per admission broken by foreground) and what an operator asks first: which request cancelled what.
    this.log.info(
      { job: `${claim.namespace}/${claim.jobName}`, claimedAt: claim.claimedAt, at: new Date(at).toISOString() },
      'cancel requested: foreground after the window the attempt was admitted on',
    )
    const ack = await this.ports.publishCancel(
      {
        namespace: claim.namespace,
        backfill: claim.backfill,
        jobName: claim.jobName,
        reason: 'ForegroundDemand',
        at: new Date(at).toISOString(),
      },
      // Replicas and redeliveries publishing the same cancel collapse into one message.
      `cancel-${cancelKey}-${interval}`,
    )
    // The preemption's hops (dev/bench/preemption-profile.ts), epoch ms: request stored, handled here, cancel stored
    // (its PubAck back). Debug only, and only per cancel: nothing on the per-request path.
    if (this.log.isLevelEnabled('debug'))
      this.log.debug(
        {
          namespace: claim.namespace,
          job: claim.jobName,
          via,
          seq: ack.seq,
          t: { stored: at, handled: now, acked: this.ports.now() },
        },
        'demand: cancel published',
      )
  }

  private pruneCancelled(now: number) {
    for (const [job, sent] of this.cancelled) if (now - sent.at >= CANCEL_RESEND_MS) this.cancelled.delete(job)
  }

  /** Persists the newest request time with compare-and-set (replicas never move it backwards). */
  private async flush(entry: ModelEntry) {
    this.ports.timers.clear(entry.timer)
    entry.timer = undefined
    if (entry.writing) return
    entry.writing = true
    const target = entry.seen
    entry.target = target
    const answered = entry.next ?? batch()
    entry.next = undefined
    entry.current = answered
    const key = entry.key
    let written = false
    try {
      // Already covered: requests that arrived during the last write, after its target, but no later than the newer
      // time that write found stored. Writing them would move the stored time back; they need the claim read only.
      // So are requests no later than a time a write stored, or found stored, whose claim read then failed: they are
      // redelivered, need the claim read, and a write of theirs would move the stored time back.
      const known = Math.max(entry.persisted, entry.stored)
      const alreadyStored = target <= known
      const covered = alreadyStored ? known : await this.writeMax(entry, key, target)
      written = true
      if (!alreadyStored) {
        entry.lastWriteAt = this.ports.now()
        this.stats.kvWrites++
      }
      // The other half of admit's re-check (pkg/admission/fence.ts), after every write and before anything is acked:
      // having written idleness, look at the claim itself (not the watched copy, which may lag) so an admission
      // racing these requests is cancelled either way. A failure here fails the requests, which are redelivered.
      const claim = await this.readClaim(entry.claimKey)
      if (this.log.isLevelEnabled('debug')) {
        this.log.debug(
          {
            key,
            target: new Date(target).toISOString(),
            claim: claim ? `${claim.jobName}@${claim.claimedAt}` : null,
            watched: this.ports.watchedClaim(entry.claimKey)?.jobName ?? null,
            reads: this.claimReadStats,
          },
          'idle written; claim read',
        )
      }
      if (claim) await this.cancelIfClaimed(target, claim, 'read', entry.model)
      // Only now: a request at or before `persisted` is answered without a write or a claim check. That includes a
      // newer time found stored (another replica's, or an earlier write of ours whose reply was lost): left at
      // `target`, a later request between the two would be written over it by compare-and-set on the revision just
      // read — and succeed, moving the model's last foreground request back in time and shortening its window.
      entry.persisted = Math.max(entry.persisted, target, covered)
      answered.resolve()
    } catch (err) {
      // A cancel does not wait for the idle write to succeed: these requests may break an attempt's window whatever
      // became of the write (the idle bucket failing over, full, or slow), so the claim is read and the cancel sent
      // all the same. Their redelivery still writes idleness and reads the claim in that order — what the
      // admission's fence relies on; this read only adds cancels.
      if (!written) await this.cancelDespite(entry, target, err)
      // Everything pending fails (and is redelivered), including what arrived during this write.
      answered.reject(err)
      const late = entry.next as Batch | undefined
      late?.reject(err)
      entry.next = undefined
      // Their redelivery raises `seen` again; no retry loop of our own (NATS may be down for a while).
      entry.seen = entry.persisted
    } finally {
      entry.writing = false
      entry.current = undefined
    }
    // Requests waiting for a write this one did not answer: newer than it wrote, or within the newer time it found
    // stored (those are answered by a claim read alone; left waiting, they would hang until the model's next request).
    if ((entry.seen > entry.persisted || entry.next) && !entry.timer) {
      const wait = Math.max(0, entry.lastWriteAt + COALESCE_MS - this.ports.now())
      entry.timer = this.ports.timers.set(() => void this.flush(entry), wait)
    }
  }

  /** After a failed idle write: the claim read and the cancel sent anyway; their own failure is only logged. */
  private async cancelDespite(entry: ModelEntry, target: number, writeError: unknown) {
    try {
      const claim = await this.readClaim(entry.claimKey)
      if (claim) await this.cancelIfClaimed(target, claim, 'read', entry.model)
    } catch (err) {
      this.log.warn(
        { key: entry.key, writeError: String(writeError), error: String(err) },
        'idle write failed, and the claim read or cancel after it too: the requests are redelivered',
      )
    }
  }

  /** The model's claim as the claims stream's leader has it now (functions/demand/claim-reads.ts). */
  private async readClaim(key: string): Promise<Claim | null> {
    const entry = await this.ports.readClaim(key)
    if (entry?.operation !== 'PUT') return null
    const r = parseEntry(entry.text, parseClaim)
    if (r.ok) return r.value
    // Unreadable: nobody can prove a hold with it (admit replaces it by compare-and-set), so nothing to cancel.
    this.log.error({ key, revision: entry.revision, error: r.error }, 'unreadable claim ignored')
    return null
  }

  private readIdle(key: string, e: Entry | null): ModelIdleState | null {
    if (e?.operation !== 'PUT') return null
    const r = parseEntry(e.text, parseModelIdleState)
    if (r.ok) return r.value
    this.log.error({ key, revision: e.revision, error: r.error }, 'unreadable idle state overwritten')
    return null
  }

  /** Stores `at` unless a newer time is stored; returns the time the stored state now covers. */
  private async writeMax(entry: ModelEntry, key: string, at: number): Promise<number> {
    for (let i = 0; i < 5; i++) {
      const value: ModelIdleState = {
        namespace: entry.namespace,
        model: entry.model,
        lastForegroundAt: new Date(at).toISOString(),
        requests: entry.requests,
        updatedAt: new Date(this.ports.now()).toISOString(),
      }
      try {
        // The usual write (a known revision) without nats.js's request machinery; the first one through the KV API.
        if (entry.revision > 0) entry.revision = await this.ports.idle.update(key, toKv(value), entry.revision)
        else entry.revision = await this.ports.idle.create(key, toKv(value))
        entry.stored = at
        return at
      } catch (err) {
        if (!isCasConflict(err)) throw err
        const current = await this.ports.idle.get(key)
        entry.revision = current?.revision ?? 0
        // An unreadable value is overwritten (compare-and-set on its revision): it proves no newer request.
        const stored = this.readIdle(key, current)
        entry.stored = 0
        if (stored) {
          const storedAt = Date.parse(stored.lastForegroundAt)
          entry.requests = Math.max(entry.requests, stored.requests ?? 0)
          entry.stored = storedAt
          if (storedAt >= at) return storedAt // another replica already has a newer time
        }
      }
    }
    throw new Error(`could not write idle state for ${key}: repeated compare-and-set conflicts`)
  }
}

/**
 * What demand remembers a cancel by (one per admitted window per resend interval) and names its msgID after. Job
 * names repeat across namespaces (and when a backfill is re-created), so it names the namespace, the claim's time and
 * its window too — else JetStream's duplicate window would drop the cancel.
 */
export const cancelKeyOf = (claim: Claim) =>
  `${claim.namespace}.${claim.jobName}.${claim.claimedAt}.${claim.idleSince ?? ''}`

/** The sender's time of a request without a store time (HTTP binding), never in the future; unreadable: now. */
function sentAt(time: string, now: number): number {
  const parsed = Date.parse(time)
  return Number.isNaN(parsed) ? now : Math.min(parsed, now)
}

/** A demand function with its own caches (one per process, or several in tests racing each other). */
export function demandFunction(settings: Settings = {}): EventFunction {
  let instance: Demand | undefined
  return {
    name: 'demand',
    // A request is acked only once the coalesced write covering it is stored (≤ COALESCE_MS later), so the
    // rate one instance sustains is about concurrency / COALESCE_MS: keep many in flight (they are small).
    concurrency: 32_768,
    // Acked in batches (AckAll up to the lowest unfinished request) only when asked (DEMAND_ACK_POLICY=all): a
    // request is finished only once its idle write is stored and the claim re-read, but the ack floor is the
    // durable's, so with several demand replicas one replica's ack can cover another's unfinished request
    // (README.md). Per-message acks stay the default, safe at any replica count.
    ackAll: settings.demandAckAll ?? false,
    // The foreground subject (the firehose) and the per-model subjects (the newest request per model).
    subscriptions: [
      { stream: STREAM_FOREGROUND, subjects: [REQUEST_SUBJECT], deliverNew: true },
      { stream: STREAM_FOREGROUND_LAST, subjects: [`${REQUEST_SUBJECT}.>`], deliverNew: true },
    ],
    async start(deps) {
      instance = Demand.overNats(deps)
      await instance.start()
    },
    async stop() {
      await instance?.stop()
      instance = undefined
    },
    handle(event) {
      if (!instance) return Promise.reject(new Error('demand function not started'))
      return instance.handle(event) ?? DONE
    },
  }
}
