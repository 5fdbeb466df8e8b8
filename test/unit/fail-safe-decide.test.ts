// The fail-safe's decisions (pkg/core/decide.ts): when it engages and lets go, which Jobs it cancels, the status it
// writes through Kubernetes, and how decide() reads that status back once NATS is back — a preemption counted under
// `other`, never a re-created Job.
import { describe, expect, it } from 'vitest'
import { decide } from '../../pkg/core/decide.js'
import type { Observed } from '../../pkg/core/decision.js'
import {
  type Blindness,
  blindStatus,
  blindTargets,
  FAILSAFE_BLIND_MS,
  FAILSAFE_REASON,
  failSafe,
  type Visibility,
} from '../../pkg/core/fail-safe.js'
import { fixture } from './support/phases.js'
import { aJob, iso, J, SECOND, T0 } from './support/world.js'

const SEEN: Visibility = { visible: true }
const BLIND: Visibility = { visible: false, why: 'NATS unreachable' }

describe('failSafe: engaged only after the bound, released by one probe that sees the path', () => {
  const start: Blindness = { lastSeenAt: T0, engaged: false }
  const cases: { what: string; probes: [number, Visibility][]; engaged: boolean; lastSeenAt: number }[] = [
    { what: 'always visible', probes: [[T0 + SECOND, SEEN]], engaged: false, lastSeenAt: T0 + SECOND },
    { what: 'blind, within the bound', probes: [[T0 + FAILSAFE_BLIND_MS, BLIND]], engaged: false, lastSeenAt: T0 },
    { what: 'blind, past the bound', probes: [[T0 + FAILSAFE_BLIND_MS + 1, BLIND]], engaged: true, lastSeenAt: T0 },
    {
      what: 'blind, then seen: let go at once',
      probes: [
        [T0 + 10 * SECOND, BLIND],
        [T0 + 11 * SECOND, SEEN],
      ],
      engaged: false,
      lastSeenAt: T0 + 11 * SECOND,
    },
    {
      what: 'seen, then blind: the bound runs from the last sighting, not from the first failed probe',
      probes: [
        [T0 + 3 * SECOND, SEEN],
        [T0 + 4 * SECOND, BLIND],
        [T0 + 3 * SECOND + FAILSAFE_BLIND_MS, BLIND],
      ],
      engaged: false,
      lastSeenAt: T0 + 3 * SECOND,
    },
    {
      what: 'a late answer to an earlier probe never moves the last sighting back',
      probes: [
        [T0 + 5 * SECOND, SEEN],
        [T0 + 4 * SECOND, SEEN],
      ],
      engaged: false,
      lastSeenAt: T0 + 5 * SECOND,
    },
  ]
  it.each(cases)('$what', ({ probes, engaged, lastSeenAt }) => {
    const end = probes.reduce((b, [at, v]) => failSafe(b, v, at, FAILSAFE_BLIND_MS), start)
    expect(end.engaged).toBe(engaged)
    expect(end.lastSeenAt).toBe(lastSeenAt)
    if (!probes.at(-1)?.[1].visible) expect(end.why).toBe('NATS unreachable')
  })
})

describe('blindTargets: every Job still running, nothing finished or already going', () => {
  it('keeps active Jobs (started or not), drops deleting and finished ones', () => {
    const jobs = [
      aJob('a', { started: true }),
      aJob('b'),
      aJob('c', { started: true, deleting: true }),
      aJob('d', { outcome: 'Complete' }),
      aJob('e', { outcome: 'Failed' }),
    ]
    expect(blindTargets(jobs).map((j) => j.name)).toEqual(['a', 'b'])
  })
})

/** The world after the fail-safe: its status on the backfill, the Job gone (or going). */
function afterFailSafe(phase: 'Starting' | 'Running', job: Observed['job']) {
  const f = fixture(phase)
  const b = f.world.backfill
  if (!b) throw new Error('no backfill')
  const message = 'foreground demand unobservable for 6s (NATS unreachable); Job deleted by the fail-safe'
  const status = blindStatus(b, J(1), message, f.now - SECOND)
  return { f, world: { ...f.world, backfill: { ...b, status }, job } as Observed, message }
}

describe('blindStatus: what Kubernetes shows while NATS may be gone', () => {
  it('Cancelling/ForegroundUnobservable naming the Job, Ready False, the rest of the status kept', () => {
    const { world, message } = afterFailSafe('Running', null)
    expect(world.backfill?.status).toMatchObject({
      phase: 'Cancelling',
      reason: FAILSAFE_REASON,
      message,
      jobName: J(1),
      attempts: 1,
      conditions: [{ type: 'Ready', status: 'False', reason: FAILSAFE_REASON }],
    })
  })
})

describe('decide after the fail-safe: a preemption under `other`, a fresh window, no Job re-created', () => {
  it.each(['Starting', 'Running'] as const)('%s, Job gone: preempted once, next attempt through the gates', (phase) => {
    const { f, world, message } = afterFailSafe(phase, null)
    const d = decide(world, { type: 'resource' }, f.now)
    expect(d.state).toMatchObject({ phase: 'WaitingForIdle', attempts: 1, jobName: undefined, windowStart: iso(f.now) })
    expect(d.state?.counters).toMatchObject({ starts: 1, preemptions: { other: 1 } })
    expect(d.actions.some((a) => a.type === 'createJob')).toBe(false)
    expect(d.actions).toContainEqual({ type: 'releaseClaims', jobName: J(1) })
    expect(d.actions).toContainEqual(
      expect.objectContaining({
        type: 'recordEvent',
        reason: 'BackfillCancelled',
        message: `Cancelled Job ${J(1)}: ${message}`,
      }),
    )
  })

  it('Running, Job still being deleted: Cancelling/ForegroundUnobservable, counted once, delete re-issued', () => {
    const { f, world } = afterFailSafe('Running', aJob(J(1), { started: true, deleting: true }))
    const d = decide(world, { type: 'resource' }, f.now)
    expect(d.state).toMatchObject({ phase: 'Cancelling', reason: FAILSAFE_REASON })
    expect(d.state?.counters.preemptions).toEqual({ other: 1 })
    expect(d.actions).toContainEqual({ type: 'deleteJob', jobName: J(1), why: FAILSAFE_REASON })
    // The same world decided again (a redelivery) counts nothing more.
    const again = decide({ ...world, state: d.state }, { type: 'resource' }, f.now + SECOND)
    expect(again.state?.counters.preemptions).toEqual({ other: 1 })
  })

  it('a stale fail-safe status naming an earlier Job does not touch the current attempt', () => {
    const f = fixture('Running')
    const b = f.world.backfill
    if (!b) throw new Error('no backfill')
    const status = blindStatus(b, 'an-earlier-job', 'old', f.now - 60 * SECOND)
    const d = decide({ ...f.world, backfill: { ...b, status } }, { type: 'resource' }, f.now)
    expect(d.state).toMatchObject({ phase: 'Running', jobName: J(1) })
    expect(d.state?.counters.preemptions).toEqual({})
  })

  it('a Starting Job gone without the fail-safe status is still re-created (a crash between state and POST)', () => {
    const f = fixture('Starting')
    const d = decide({ ...f.world, job: null }, { type: 'resource' }, f.now)
    expect(d.actions).toContainEqual(expect.objectContaining({ type: 'createJob', jobName: J(1) }))
  })
})
