// What a chaos run does and for how long. `full` is `npm run chaos`; `short` is the scaled-down variant that runs
// inside `npm test` (the same code with fewer faults and shorter outages). Every field can be overridden from the
// environment (CHAOS_<FIELD> in SCREAMING_SNAKE_CASE, e.g. CHAOS_KILLS=80 CHAOS_APISERVER_DOWN_MS=120000).

export interface ChaosConfig {
  seed: number
  /** Workload: models spread over nodes, `backfillsPerModel` ModelBackfills each, in two namespaces. */
  models: number
  nodes: number
  backfillsPerModel: number
  /** idleFor of each backfill: a whole number of seconds drawn from this range. */
  idleForMinS: number
  idleForMaxS: number
  /** Foreground traffic per model: quiet periods, then bursts of requests. */
  quietMinMs: number
  quietMaxMs: number
  burstMinMs: number
  burstMaxMs: number
  requestGapMinMs: number
  requestGapMaxMs: number
  /** Share of requests marked workloadClass background (they must not preempt, and the oracle ignores them). */
  backgroundShare: number
  /** Seconds of traffic before the first fault. */
  warmupMs: number
  /** Length of the fault phase; every fault starts inside it. */
  faultPhaseMs: number
  /** Traffic goes on at least this long after the last fault ended (what a fault left broken shows there). */
  trafficTailMs: number
  /** kill -9 of a random function process at random moments of the fault phase; restarted after the delay. */
  kills: number
  restartDelayMinMs: number
  restartDelayMaxMs: number
  /** Demand SIGSTOPped at this offset of the fault phase, for the longest idleFor plus `demandPauseExtraMs`. */
  demandPauseAtMs: number
  demandPauseExtraMs: number
  /** A ResourceQuota count/jobs.batch "0" in the second namespace. */
  quotaAtMs: number
  quotaForMs: number
  /**
   * nats-server stopped (SIGTERM) and started again on the same port and JetStream store — down longer than the
   * fail-safe's bound, so every running Job must be deleted through Kubernetes while it is down.
   */
  natsRestartAtMs: number
  natsDownMs: number
  /** The functions' FAILSAFE_BLIND_MS. */
  failSafeBoundMs: number
  /**
   * Oracle: a Job still live this long after the bound, into a NATS outage, ran blind (a probe period, its 1 s
   * deadline, the DELETE and the watch's delay).
   */
  failSafeSlackMs: number
  /** kube-apiserver stopped and started again. */
  apiserverStopAtMs: number
  apiserverDownMs: number
  /**
   * Hostile events published on the functions' subjects, spread over `hostileForMs` from `hostileFromMs` on. Let
   * some traffic run between them and the apiserver outage: what poison does to the preemption path shows there.
   */
  hostileEvents: number
  hostileFromMs: number
  hostileForMs: number
  /** Bodies of about 1 MiB among the hostile events. */
  hostileHugeBodies: number
  /**
   * Share of the hostile events that are poison for the preemption path: an unknown type carrying CR/LF on the
   * cancel subject (a dead-letter reason copied from it is no valid header). More of them than cancel's
   * max_ack_pending (1000) stop every preemption unless each one ends in the dead-letter stream.
   */
  hostilePoisonShare: number
  /** Oracle: a foreground request must delete a live Job of its model within this bound (after any fault). */
  cancelBoundMs: number
  /** Oracle: start-up allowance of a restarted function process (part of a kill's fault window). */
  processStartAllowanceMs: number
  /** Oracle: tolerance on both edges of an idle window timed by the watch (its delivery delay, PubAck vs store time). */
  windowToleranceMs: number
  /**
   * Oracle: the same, for a Job whose creation the apiserver's audit log times (dev/chaos/audit.ts): only the slack
   * between NATS's and the apiserver's clocks on one machine and the request's store, so the admission protocol's
   * own bound — no Job created more than 100 ms after a request stored inside its window, as the deterministic
   * simulation checks it (test/unit/support/dst.ts).
   */
  auditedWindowToleranceMs: number
  /**
   * Oracle: a Job the watch saw after a request stored inside its idle window (beyond the tolerance) is allowed only
   * when the watch saw it deleted within this long of the request's store time: the request raced the POST (no
   * read before it could see it) and foreground waited no longer than this for the Job to go.
   */
  raceDeleteBoundMs: number
  /** Every backfill settled within this time after the last fault ended. */
  settleWithinMs: number
  /** Largest resident set a function process may reach (sampled every second from /proc/<pid>/status). */
  rssLimitMb: number
}

export const full: ChaosConfig = {
  seed: 8,
  models: 20,
  nodes: 10,
  backfillsPerModel: 2,
  idleForMinS: 3,
  idleForMaxS: 6,
  quietMinMs: 2_000,
  quietMaxMs: 14_000,
  burstMinMs: 500,
  burstMaxMs: 4_000,
  requestGapMinMs: 100,
  requestGapMaxMs: 700,
  backgroundShare: 0.1,
  warmupMs: 15_000,
  faultPhaseMs: 340_000,
  trafficTailMs: 20_000,
  kills: 60,
  restartDelayMinMs: 300,
  restartDelayMaxMs: 2_000,
  demandPauseAtMs: 90_000,
  demandPauseExtraMs: 6_000,
  quotaAtMs: 115_000,
  quotaForMs: 40_000,
  natsRestartAtMs: 165_000,
  natsDownMs: 15_000,
  failSafeBoundMs: 5_000,
  failSafeSlackMs: 3_000,
  apiserverStopAtMs: 235_000,
  apiserverDownMs: 90_000,
  hostileEvents: 10_000,
  hostileFromMs: 180_000,
  hostileForMs: 30_000,
  hostileHugeBodies: 24,
  hostilePoisonShare: 0.15,
  cancelBoundMs: 10_000,
  processStartAllowanceMs: 8_000,
  windowToleranceMs: 250,
  auditedWindowToleranceMs: 100,
  raceDeleteBoundMs: 1_000,
  settleWithinMs: 60_000,
  rssLimitMb: 400,
}

export const short: ChaosConfig = {
  ...full,
  models: 8,
  nodes: 6,
  idleForMinS: 3,
  idleForMaxS: 5,
  warmupMs: 10_000,
  faultPhaseMs: 110_000,
  kills: 12,
  demandPauseAtMs: 10_000,
  demandPauseExtraMs: 10_000,
  quotaAtMs: 27_000,
  quotaForMs: 10_000,
  natsRestartAtMs: 39_000,
  natsDownMs: 9_000,
  failSafeBoundMs: 3_000,
  hostileEvents: 1_600,
  hostileFromMs: 45_000,
  // Down long enough (with its start-up, ~65 s) that a retried event outlives its retry budget (~62 s).
  apiserverStopAtMs: 72_000,
  apiserverDownMs: 50_000,
  hostileForMs: 10_000,
  hostileHugeBodies: 6,
  hostilePoisonShare: 0.7,
}

/** The preset with CHAOS_* environment overrides applied. */
export function withOverrides(base: ChaosConfig, env: NodeJS.ProcessEnv = process.env): ChaosConfig {
  const out = { ...base }
  for (const key of Object.keys(base) as (keyof ChaosConfig)[]) {
    const name = `CHAOS_${key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`
    const value = env[name]
    if (value === undefined || value === '') continue
    const n = Number(value)
    if (!Number.isFinite(n)) throw new Error(`${name}=${value} is not a number`)
    out[key] = n
  }
  return out
}

/** A small seeded PRNG (mulberry32): a run is reproducible from its seed, up to the machine's timing. */
export function rng(seed: number) {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return {
    next,
    between: (min: number, max: number) => min + next() * (max - min),
    int: (min: number, max: number) => Math.floor(min + next() * (max - min + 1)),
    pick: <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T,
  }
}
export type Rng = ReturnType<typeof rng>
