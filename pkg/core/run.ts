// The run identity: one run is every attempt until its work Succeeds or Fails, or the spec changes (with repeatAfter
// the next run is a new one). Each attempt's Job carries the run's identity and the attempt's number within the run
// (FLEXINFER_RUN_ID, FLEXINFER_ATTEMPT), so a workload can keep what earlier attempts of its run completed. Pure.
//
// The identity lives in the backfill state, which admission commits (compare-and-set, Starting) before the Job's
// POST: a crash at any point after it finds the identity there, and a crash before it left no Job carrying one. It
// is derived, never random: sha256 of the owner's UID, the generation and the backfill's attempt number that began
// the run, so a retried or taken-back admission of that attempt derives the very same identity.
import { createHash } from 'node:crypto'

export const RUN_ID_ENV = 'FLEXINFER_RUN_ID'
export const ATTEMPT_ENV = 'FLEXINFER_ATTEMPT'
/** Hex characters of the identity: DNS-safe, so a workload may put it in an object name. */
export const RUN_ID_LENGTH = 16
export const RUN_ID_RE = /^[0-9a-f]{16}$/

/** The part of the backfill state the run rules read and write. */
export interface RunFields {
  namespace: string
  name: string
  uid?: string
  generation: number
  /** Jobs created so far for the backfill (every run). */
  attempts: number
  /** The current run's identity, or the last run's once it ended (runEnded). */
  runId?: string
  /** Attempts of that run so far: the current attempt's number within its run. */
  runAttempt?: number
  /** The run named by runId is over (Succeeded, Failed, or its spec changed): the next admission begins a new one. */
  runEnded?: boolean
  /** The run's progress as its attempts reported it (pkg/core/progress.ts): a new run starts from nothing. */
  runDone?: number
  runTotal?: number
  runDiscarded?: number
}

export function runIdOf(owner: string, generation: number, firstAttempt: number): string {
  return createHash('sha256').update(`${owner}\n${generation}\n${firstAttempt}`).digest('hex').slice(0, RUN_ID_LENGTH)
}

const owner = (s: RunFields) => s.uid || `${s.namespace}/${s.name}`

/** An attempt is admitted (s.attempts already counts it): it continues the open run, or begins a new one. */
export function beginAttempt(s: RunFields): void {
  if (!s.runId || s.runEnded || !s.runAttempt) {
    s.runId = runIdOf(owner(s), s.generation, s.attempts)
    s.runAttempt = 1
    s.runEnded = undefined
    s.runDone = undefined
    s.runTotal = undefined
    s.runDiscarded = undefined
    return
  }
  s.runAttempt += 1
}

/**
 * An admission taken back before its Job existed (abandoned, or refused by the apiserver): the attempt was never
 * the run's. A run whose only attempt it was is forgotten; the next admission derives the same identity again.
 */
export function takeBackAttempt(s: RunFields): void {
  const left = (s.runAttempt ?? 0) - 1
  if (left > 0) {
    s.runAttempt = left
    return
  }
  s.runId = undefined
  s.runAttempt = undefined
  s.runEnded = undefined
}

/** The run's work Succeeded or Failed, or the spec changed: the identity stays shown, the next attempt gets a new one. */
export function endRun(s: RunFields): void {
  if (s.runId) s.runEnded = true
}

/** A run identity and attempt number as the status shows them, when both are sound (takeover reads them back). */
export function soundRun(runId: unknown, runAttempt: unknown): { runId: string; runAttempt: number } | undefined {
  if (typeof runId !== 'string' || !RUN_ID_RE.test(runId)) return undefined
  if (!Number.isInteger(runAttempt) || (runAttempt as number) < 1) return undefined
  return { runId, runAttempt: runAttempt as number }
}
