// Per-backfill attempt state, stored as readable JSON in NATS KV (`flexinfer-backfills`, key
// `<namespace>.<backfill>`) and written only by compare-and-set. It is the authority the functions coordinate
// through; the ModelBackfill status is its projection. Metric counters live here too, so an increment commits
// atomically with the transition that causes it and is never lost when an instance scales to zero.
import type { Phase } from './api.js'

export const PREEMPTION_REASONS = [
  'foreground',
  'gaming',
  'gpu_lease',
  'suspended',
  'spec_changed',
  'model_unavailable',
  'other',
] as const
export type PreemptionReason = (typeof PREEMPTION_REASONS)[number]

export interface Counters {
  starts: number
  success: number
  failed: number
  preemptions: Partial<Record<PreemptionReason, number>>
  usefulSeconds: number
}

export interface BackfillState {
  namespace: string
  name: string
  uid?: string
  model: string
  /** metadata.generation the state was decided for; a bump means the spec changed. */
  generation: number
  phase: Phase
  reason: string
  message: string
  /** Jobs created so far (every attempt, retries included). */
  attempts: number
  /** The current attempt's Job, from admission until the Job is gone. */
  jobName?: string
  nodeName?: string
  /** Earliest instant the idle window may start from (set on creation, after a cancel, when a model turns Ready). */
  windowStart: string
  idleSince?: string
  startedAt?: string
  /** Where the attempt's useful time counts from (its startedAt) until counted; cleared once counted. */
  runningSince?: string
  completionTime?: string
  nextRunTime?: string
  /** Set once the deletion of the ModelBackfill has cancelled its running attempt (counted once). */
  deletionCancelled?: boolean
  /** Consecutive attempts whose Job the apiserver refused (quota, webhook): spaces out the re-checks. */
  rejections?: number
  /** Due time of the armed timer, so timers are re-armed lazily rather than on every foreground request. */
  timerAt?: string
  counters: Counters
  updatedAt: string
}

export const emptyCounters = (): Counters => ({ starts: 0, success: 0, failed: 0, preemptions: {}, usefulSeconds: 0 })

/** Per-model idle state (`flexinfer-model-idle`, key `<namespace>.<model>`), written by the demand function. */
export interface ModelIdleState {
  namespace: string
  model: string
  /** Time of the newest foreground request seen (the gateway's request time, not arrival time). */
  lastForegroundAt: string
  /** Foreground requests folded into this entry since it was created (coalesced writes). */
  requests: number
  updatedAt: string
}

/**
 * Exclusive claim (`flexinfer-claims`, keys `model.<namespace>.<model>` and `node.<node>`): at most one active
 * backfill attempt per model and per node, even with admit replicas racing. Created with KV create (fails if held).
 */
export interface Claim {
  namespace: string
  backfill: string
  attempt: number
  jobName: string
  claimedAt: string
}
