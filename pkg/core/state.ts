// Per-backfill attempt state, stored as readable JSON in NATS KV (`flexinfer-backfills`, key
// `<namespace>.<backfill>`) and written only by compare-and-set. It is the authority the functions coordinate
// through; the ModelBackfill status is its projection. Metric counters live here too, so an increment commits
// atomically with the transition that causes it and is never lost when an instance scales to zero.
//
// Every KV value carries a version (`v`) and is parsed with zod on read: one schema per value, the type derived
// from it. A value without `v` is what releases before versioning wrote (version 1) and is upgraded on read;
// a value that fails to parse is reported (never thrown) so the caller can take the object over from Kubernetes.
import { z } from 'zod'
import { PHASES } from './api.js'

/** The version every writer of this release stamps on its KV values. */
export const STATE_VERSION = 2

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

const time = z.string().refine((t) => !Number.isNaN(Date.parse(t)), 'not a timestamp')
const count = z.number().finite().nonnegative()
/**
 * Version 1 had no `v`; it is read as version 1 and upgraded. Optional in the type so values built in memory need
 * not say it: every KV write goes through toKv(), which stamps STATE_VERSION.
 */
const version = z.literal([1, STATE_VERSION]).optional()

export const Counters = z.object({
  starts: count,
  success: count,
  failed: count,
  preemptions: z.partialRecord(z.enum(PREEMPTION_REASONS), count),
  usefulSeconds: count,
  /** Beyond the contract's four: items the workloads reported completed, and those a preemption threw away. */
  itemsDone: count.optional(),
  itemsDiscarded: count.optional(),
  /** Running seconds of attempts that were preempted (counted in usefulSeconds too, as the contract says). */
  preemptedSeconds: count.optional(),
})
export type Counters = z.infer<typeof Counters>

export const BackfillStateSchema = z.object({
  v: version,
  namespace: z.string(),
  name: z.string(),
  uid: z.string().optional(),
  model: z.string(),
  /** metadata.generation the state was decided for; a bump means the spec changed. */
  generation: z.number().int(),
  phase: z.enum(PHASES),
  reason: z.string(),
  message: z.string(),
  /** Jobs created so far (every attempt, retries included). */
  attempts: z.number().int().nonnegative(),
  /** The current run's identity, or the last run's once it ended (pkg/core/run.ts). */
  runId: z.string().max(64).optional(),
  /** The current or last attempt's number within its run. */
  runAttempt: z.number().int().positive().optional(),
  /** The run named by runId is over: the next admission begins a new run. */
  runEnded: z.boolean().optional(),
  /** The run's items done and in all, as its attempts last reported them (pkg/core/progress.ts). */
  runDone: z.number().int().nonnegative().optional(),
  runTotal: z.number().int().nonnegative().optional(),
  /** Items of the run its preempted attempts reported in flight, thrown away (counters.itemsDiscarded, per run). */
  runDiscarded: z.number().int().nonnegative().optional(),
  /** The attempt Job whose report was counted last. */
  progressJob: z.string().optional(),
  /** The current attempt's Job, from admission until the Job is gone. */
  jobName: z.string().optional(),
  /** The Job of the finished attempt (Succeeded/Failed) after it is gone (TTL): status.jobName keeps showing it. */
  finishedJobName: z.string().optional(),
  /** The current attempt's node; while no attempt runs, the model's node when resolved (status.nodeName). */
  nodeName: z.string().optional(),
  /** Earliest instant the idle window may start from (set on creation, after a cancel, when a model turns Ready). */
  windowStart: time,
  idleSince: time.optional(),
  startedAt: time.optional(),
  /** Where the attempt's useful time counts from (its startedAt) until counted; cleared once counted. */
  runningSince: time.optional(),
  completionTime: time.optional(),
  nextRunTime: time.optional(),
  /** Set once the deletion of the ModelBackfill has cancelled its running attempt (counted once). */
  deletionCancelled: z.boolean().optional(),
  /** Consecutive attempts whose Job the apiserver refused (quota, webhook): spaces out the re-checks. */
  rejections: z.number().int().nonnegative().optional(),
  /** Due time of the armed timer, so timers are re-armed lazily rather than on every foreground request. */
  timerAt: time.optional(),
  /** Set when the state was seeded from the object's status and Jobs (takeover, or lost KV state). */
  takenOver: time.optional(),
  /** Set once a Warning told that the attempt's Job does not start (template suspended, pods not scheduled). */
  notStartingReported: z.boolean().optional(),
  counters: Counters,
  updatedAt: time,
})
export type BackfillState = z.infer<typeof BackfillStateSchema>

export const emptyCounters = (): Counters => ({ starts: 0, success: 0, failed: 0, preemptions: {}, usefulSeconds: 0 })

/** Per-model idle state (`flexinfer-model-idle`, key `<namespace>.<model>`), written by the demand function. */
export const ModelIdleStateSchema = z.object({
  v: version,
  namespace: z.string(),
  model: z.string(),
  /** Time of the newest foreground request seen (the gateway's request time, not arrival time). */
  lastForegroundAt: time,
  /** Foreground requests folded into this entry since it was created (coalesced writes). */
  requests: count.default(0),
  updatedAt: time,
})
export type ModelIdleState = z.infer<typeof ModelIdleStateSchema>

/**
 * Exclusive claim (`flexinfer-claims`, keys `model.<namespace>.<model>` and `node.<node>`): at most one active
 * backfill attempt per model and per node, even with admit replicas racing. Created with KV create (fails if held).
 */
export const ClaimSchema = z.object({
  v: version,
  namespace: z.string(),
  backfill: z.string(),
  attempt: z.number().int(),
  jobName: z.string(),
  claimedAt: time,
  /** Start of the idle window the attempt was admitted on: a foreground request after it cancels the attempt. */
  idleSince: time.optional(),
  /**
   * Which try took it (random): two tries of one attempt — a timer delivered twice — can start in the same
   * millisecond, and `claimedAt` alone then names both. Absent in claims written before it existed.
   */
  tryId: z.string().max(64).optional(),
})
export type Claim = z.infer<typeof ClaimSchema>

export type Parsed<T> = { ok: true; value: T } | { ok: false; error: string }

/**
 * The parses parseEntry() remembers, per parser: a KV value never changes once written (a change is a new revision
 * with its own bytes), and every reconcile reads the same few values again (its state, the model's idle state, the
 * claims), so the same text is parsed once, not on every read. Bounded (the oldest parse is forgotten first), and
 * handed out frozen: one reader cannot change what another reads.
 */
const PARSED_MEMO_MAX = 256
const memos = new WeakMap<(raw: unknown) => Parsed<unknown>, Map<string, Parsed<unknown>>>()

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o)
    for (const v of Object.values(o)) deepFreeze(v)
  }
  return o
}

function parser<S extends z.ZodType>(schema: S) {
  const parse = (raw: unknown): Parsed<z.infer<S>> => {
    const r = schema.safeParse(raw)
    if (r.success) return { ok: true, value: { ...(r.data as object), v: STATE_VERSION } as z.infer<S> }
    const why = r.error.issues
      .slice(0, 3)
      .map((i) => `${i.path.join('.') || '(value)'}: ${i.message}`)
      .join('; ')
    return { ok: false, error: why }
  }
  memos.set(parse, new Map())
  return parse
}

/** Parses a KV value of any known version into this release's shape (upgraded to STATE_VERSION). */
export const parseBackfillState = parser(BackfillStateSchema)
export const parseModelIdleState = parser(ModelIdleStateSchema)
export const parseClaim = parser(ClaimSchema)

/** The JSON a KV write stores: this release's version stamped on it. */
export const toKv = (value: object) => JSON.stringify({ ...value, v: STATE_VERSION })

/** Parses the bytes of a KV entry: JSON first, then the schema. */
export function parseEntry<T>(text: string, parse: (raw: unknown) => Parsed<T>): Parsed<T> {
  const memo = memos.get(parse) as Map<string, Parsed<T>> | undefined
  const known = memo?.get(text)
  if (known) return known
  let raw: unknown
  let r: Parsed<T> | undefined
  try {
    raw = JSON.parse(text)
  } catch (err) {
    r = { ok: false, error: `not JSON: ${(err as Error).message}` }
  }
  r ??= parse(raw)
  if (memo) {
    if (memo.size >= PARSED_MEMO_MAX) memo.delete(memo.keys().next().value as string)
    memo.set(text, deepFreeze(r))
  }
  return r
}
