// demand's view of the world: the idle bucket it writes, the claims it reads and watches, the cancels and preempts it
// publishes, its clock and its coalescing timers. Demand (index.ts) is written against these only, so the same code
// runs on NATS (nats-ports.ts) and inside the deterministic simulation (test/unit/support/dst.ts), where every call
// can fail, be slow, or find its process crashed.
import type { Clock, Entry } from '../../pkg/admission/ports.js'
import type { Claim } from '../../pkg/core/state.js'

export interface Cancel {
  namespace: string
  backfill: string
  jobName: string
  reason: 'ForegroundDemand'
  at: string
}

export interface DemandPorts extends Clock {
  /** flexinfer-idle, written by compare-and-set only (a conflict throws what isCasConflict() recognises). */
  idle: {
    get(key: string): Promise<Entry | null>
    create(key: string, text: string): Promise<number>
    update(key: string, text: string, revision: number): Promise<number>
  }
  /** The model's claim as the claims stream's leader has it at some instant after this call began. */
  readClaim(key: string): Promise<Entry | null>
  /** The watched copy of the claims (may lag behind the bucket; never a reason to skip the read above). */
  watchedClaim(key: string): Claim | undefined
  /** The cancel, stored (a duplicate msgID within JetStream's window is not stored twice). */
  publishCancel(cancel: Cancel, msgID: string): Promise<{ seq: number }>
  /** The attempt's background gate closes on this (core NATS: nothing stored, sent for every breaking request). */
  publishPreempt(namespace: string, model: string, message: { job: string; at: number }): void
  timers: { set(fire: () => void, ms: number): unknown; clear(timer: unknown): void }
  start(): Promise<void>
  stop(): Promise<void>
  /** How the claim reads were answered, where the ports count it (tests, logs). */
  readonly claimReadStats?: { versions: number; reads: number; remembered: number }
}
