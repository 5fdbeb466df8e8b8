// The working copy one decision changes, and the few writes every part of the decision makes to it: the phase
// (set), the timer (armTimer) and the report of its checks (report, pass). Only decide's own modules see it.
import type { ModelBackfill, Phase, ResolvedSpec } from './api.js'
import { type Action, CHECKS, type CheckName, type CheckReport, type CheckVerdict, type Observed } from './decision.js'
import type { BackfillState } from './state.js'

export interface Work {
  o: Observed
  b: ModelBackfill
  now: number
  s: BackfillState
  actions: Action[]
  spec: ResolvedSpec | null
  checks: CheckReport[]
  /**
   * Evaluate every check of a list, also past the first that holds (reported, never acted on): explain's evaluation
   * (everyCheck). Read by the lists' evaluators only; decide's own stops at the first.
   */
  every: boolean
}

export const iso = (ms: number) => new Date(ms).toISOString()
export const ms = (text: string | undefined) => (text ? Date.parse(text) : Number.NaN)
export const latest = (...times: (string | undefined)[]) =>
  times.reduce<number>((max, t) => {
    const v = ms(t)
    return Number.isNaN(v) ? max : Math.max(max, v)
  }, Number.NEGATIVE_INFINITY)

/**
 * The reports that need no data are shared and frozen: the common decision allocates one array and at most a couple
 * of reports, and builds no message it does not act on.
 */
const constReports = (verdict: CheckVerdict, evidence: (c: CheckName) => string): Readonly<CheckReport>[] =>
  CHECKS.map((check) => Object.freeze({ check, verdict, evidence: evidence(check) }))
export const NOT_REACHED = Object.freeze(constReports('not-reached', () => 'not evaluated'))
const PASSED = Object.freeze(constReports('pass', () => 'pass'))
const CHECK_INDEX = Object.fromEntries(CHECKS.map((c, i) => [c, i])) as Record<CheckName, number>

export function report(
  w: Work,
  check: CheckName,
  verdict: CheckVerdict,
  evidence: string,
  since?: number,
  until?: number,
) {
  const r: CheckReport = { check, verdict, evidence }
  if (since !== undefined && !Number.isNaN(since)) r.since = since
  if (until !== undefined && !Number.isNaN(until)) r.until = until
  w.checks[CHECK_INDEX[check]] = r
}

export const pass = (w: Work, check: CheckName) => {
  w.checks[CHECK_INDEX[check]] = PASSED[CHECK_INDEX[check]] as CheckReport
}

/** Lazy re-arm: a timer already due no later than `at` will fire and re-check, so it is left alone. */
export function armTimer(w: Work, at: number) {
  const current = ms(w.s.timerAt)
  if (!Number.isNaN(current) && current > w.now && current <= at) return
  w.s.timerAt = iso(at)
  w.actions.push({ type: 'armTimer', at: w.s.timerAt })
}

export function set(w: Work, phase: Phase, reason: string, message: string): true {
  const s = w.s
  if (phase === 'Blocked' && (s.phase !== 'Blocked' || s.reason !== reason)) {
    w.actions.push({ type: 'recordEvent', eventType: 'Warning', reason: 'Blocked', message: `${reason}: ${message}` })
  }
  s.phase = phase
  s.reason = reason
  s.message = message
  return true
}
