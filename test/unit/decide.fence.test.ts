// decide() and admission's fence (pkg/admission/fence.ts): what the fence reports is just more of the world — the
// model's newest request read straight from its per-model subject, and whether the preemption path is ready.
import { describe, expect, it } from 'vitest'
import { ADMISSION_IN_FLIGHT_MS } from '../../pkg/core/attempt.js'
import { PATH_RECHECK_MS } from '../../pkg/core/checks.js'
import { racedAdmission } from '../../pkg/core/decide.js'
import { aJob, aWorld, cancelRequest, iso, J, MINUTE, SECOND, T0, Timeline } from './support/world.js'

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

  // The gap between the fence's read and the Job's POST (issue 9): admit reads the newest request again as the last
  // step before the POST and once more right after it; a request stored after the window the admission stood on
  // (state.idleSince) means the attempt raced a foreground request.
  describe('an admission racing a request (the fence → create gap)', () => {
    const admitted = () => {
      const t = new Timeline()
      t.step(T0)
      const d = t.step(T0 + WINDOW)
      expect(d.state).toMatchObject({ phase: 'Starting', attempts: 1, idleSince: iso(T0) })
      return t
    }

    it.each([
      ['no request at all', undefined, false],
      ['the request the window already counts', iso(T0), false],
      ['an older request', iso(T0 - SECOND), false],
      ['a request stored after the window began', iso(T0 + 1), true],
      ['a request stored after the fence', iso(T0 + WINDOW + 5), true],
      ['an unreadable time', 'not a time', false],
    ])('racedAdmission: %s', (_, lastRequestAt, raced) => {
      const t = admitted()
      expect(racedAdmission(t.state, lastRequestAt)).toBe(raced)
    })

    it('racedAdmission: nothing to race without an admission in flight', () => {
      const t = new Timeline()
      t.step(T0)
      expect(racedAdmission(t.state, iso(T0 + MINUTE))).toBe(false)
      expect(racedAdmission(null, iso(T0 + MINUTE))).toBe(false)
    })

    it('another try seeing the request while the admission may be in flight leaves the attempt to it', () => {
      // The deterministic simulation's seed 11505: a second try of admit (a lifecycle admit request) took the attempt
      // back while the first try's POST was on the wire, giving its claims back by Job name; the Job created a moment
      // later ran unclaimed, and demand, finding no claim, cancelled nothing. Failed before: the attempt taken back.
      for (const trigger of [{ type: 'admit' }, { type: 'timer' }, { type: 'resource' }] as const) {
        const t = admitted()
        t.change(() => ({ lastRequestAt: iso(T0 + WINDOW + 5) }))
        const d = t.step(T0 + WINDOW + 10, trigger)
        expect(d.actions, trigger.type).toEqual([])
        expect(d.state, trigger.type).toMatchObject({ phase: 'Starting', attempts: 1, jobName: J(1) })
        // Past ADMISSION_IN_FLIGHT_MS the admission is taken for dead: any decision takes the attempt back.
        const late = t.step(T0 + WINDOW + ADMISSION_IN_FLIGHT_MS + 10, trigger)
        expect(late.actions, trigger.type).toContainEqual({ type: 'releaseClaims', jobName: J(1) })
        expect(late.state, trigger.type).toMatchObject({ phase: 'WaitingForIdle', attempts: 0 })
      }
    })

    it('seen before the POST: the attempt is taken back uncounted, no Job, and a new window starts', () => {
      const t = admitted()
      t.change(() => ({ lastRequestAt: iso(T0 + WINDOW + 5) }))
      // The admission's own decision after its read before the POST saw the request.
      const d = t.step(T0 + WINDOW + 10, { type: 'raced', jobName: J(1) })
      expect(d.actions.some((a) => a.type === 'createJob')).toBe(false)
      expect(d.actions).toContainEqual({ type: 'releaseClaims', jobName: J(1) })
      // The next window runs from the attempt's end (after the request), as for any ended attempt.
      expect(d.state).toMatchObject({ phase: 'WaitingForIdle', attempts: 0, idleSince: iso(T0 + WINDOW + 10) })
      expect(d.state?.counters).toMatchObject({ starts: 0, preemptions: {} })
    })

    it('seen after the POST, the Job deleted by admit itself: counted as a foreground preemption', () => {
      const t = admitted()
      const at = T0 + WINDOW + 5
      // Foreground propagation: the Job is still there, marked for deletion.
      t.change(() => ({ lastRequestAt: iso(at), job: aJob(J(1), { deleting: true }) }))
      const d = t.step(T0 + WINDOW + 20, cancelRequest(at))
      expect(d.state).toMatchObject({ phase: 'Cancelling', reason: 'ForegroundDemand', attempts: 1 })
      expect(d.state?.counters.preemptions).toEqual({ foreground: 1 })
      // Gone: the attempt ends, counted once, and a new window starts.
      t.change(() => ({ job: null }))
      const end = t.step(T0 + WINDOW + 40, { type: 'resource' })
      expect(end.state).toMatchObject({ phase: 'WaitingForIdle', idleSince: iso(T0 + WINDOW + 40) })
      expect(end.state?.counters.preemptions).toEqual({ foreground: 1 })
      expect(end.actions).toContainEqual({ type: 'releaseClaims', jobName: J(1) })
    })

    it('the read after the POST unanswered, the Job deleted by admit itself: a fail-safe preemption, a new window', () => {
      // pkg/admission/protocol.ts post(): no request could be ruled out, so admit deleted the Job it had just created and
      // decides again with the fail-safe's reason. Counted once, the claims released, and the next window starts then:
      // no Job again at once while the reads keep failing.
      const t = admitted()
      const at = T0 + WINDOW + 20
      t.change(() => ({ job: aJob(J(1), { deleting: true }) }))
      const d = t.step(at, { type: 'cancel', reason: 'ForegroundUnobservable', at: iso(at) })
      expect(d.state).toMatchObject({ phase: 'Cancelling', reason: 'ForegroundUnobservable', attempts: 1 })
      expect(d.state?.counters.preemptions).toEqual({ other: 1 })
      expect(d.actions.some((a) => a.type === 'createJob')).toBe(false)
      t.change(() => ({ job: null }))
      const end = t.step(at + 20, { type: 'resource' })
      expect(end.state).toMatchObject({ phase: 'WaitingForIdle', idleSince: iso(at + 20) })
      expect(end.state?.counters.preemptions).toEqual({ other: 1 })
      expect(end.actions).toContainEqual({ type: 'releaseClaims', jobName: J(1) })
      expect(t.step(at + 20 + WINDOW - 1).actions.some((a) => a.type === 'createJob')).toBe(false)
    })

    it('a decision of lifecycle meanwhile (the Job absent, the request after the window) leaves the attempt to admit', () => {
      // Admit may be between its POST and deleting the Job a request raced (or have deleted it and not yet decided
      // again): taken back here, the attempt would end uncounted and admit's cancel decision would find nothing to
      // count (fence-gap.test.ts saw preemptions.foreground undefined). Admit's own decision settles it.
      const t = admitted()
      const at = T0 + WINDOW + 5
      t.change(() => ({ lastRequestAt: iso(at), job: null }))
      const meanwhile = t.step(T0 + WINDOW + 10, { type: 'resource' })
      expect(meanwhile.state).toMatchObject({ phase: 'Starting', attempts: 1, jobName: J(1) })
      expect(meanwhile.actions.filter((a) => a.type !== 'armTimer')).toEqual([])
      const d = t.step(T0 + WINDOW + 20, cancelRequest(at))
      expect(d.state).toMatchObject({ phase: 'WaitingForIdle', attempts: 1 })
      expect(d.state?.counters.preemptions).toEqual({ foreground: 1 })
    })

    it('an admission that never finished (admit gone for good) is taken back by lifecycle after ADMISSION_IN_FLIGHT_MS', () => {
      const t = admitted()
      t.change(() => ({ lastRequestAt: iso(T0 + WINDOW + 5), job: null }))
      const late = T0 + WINDOW + ADMISSION_IN_FLIGHT_MS + 1
      const d = t.step(late, { type: 'resource' })
      expect(d.state).toMatchObject({ phase: 'WaitingForIdle', attempts: 0, idleSince: iso(late) })
      expect(d.state?.counters).toMatchObject({ starts: 0, preemptions: {} })
      expect(d.actions).toContainEqual({ type: 'releaseClaims', jobName: J(1) })
    })

    it('a foreground cancel for an earlier window, the Job not created yet: the admission in flight stands', () => {
      // A redelivered cancel of an earlier try (its request before this attempt's window) decided while this
      // admission's POST is in flight: preempted, the attempt's claims were released and the Job the POST then
      // created ran with neither state nor claims (the deterministic simulation, seed 2514).
      const t = admitted()
      t.change(() => ({ job: null }))
      const d = t.step(T0 + WINDOW + 20, cancelRequest(T0 - SECOND))
      expect(d.state).toMatchObject({ phase: 'Starting', attempts: 1, jobName: J(1) })
      expect(d.actions.some((a) => a.type === 'releaseClaims')).toBe(false)
      expect(d.state?.counters.preemptions).toEqual({})
    })

    it('seen after the POST, the Job already gone when admit decides again: preempted, not abandoned', () => {
      const t = admitted()
      const at = T0 + WINDOW + 5
      t.change(() => ({ lastRequestAt: iso(at), job: null }))
      const d = t.step(T0 + WINDOW + 20, cancelRequest(at))
      expect(d.state).toMatchObject({ phase: 'WaitingForIdle', attempts: 1, idleSince: iso(T0 + WINDOW + 20) })
      expect(d.state?.counters.preemptions).toEqual({ foreground: 1 })
      expect(d.actions.some((a) => a.type === 'createJob')).toBe(false)
    })
  })
})
