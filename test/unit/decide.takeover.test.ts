// decide() with no stored state (pkg/core/takeover.ts): a new declaration, an object FlexInfer's controller left
// (its status, its Jobs), or one whose KV state was lost. One row per case: what Kubernetes shows → the first
// decision. Then the status fields the FlexInfer reference controller reports (nodeName, nextRunTime, idleSince, jobName, a Job that
// never starts).
import { describe, expect, it } from 'vitest'
import type { ModelBackfillStatus } from '../../pkg/core/api.js'
import { NOT_STARTING_MS } from '../../pkg/core/attempt.js'
import { decide } from '../../pkg/core/decide.js'
import type { Action, Observed } from '../../pkg/core/decision.js'
import { firstWindowStart } from '../../pkg/core/takeover.js'
import { fixture } from './support/phases.js'
import {
  aBackfill,
  aJob,
  aModel,
  anIdleState,
  aWorld,
  HOUR,
  iso,
  J,
  MINUTE,
  NODE,
  OTHER_NODE,
  T0,
  Timeline,
} from './support/world.js'

type ActionLike = Partial<Action> & { type: Action['type'] } & Record<string, unknown>
const NOW = T0 + 2 * HOUR
const TAKEN: ActionLike = { type: 'recordEvent', eventType: 'Normal', reason: 'TakenOver' }
const admitted = (attempt: number): ActionLike[] => [
  { type: 'createJob', jobName: J(attempt), attempt },
  { type: 'recordEvent', reason: 'BackfillStarted' },
]

/** What the FlexInfer reference controller (or this project, before its KV state was lost) left in the status. */
const refStatus = (s: Partial<ModelBackfillStatus>): ModelBackfillStatus => ({ observedGeneration: 1, ...s })
const running = (attempt: number, o: Partial<ModelBackfillStatus> = {}) =>
  refStatus({
    phase: 'Running',
    reason: 'JobRunning',
    jobName: J(attempt),
    nodeName: NODE,
    attempts: attempt,
    idleSince: iso(NOW - 40 * MINUTE),
    startedAt: iso(NOW - 30 * MINUTE),
    ...o,
  })

interface Row {
  what: string
  world: Partial<Observed>
  generation?: number
  status?: ModelBackfillStatus
  spec?: Record<string, unknown>
  expect: { phase: string; reason: string; jobName?: string; attempts?: number; statusJob?: string }
  actions: ActionLike[]
}

const ROWS: Row[] = [
  {
    what: 'new declaration, nothing known about the model → a full window from now',
    world: {},
    expect: { phase: 'WaitingForIdle', reason: 'IdleWindow', attempts: 0 },
    actions: [{ type: 'armTimer', at: iso(NOW + 10 * MINUTE) }],
  },
  {
    what: 'new declaration, idle KV says the last request was 1h ago → admitted at once',
    world: { idle: anIdleState(NOW - HOUR) },
    expect: { phase: 'Starting', reason: 'JobCreated', jobName: J(1), attempts: 1 },
    actions: admitted(1),
  },
  {
    what: 'new declaration, Model.status.lastActiveTime 1h ago (no idle KV) → admitted at once',
    world: { model: aModel({ lastActiveTime: iso(NOW - HOUR) }) },
    expect: { phase: 'Starting', reason: 'JobCreated', jobName: J(1), attempts: 1 },
    actions: admitted(1),
  },
  {
    what: 'new declaration, lastActiveTime 3m ago, idle KV older → the window ends 10m after lastActiveTime',
    world: { model: aModel({ lastActiveTime: iso(NOW - 3 * MINUTE) }), idle: anIdleState(NOW - HOUR) },
    expect: { phase: 'WaitingForIdle', reason: 'IdleWindow' },
    actions: [{ type: 'armTimer', at: iso(NOW + 7 * MINUTE) }],
  },
  {
    what: 'new declaration, newest stored request (NATS) 2m ago wins over an older lastActiveTime',
    world: { model: aModel({ lastActiveTime: iso(NOW - HOUR) }), lastRequestAt: iso(NOW - 2 * MINUTE) },
    expect: { phase: 'WaitingForIdle', reason: 'IdleWindow' },
    actions: [{ type: 'armTimer', at: iso(NOW + 8 * MINUTE) }],
  },
  {
    what: 'Succeeded one-shot, same generation, Job removed by its TTL → stays Succeeded, jobName still shown',
    world: { idle: anIdleState(NOW - HOUR) },
    status: refStatus({ phase: 'Succeeded', reason: 'JobComplete', jobName: J(1), attempts: 1 }),
    expect: { phase: 'Succeeded', reason: 'JobComplete', attempts: 1, statusJob: J(1) },
    actions: [TAKEN],
  },
  {
    what: 'Succeeded one-shot, its completed Job still there → stays Succeeded, nothing reruns',
    world: { idle: anIdleState(NOW - HOUR), job: aJob(J(1), { started: true, outcome: 'Complete' }) },
    status: refStatus({ phase: 'Succeeded', reason: 'JobComplete', jobName: J(1), attempts: 1 }),
    expect: { phase: 'Succeeded', reason: 'JobComplete', jobName: J(1), attempts: 1, statusJob: J(1) },
    actions: [TAKEN],
  },
  {
    what: 'Failed, same generation → stays Failed (terminal until the spec changes)',
    world: { idle: anIdleState(NOW - HOUR) },
    status: refStatus({ phase: 'Failed', reason: 'JobFailed', jobName: J(2), attempts: 2 }),
    expect: { phase: 'Failed', reason: 'JobFailed', attempts: 2, statusJob: J(2) },
    actions: [TAKEN],
  },
  {
    what: 'Succeeded for an older generation → starts over (the spec changed while nobody watched)',
    world: { idle: anIdleState(NOW - HOUR) },
    generation: 2,
    status: refStatus({ phase: 'Succeeded', reason: 'JobComplete', jobName: J(1), attempts: 1 }),
    expect: { phase: 'Starting', reason: 'JobCreated', jobName: J(2), attempts: 2 },
    actions: [TAKEN, ...admitted(2)],
  },
  {
    what: 'Succeeded with repeatAfter, nextRunTime ahead → RepeatScheduled, its timer armed',
    world: { idle: anIdleState(NOW - HOUR) },
    spec: { repeatAfter: '1h' },
    status: refStatus({
      phase: 'Succeeded',
      reason: 'RepeatScheduled',
      jobName: J(1),
      attempts: 1,
      completionTime: iso(NOW - 30 * MINUTE),
      nextRunTime: iso(NOW + 30 * MINUTE),
    }),
    expect: { phase: 'Succeeded', reason: 'RepeatScheduled', attempts: 1 },
    actions: [TAKEN, { type: 'armTimer', at: iso(NOW + 30 * MINUTE) }],
  },
  {
    what: 'Running with its Job running → adopted: claims taken, no new Job, no stray delete',
    world: { idle: anIdleState(NOW - HOUR), job: aJob(J(3), { started: true, createdAt: iso(NOW - 30 * MINUTE) }) },
    status: running(3),
    expect: { phase: 'Running', reason: 'JobRunning', jobName: J(3), attempts: 3 },
    actions: [TAKEN, { type: 'takeClaims', jobName: J(3), attempt: 3, node: NODE }],
  },
  {
    what: 'Running, adopted, but a foreground request came after its window → adopted and cancelled',
    world: { idle: anIdleState(NOW - MINUTE), job: aJob(J(3), { started: true }) },
    status: running(3),
    expect: { phase: 'Cancelling', reason: 'ForegroundDemand', jobName: J(3), attempts: 3 },
    actions: [
      TAKEN,
      { type: 'takeClaims', jobName: J(3) },
      { type: 'recordEvent', reason: 'BackfillCancelled' },
      { type: 'deleteJob', jobName: J(3), why: 'ForegroundDemand' },
    ],
  },
  {
    what: 'Running for generation 1, spec now generation 2 → adopted and cancelled (SpecChanged)',
    world: { idle: anIdleState(NOW - HOUR), job: aJob(J(1), { started: true }) },
    generation: 2,
    status: running(1),
    expect: { phase: 'Cancelling', reason: 'SpecChanged', jobName: J(1) },
    actions: [
      TAKEN,
      { type: 'takeClaims', jobName: J(1) },
      { type: 'recordEvent', reason: 'BackfillCancelled' },
      { type: 'deleteJob', jobName: J(1), why: 'SpecChanged' },
    ],
  },
  {
    what: 'Running, its Job gone (ended unseen) → a fresh full window, attempts kept',
    world: { idle: anIdleState(NOW - HOUR) },
    status: running(3),
    expect: { phase: 'WaitingForIdle', reason: 'IdleWindow', attempts: 3 },
    actions: [TAKEN, { type: 'armTimer', at: iso(NOW + 10 * MINUTE) }],
  },
  {
    what: 'Running, its Job completed meanwhile → counted as a success',
    world: { idle: anIdleState(NOW - HOUR), job: aJob(J(3), { started: true, outcome: 'Complete' }) },
    status: running(3),
    expect: { phase: 'Succeeded', reason: 'JobComplete', jobName: J(3), attempts: 3 },
    actions: [TAKEN, { type: 'releaseClaims', jobName: J(3) }, { type: 'recordEvent', reason: 'Completed' }],
  },
  {
    what: 'status lost its jobName (a lost status write) but the backfill owns an active Job → adopted, not a stray',
    world: { idle: anIdleState(NOW - HOUR), strays: [aJob(J(2), { started: true })] },
    status: refStatus({ phase: 'WaitingForIdle', reason: 'IdleWindow', attempts: 1 }),
    expect: { phase: 'Running', reason: 'JobRunning', jobName: J(2), attempts: 2 },
    actions: [TAKEN, { type: 'takeClaims', jobName: J(2), attempt: 2 }],
  },
  {
    what: 'two active owned Jobs → the one the status names is adopted, the other deleted as a stray',
    world: {
      idle: anIdleState(NOW - HOUR),
      job: aJob(J(3), { started: true }),
      strays: [aJob(J(2), { started: true })],
    },
    status: running(3),
    expect: { phase: 'Running', reason: 'JobRunning', jobName: J(3), attempts: 3 },
    actions: [TAKEN, { type: 'takeClaims', jobName: J(3) }, { type: 'deleteJob', jobName: J(2), why: 'Cleanup' }],
  },
  {
    what: 'a status with values of the wrong type is read leniently (nothing crashes)',
    world: {},
    status: { phase: 'Nonsense', attempts: -4, idleSince: 'yesterday', observedGeneration: 1 } as never,
    expect: { phase: 'WaitingForIdle', reason: 'IdleWindow', attempts: 0 },
    actions: [{ type: 'armTimer', at: iso(NOW + 10 * MINUTE) }],
  },
]

const expectActions = (actions: Action[], expected: ActionLike[]) => {
  const withoutFinalizer = actions.filter((a) => a.type !== 'addFinalizer')
  expect(withoutFinalizer).toHaveLength(expected.length)
  expect(withoutFinalizer).toEqual(expect.arrayContaining(expected.map((a) => expect.objectContaining(a))))
}

describe('takeover: the first decision without a stored state', () => {
  for (const row of ROWS) {
    it(row.what, () => {
      const backfill = aBackfill({ generation: row.generation, status: row.status, spec: row.spec as never })
      const d = decide(aWorld({ backfill, ...row.world }), { type: 'resource' }, NOW)
      expect(d.state).toMatchObject({
        phase: row.expect.phase,
        reason: row.expect.reason,
        ...(row.expect.attempts === undefined ? {} : { attempts: row.expect.attempts }),
      })
      expect(d.state?.jobName).toBe(row.expect.jobName)
      if (row.expect.statusJob) expect(d.status?.jobName).toBe(row.expect.statusJob)
      expectActions(d.actions, row.actions)
    })
  }

  it('counters do not start below what the status proves: starts ≥ attempts, one success for a Succeeded', () => {
    const b = aBackfill({ status: refStatus({ phase: 'Succeeded', reason: 'JobComplete', attempts: 4 }) })
    const d = decide(aWorld({ backfill: b }), { type: 'resource' }, NOW)
    expect(d.state?.counters).toMatchObject({ starts: 4, success: 1, failed: 0 })
  })

  it('an adopted attempt is cancelled later like any other (cancel request after its window)', () => {
    const b = aBackfill({ status: running(3) })
    const t = new Timeline(aWorld({ backfill: b, idle: anIdleState(NOW - HOUR), job: aJob(J(3), { started: true }) }))
    t.step(NOW)
    const fg = NOW + MINUTE
    t.change((o) => ({ idle: anIdleState(fg), job: o.job && { ...o.job, deleting: true } }))
    const d = t.step(fg, { type: 'cancel', reason: 'ForegroundDemand', at: iso(fg) })
    expect(d.state).toMatchObject({ phase: 'Cancelling', reason: 'ForegroundDemand' })
    expect(d.state?.counters.preemptions).toEqual({ foreground: 1 })
    // Useful time runs from the FlexInfer reference controller's startedAt.
    expect(d.state?.counters.usefulSeconds).toBe(31 * 60)
  })

  it('firstWindowStart: the newest known activity, now when nothing is known', () => {
    expect(firstWindowStart([undefined, 'bad', iso(T0), iso(T0 + MINUTE)], NOW)).toBe(T0 + MINUTE)
    expect(firstWindowStart([undefined, 'bad'], NOW)).toBe(NOW)
  })
})

describe('status fields as the FlexInfer reference controller reports them', () => {
  it('nodeName is the model node while waiting and while blocked, cleared when it cannot be resolved', () => {
    const t = new Timeline(aWorld())
    expect(t.step(T0).status).toMatchObject({ phase: 'WaitingForIdle', nodeName: NODE })
    t.change(() => ({ template: { found: false } }))
    expect(t.step(T0 + 10 * MINUTE).status).toMatchObject({ phase: 'Blocked', nodeName: NODE })
    t.change(() => ({ template: { found: true, gpu: [] }, model: aModel({ node: undefined }) }))
    expect(t.step(T0 + 11 * MINUTE).status).toMatchObject({ reason: 'NodeUnresolved' })
    expect(t.last?.status).not.toHaveProperty('nodeName')
    t.change(() => ({ model: aModel({ node: OTHER_NODE }) }))
    expect(t.step(T0 + 12 * MINUTE).status?.nodeName).toBe(OTHER_NODE)
  })

  it('idleSince is cleared while the model is not Ready', () => {
    const t = new Timeline(aWorld())
    expect(t.step(T0).status?.idleSince).toBe(iso(T0))
    t.change(() => ({ model: aModel({ ready: false, phase: 'Loading' }) }))
    const d = t.step(T0 + MINUTE)
    expect(d.status).toMatchObject({ phase: 'WaitingForIdle', reason: 'ModelNotReady' })
    expect(d.status).not.toHaveProperty('idleSince')
  })

  it('RepeatDue clears nextRunTime', () => {
    const f = fixture('Succeeded', { repeatAfter: '1h' })
    const t = new Timeline(f.world)
    const next = Date.parse(f.state.nextRunTime as string)
    // The Job was removed by its TTL meanwhile; a foreground request keeps the model busy at the due time.
    t.change(() => ({ job: null, idle: anIdleState(next - MINUTE) }))
    const d = t.step(next)
    expect(d.status).toMatchObject({ phase: 'WaitingForIdle', reason: 'RepeatDue' })
    expect(d.status).not.toHaveProperty('nextRunTime')
  })

  it('jobName is kept when a finished Job is removed by its TTL (Succeeded and Failed)', () => {
    for (const phase of ['Succeeded', 'Failed'] as const) {
      const f = fixture(phase)
      const t = new Timeline(f.world)
      const d = t.change(() => ({ job: null })).step(f.now)
      expect(d.state?.jobName).toBeUndefined()
      expect(d.status).toMatchObject({ phase, jobName: J(1) })
    }
  })

  it('a spec change after a TTL-removed Job clears the kept jobName', () => {
    const f = fixture('Succeeded')
    const t = new Timeline(f.world)
    t.change(() => ({ job: null })).step(f.now)
    t.change((o) => ({
      backfill: o.backfill && aBackfill({ generation: 2, status: o.backfill.status }),
      idle: anIdleState(f.now),
    }))
    expect(t.step(f.now + MINUTE).status).toMatchObject({ phase: 'WaitingForIdle' })
    expect(t.last?.status).not.toHaveProperty('jobName')
  })

  it('a Job created suspended by its template is reported at once (message + one Warning), attempt kept', () => {
    const f = fixture('Starting')
    const t = new Timeline(f.world)
    t.change(() => ({ job: aJob(J(1), { suspended: true }) }))
    const d = t.step(f.now)
    expect(d.status).toMatchObject({ phase: 'Starting', reason: 'JobCreated', jobName: J(1) })
    expect(d.status?.message).toMatch(/suspended .*jobTemplate.spec.suspend/)
    expect(d.actions).toEqual([expect.objectContaining({ type: 'recordEvent', reason: 'JobNotStarting' })])
    expect(t.step(f.now + MINUTE).actions).toEqual([])
    // A foreground request still cancels it.
    t.change(() => ({ idle: anIdleState(f.now + 2 * MINUTE) }))
    expect(t.step(f.now + 2 * MINUTE).state).toMatchObject({ phase: 'Cancelling', reason: 'ForegroundDemand' })
  })

  it('a Job whose pods never start is reported after NOT_STARTING_MS, once', () => {
    const f = fixture('Starting')
    const t = new Timeline(f.world)
    const created = Date.parse(f.state.startedAt as string)
    expect(t.step(created + NOT_STARTING_MS - 1).status?.message).toMatch(/waiting for it to start/)
    const d = t.step(created + NOT_STARTING_MS)
    expect(d.status?.message).toMatch(/has not started 5m after its creation/)
    expect(d.actions).toEqual([expect.objectContaining({ type: 'recordEvent', eventType: 'Warning' })])
    expect(t.step(created + NOT_STARTING_MS + MINUTE).actions).toEqual([])
    t.change((o) => ({ job: o.job && { ...o.job, started: true } }))
    expect(t.step(created + NOT_STARTING_MS + 2 * MINUTE).state?.phase).toBe('Running')
  })
})
