// needsResync(): which backfills a sweep re-decides. A table over every reason, then the stories that matter:
// what decide() leaves behind after handling its events is never picked (a settled cluster costs nothing), and
// what a lost event leaves behind always is.
import { describe, expect, it } from 'vitest'
import type { Observed } from '../../pkg/core/decision.js'
import { needsResync, type ResyncInput, type ResyncReason, TIMER_GRACE_MS } from '../../pkg/core/resync.js'
import type { BackfillState } from '../../pkg/core/state.js'
import {
  aBackfill,
  aJob,
  aModel,
  aWorld,
  iso,
  J,
  MINUTE,
  SECOND,
  T0,
  Timeline,
  templateMissing,
} from './support/world.js'

/** The input the sweep would build from a Timeline's world, with its timer stored unless told otherwise. */
function input(o: Observed, extra: Partial<ResyncInput> = {}): ResyncInput {
  return {
    backfill: o.backfill ?? aBackfill(),
    state: o.state,
    job: o.job,
    model: o.model,
    timerStored: true,
    ...extra,
  }
}

/** A settled WaitingForIdle backfill (timer at T0 + 10 min), its status written. */
function waiting(): Timeline {
  const t = new Timeline()
  t.step(T0)
  return t
}

describe('needsResync: one row per reason', () => {
  const now = T0 + MINUTE
  const rows: [string, (t: Timeline) => ResyncInput, ResyncReason | null][] = [
    ['settled, timer stored, status current', (t) => input(t.world), null],
    [
      'the object is being deleted (the finalizer holds it)',
      (t) =>
        input(t.world, {
          backfill: { ...aBackfill({ deletionTimestamp: iso(now) }), status: t.world.backfill?.status },
        }),
      'DeletionUnseen',
    ],
    ['no state at all', (t) => input(t.world, { state: null }), 'NoState'],
    [
      'spec changed and nobody decided it',
      (t) => input(t.world, { backfill: { ...aBackfill({ generation: 2 }), status: t.world.backfill?.status } }),
      'GenerationUnseen',
    ],
    ['a future timer whose schedule is not stored', (t) => input(t.world, { timerStored: false }), 'TimerNotStored'],
    [
      'status shows another phase than the state (a lost status write)',
      (t) => input(t.world, { backfill: { ...aBackfill(), status: { phase: 'Blocked', reason: 'TemplateNotFound' } } }),
      'StatusStale',
    ],
    ['status missing entirely', (t) => input(t.world, { backfill: aBackfill() }), 'StatusStale'],
    [
      'waiting for a Model that is there now (a lost model event)',
      (t) =>
        input(t.world, { state: { ...(t.world.state as BackfillState), reason: 'ModelNotReady', timerAt: undefined } }),
      'ModelChanged',
    ],
  ]
  it.each(rows)('%s', (_what, build, expected) => {
    expect(needsResync(build(waiting()), now)).toBe(expected)
  })

  it('an active attempt is always re-decided; one whose Job is gone, finished or going says so', () => {
    const t = waiting()
    t.step(T0 + 10 * MINUTE)
    const job = aJob(J(1), { started: true })
    t.change(() => ({ job }))
    t.step(T0 + 11 * MINUTE, { type: 'resource' })
    expect(t.state.phase).toBe('Running')
    const now = T0 + 12 * MINUTE
    expect(needsResync(input(t.world), now)).toBe('ActiveAttempt')
    expect(needsResync(input(t.world, { job: null }), now)).toBe('AttemptJobGone')
    expect(needsResync(input(t.world, { job: { ...job, outcome: 'Complete' } }), now)).toBe('AttemptJobGone')
    expect(needsResync(input(t.world, { job: { ...job, deleting: true } }), now)).toBe('AttemptJobGone')
  })

  it('Blocked ModelNotFound is re-decided once the Model exists, ModelNotReady once it is Ready, NodeUnresolved once it has a node', () => {
    const t = new Timeline(aWorld({ model: null }))
    t.step(T0)
    expect(t.state).toMatchObject({ phase: 'Blocked', reason: 'ModelNotFound' })
    expect(needsResync(input(t.world), T0 + MINUTE)).toBeNull()
    expect(needsResync(input(t.world, { model: aModel() }), T0 + MINUTE)).toBe('ModelChanged')

    const n = new Timeline(aWorld({ model: aModel({ ready: false, phase: 'Loading' }) }))
    n.step(T0)
    expect(n.state).toMatchObject({ phase: 'WaitingForIdle', reason: 'ModelNotReady' })
    expect(needsResync(input(n.world), T0 + MINUTE)).toBeNull()
    expect(needsResync(input(n.world, { model: aModel() }), T0 + MINUTE)).toBe('ModelChanged')

    const u = new Timeline(aWorld({ model: aModel({ node: undefined }) }))
    u.step(T0)
    expect(u.state).toMatchObject({ phase: 'WaitingForIdle', reason: 'NodeUnresolved' })
    expect(needsResync(input(u.world), T0 + MINUTE)).toBeNull()
    expect(needsResync(input(u.world, { model: aModel() }), T0 + MINUTE)).toBe('ModelChanged')
    expect(needsResync(input(u.world, { model: null }), T0 + MINUTE)).toBe('ModelChanged')
  })
})

describe('timers: a fired timer is in flight for a grace period, then lost', () => {
  it('the idle window timer (the repro of issue 8, item 4: WaitingForIdle past its window)', () => {
    const t = waiting()
    const due = T0 + 10 * MINUTE
    // Fired (the schedule is purged) and being handled: not picked.
    expect(needsResync(input(t.world, { timerStored: false }), due)).toBeNull()
    expect(needsResync(input(t.world, { timerStored: false }), due + TIMER_GRACE_MS - 1)).toBeNull()
    // Its handling was lost (dead-lettered during an outage): picked, for as long as nothing re-decides it.
    expect(needsResync(input(t.world, { timerStored: false }), due + TIMER_GRACE_MS)).toBe('TimerLost')
    expect(needsResync(input(t.world, { timerStored: false }), due + 60 * MINUTE)).toBe('TimerLost')
    // Once re-decided (the resync), the backfill is admitted and settled again.
    expect(t.step(due + 2 * MINUTE, { type: 'resource' }).state?.phase).toBe('Starting')
  })

  it('the re-check timer of a Blocked TemplateNotFound backfill (the other half of the repro)', () => {
    const t = new Timeline(aWorld({ template: templateMissing }))
    t.step(T0)
    expect(t.state).toMatchObject({ phase: 'Blocked', reason: 'TemplateNotFound' })
    const due = Date.parse(t.state.timerAt ?? '')
    expect(needsResync(input(t.world), T0 + SECOND)).toBeNull()
    expect(needsResync(input(t.world, { timerStored: false }), due + TIMER_GRACE_MS)).toBe('TimerLost')
    // Handled (re-check, still missing): a new timer, nothing to resync.
    t.step(due)
    expect(needsResync(input(t.world), due + TIMER_GRACE_MS)).toBeNull()
  })

  it('a timer handled without re-arming (the backfill was admitted) leaves nothing to pick', () => {
    const t = waiting()
    t.step(T0 + 10 * MINUTE)
    t.change(() => ({ job: aJob(J(1), { started: true }) })).step(T0 + 11 * MINUTE, { type: 'resource' })
    t.change(() => ({ job: aJob(J(1), { started: true, outcome: 'Complete', outcomeTime: iso(T0 + 20 * MINUTE) }) }))
    t.step(T0 + 20 * MINUTE, { type: 'resource' })
    expect(t.state).toMatchObject({ phase: 'Succeeded', reason: 'JobComplete' })
    expect(needsResync(input(t.world, { timerStored: false }), T0 + 60 * MINUTE)).toBeNull()
  })
})
