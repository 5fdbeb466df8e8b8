// One realistic state per phase, reached by driving decide() through a short story (never hand-written states),
// with a world left quiet afterwards so a test can add exactly one change. Every fixture uses idleFor 10m.
import type { ModelBackfillSpec, Phase } from '../../../pkg/core/api.js'
import type { Observed } from '../../../pkg/core/decision.js'
import type { BackfillState } from '../../../pkg/core/state.js'
import {
  aBackfill,
  aGamingSession,
  aJob,
  anIdleState,
  aWorld,
  cancelRequest,
  iso,
  J,
  MINUTE,
  T0,
  Timeline,
  withSpec,
} from './world.js'

export interface Fixture {
  phase: Phase
  reason: string
  /** The world the state was decided in, with the state committed. */
  world: Observed
  state: BackfillState
  /** When the next decision happens. */
  now: number
}

/**
 * The story behind each fixture (idleFor 10m, one-shot unless `spec` says otherwise):
 * - WaitingForIdle: created at T0 (window T0..T0+10m); next decision at T0+10m, when the window is complete.
 * - Starting: admitted at T0+10m (Job J1 created, not started); next at T0+11m.
 * - Running: J1 observed started at T0+11m; next at T0+15m.
 * - Cancelling: foreground request at T0+14m; the cancel function deleted J1 (still terminating); next at T0+15m.
 * - Succeeded / Failed: J1 finished at T0+20m (the Job still exists); next at T0+25m.
 * - Suspended: spec.suspend set at T0+1m (generation 2); next at T0+10m.
 * - Blocked: a gaming session (expiring T0+12m) blocked admission at T0+10m; it has since been deleted; next at T0+11m.
 */
export function fixture(phase: Phase, spec: Partial<ModelBackfillSpec> = {}): Fixture {
  const t = new Timeline(aWorld({ backfill: aBackfill({ spec }) }))
  t.step(T0)
  let now = T0 + 10 * MINUTE
  const job1 = () => t.world.job ?? aJob(J(1))
  if (phase !== 'WaitingForIdle' && phase !== 'Suspended' && phase !== 'Blocked') {
    t.step(T0 + 10 * MINUTE)
    t.change(() => ({ job: aJob(J(1)) }))
    now = T0 + 11 * MINUTE
    if (phase !== 'Starting') {
      t.change(() => ({ job: { ...job1(), started: true } })).step(T0 + 11 * MINUTE)
      now = T0 + 15 * MINUTE
    }
    if (phase === 'Cancelling') {
      // The demand function saw the request and asked for a cancel; the cancel function deleted the Job first.
      const at = T0 + 14 * MINUTE
      t.change(() => ({ idle: anIdleState(at), job: { ...job1(), deleting: true } })).step(at, cancelRequest(at))
    }
    if (phase === 'Succeeded' || phase === 'Failed') {
      const at = T0 + 20 * MINUTE
      t.change(() => ({
        job: { ...job1(), outcome: phase === 'Succeeded' ? 'Complete' : 'Failed', outcomeTime: iso(at) },
      })).step(at)
      now = T0 + 25 * MINUTE
    }
  }
  if (phase === 'Suspended') {
    t.change((o) => ({ backfill: withSpec(o.backfill ?? aBackfill(), { suspend: true }) })).step(T0 + MINUTE)
  }
  if (phase === 'Blocked') {
    t.change(() => ({ gamingSessions: [aGamingSession({ expiresAt: iso(T0 + 12 * MINUTE) })] })).step(T0 + 10 * MINUTE)
    t.change(() => ({ gamingSessions: [] }))
    now = T0 + 11 * MINUTE
  }
  const state = t.state
  if (state.phase !== phase) throw new Error(`fixture ${phase}: reached ${state.phase}/${state.reason}`)
  return { phase, reason: state.reason, world: t.world, state, now }
}
