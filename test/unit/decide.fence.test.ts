// decide() and admission's fence (runtime/fence.ts): what the fence reports is just more of the world — the
// model's newest request read straight from its per-model subject, and whether the preemption path is ready.
import { describe, expect, it } from 'vitest'
import { PATH_RECHECK_MS } from '../../core/decide.js'
import { aJob, aWorld, iso, J, MINUTE, SECOND, T0, Timeline } from './support/world.js'

const WINDOW = 10 * MINUTE

describe('decide: the admission fence', () => {
  it('a request demand has not processed (seen on its per-model subject) pushes the window like the idle state', () => {
    const t = new Timeline()
    t.step(T0)
    t.change(() => ({ lastRequestAt: iso(T0 + 4 * MINUTE) }))
    const d = t.step(T0 + WINDOW)
    expect(d.state).toMatchObject({ phase: 'WaitingForIdle', reason: 'IdleWindow', idleSince: iso(T0 + 4 * MINUTE) })
    expect(d.actions.some((a) => a.type === 'createJob')).toBe(false)
    expect(t.step(T0 + 4 * MINUTE + WINDOW).state).toMatchObject({ phase: 'Starting' })
  })

  it('no Job while the preemption path is not ready: waiting, with why, re-checked soon', () => {
    const t = new Timeline()
    t.step(T0)
    t.change(() => ({ preemptionPath: { ready: false, why: 'no demand instance is pulling foreground requests' } }))
    const d = t.step(T0 + WINDOW)
    expect(d.state).toMatchObject({ phase: 'WaitingForIdle', reason: 'IdleWindow', attempts: 0 })
    expect(d.state?.message).toContain('no demand instance is pulling foreground requests')
    expect(d.actions).toContainEqual({ type: 'armTimer', at: iso(T0 + WINDOW + PATH_RECHECK_MS) })
    expect(d.actions.some((a) => a.type === 'createJob')).toBe(false)
    t.change(() => ({ preemptionPath: undefined }))
    expect(t.step(T0 + WINDOW + PATH_RECHECK_MS).state).toMatchObject({ phase: 'Starting', attempts: 1 })
  })

  it('a running attempt is cancelled by a request seen only on its per-model subject', () => {
    const t = new Timeline()
    t.step(T0)
    t.step(T0 + WINDOW)
    t.change(() => ({ job: aJob(J(1), { started: true }) }))
    t.step(T0 + WINDOW + SECOND)
    t.change(() => ({ lastRequestAt: iso(T0 + WINDOW + 2 * SECOND) }))
    const d = t.step(T0 + WINDOW + 3 * SECOND, { type: 'resource' })
    expect(d.state).toMatchObject({ phase: 'Cancelling', reason: 'ForegroundDemand' })
    expect(d.actions).toContainEqual({ type: 'deleteJob', jobName: J(1), why: 'ForegroundDemand' })
  })

  it('the fence never holds back a decision other than admission', () => {
    const world = aWorld({ preemptionPath: { ready: false, why: 'x' } })
    const t = new Timeline(world)
    expect(t.step(T0).state).toMatchObject({ phase: 'WaitingForIdle', reason: 'IdleWindow' })
  })
})
