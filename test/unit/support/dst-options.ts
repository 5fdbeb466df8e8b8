// What a schedule of the deterministic simulation (support/dst.ts) is run with and what it reports: its faults and
// options, the counts of every kind of fault and interleaving it generated, and its seeded random source.
import type { AdmissionDeps } from '../../../pkg/reconcile/deps.js'
import type { Role } from '../../../pkg/reconcile/roles.js'
import type { WorldSpec } from './dst-world-spec.js'

/** How hostile a schedule is: probabilities per step or per call. */
export interface Faults {
  /** A call fails before it takes effect / after (its reply lost). */
  failBefore: number
  failAfter: number
  /** The caller crashes at this await (never answered; its event redelivered after the ack wait). */
  crash: number
  /** An event delivered twice at once (a redelivery while the first delivery still runs). */
  duplicate: number
  /** A slow call: up to 800 ms instead of up to 30 ms. */
  slow: number
  /** A Job's watch event lost (a watch restarting): lifecycle does not hear of that change. */
  lostWatch: number
  /**
   * The Job POST, the call the protocol guards most and makes least often: its own chances to fail (before, and
   * after — each) and to be slow.
   */
  postFail: number
  postSlow: number
  /** demand's claim read after a lost compare-and-set on the idle key failing (see Simulation.aimed). */
  afterConflict: number
}

export const DEFAULT_FAULTS: Faults = {
  failBefore: 0.02,
  failAfter: 0.02,
  crash: 0.01,
  duplicate: 0.15,
  slow: 0.08,
  lostWatch: 0.05,
  postFail: 0.08,
  postSlow: 0.25,
  afterConflict: 0.3,
}

/**
 * More tries and more slow calls: what the races between two tries of one attempt need. The race-finding check runs
 * with both profiles.
 */
export const HOSTILE_FAULTS: Faults = { ...DEFAULT_FAULTS, duplicate: 0.35, slow: 0.15 }

/**
 * Fixes of the in-memory ports' own, undone (a failing seed to replay). Fixes in product code are undone on a copy of
 * it instead (test/sim/mutants.ts).
 */
export interface Reverts {
  /** The request log's reads ignore the documented subject past the fence's cursor (the port's half of that fix). */
  documentedSubjectBlind?: boolean
}

export interface SimOptions {
  seed: number
  /** Steps with requests and faults before the quiet tail that checks convergence. */
  steps?: number
  faults?: Faults
  /** Record the schedule (a replay); off, a search runs faster and replays a failing seed with it. */
  trace?: boolean
  reverts?: Reverts
  /**
   * Crash the first delivery of `role` that gets this far at its `call`-th port call (1-based): walking `call` over
   * 1, 2, … crashes an admission at every await it makes, one schedule each.
   */
  crashAt?: { role: Role | 'demand'; call: number }
  /**
   * admit and lifecycle decide on watched copies (support/sim-caches.ts), as they do in production: the default.
   * false: on fresh reads alone (a process without its copies).
   */
  caches?: boolean
  /**
   * Whether the claims bucket takes atomic batches (both free claims in one write). Default: even seeds do, odd seeds
   * run a bucket an older release made (the keys one by one), so that both paths of production are searched.
   */
  atomicClaims?: boolean
  /** The backfills and Models (default: DEFAULT_WORLD). */
  world?: WorldSpec
  /**
   * Driven by world events (support/dst-driven.ts) instead of random steps: no faults, every call answered at once,
   * a timer armed on the bus fired only when the driver ticks, a deleted Job gone only when the driver reaps it, and
   * each change of a ModelBackfill delivered to lifecycle as the source publishes it.
   */
  driven?: boolean
  /** Told of every decision the handlers act on (AdmissionDeps.decided): a per-decision oracle. */
  decided?: AdmissionDeps['decided']
}

/** How often each kind of fault and interleaving was generated in one schedule (or summed over many). */
export interface SimStats {
  /** Calls failed before / after taking effect, by the port they went to (`kv`: NATS KV, `post`: the Job POST). */
  failBefore: Record<string, number>
  failAfter: Record<string, number>
  /** Crashes, by the call the actor was awaiting. */
  crash: Record<string, number>
  /** Calls answered later than SLOW_CALL_MS, by port. */
  slow: Record<string, number>
  duplicates: number
  redeliveries: number
  lostWatch: number
  requests: { documented: number; perModel: number }
  /** Requests stored while a Job POST was in flight. */
  requestsDuringPost: number
  /** A try taking an attempt's claims while another live try of the same attempt held them. */
  interleavedTries: number
  /** Foreground cancels that found no Job and waited for the one being admitted. */
  cancelWaits: number
  jobsCreated: number
  /** Jobs deleted within RACED_MS of their creation (a request raced the admission). */
  racedJobsDeleted: number
  actors: number
  /** demand processes that crashed (and were started again with empty memory). */
  demandRestarts: number
  /** Watched copies listed again after a lost watch event; admit's reads of a ModelBackfill copy behind the apiserver. */
  relists: number
  staleCopyReads: number
  /** demand's claim reads failed after a lost compare-and-set (Faults.afterConflict). */
  aimed: number
  /** The call a `crashAt` crash hit (its op), if it was reached. */
  crashedAt?: string
}

export interface SimResult {
  seed: number
  ok: boolean
  violation?: string
  steps: number
  jobs: number
  requests: number
  /** Empty unless `trace`. */
  schedule: string[]
  stats: SimStats
}

export function emptyStats(): SimStats {
  return {
    failBefore: {},
    failAfter: {},
    crash: {},
    slow: {},
    duplicates: 0,
    redeliveries: 0,
    lostWatch: 0,
    requests: { documented: 0, perModel: 0 },
    requestsDuringPost: 0,
    interleavedTries: 0,
    cancelWaits: 0,
    jobsCreated: 0,
    racedJobsDeleted: 0,
    actors: 0,
    demandRestarts: 0,
    relists: 0,
    staleCopyReads: 0,
    aimed: 0,
  }
}

/** Adds `b` into `a`. */
export function addStats(a: SimStats, b: SimStats) {
  for (const k of ['failBefore', 'failAfter', 'crash', 'slow'] as const) {
    for (const [op, n] of Object.entries(b[k])) a[k][op] = (a[k][op] ?? 0) + n
  }
  for (const k of [
    'duplicates',
    'redeliveries',
    'lostWatch',
    'requestsDuringPost',
    'interleavedTries',
    'cancelWaits',
    'jobsCreated',
    'racedJobsDeleted',
    'actors',
    'demandRestarts',
    'relists',
    'staleCopyReads',
    'aimed',
  ] as const) {
    a[k] += b[k]
  }
  a.requests.documented += b.requests.documented
  a.requests.perModel += b.requests.perModel
}

export const bump = (m: Record<string, number>, k: string) => {
  m[k] = (m[k] ?? 0) + 1
}

/** The port a call went to, as SimStats counts it. */
export function portOf(op: string) {
  if (op === 'jobs.create') return 'post'
  if (op.startsWith('claims.') || op.startsWith('backfills.') || op.startsWith('idle.')) return 'kv'
  return op.split(/[. ]/)[0] as string
}

/** mulberry32: small, fast, and the same sequence on every machine. */
export function rng(seed: number) {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return { next, int: (n: number) => Math.floor(next() * n), chance: (p: number) => next() < p }
}
