// The workload's report of its run (pkg/core/progress.ts): the termination message's one schema, counted once per
// attempt Job and only for its run, and what decide() makes of it (an Event, the counters, the status message);
// the running seconds of preempted attempts beside the contract's useful seconds.
import { describe, expect, it } from 'vitest'
import { countProgress, MAX_PROGRESS_BYTES, type ProgressFields, parseProgress } from '../../pkg/core/progress.js'
import { beginAttempt, endRun, runIdOf } from '../../pkg/core/run.js'
import { aJob, anIdleState, aWorld, cancelRequest, J, MINUTE, SECOND, T0, Timeline } from './support/world.js'

const RUN = runIdOf('uid-x', 1, 1)

describe('parseProgress', () => {
  it('reads the summary a workload leaves', () => {
    expect(parseProgress(`{"runId":"${RUN}","done":3,"total":10}`)).toEqual({
      ok: true,
      value: { runId: RUN, done: 3, total: 10 },
    })
    expect(parseProgress(`{"runId":"${RUN}","done":3,"total":10,"inFlight":2,"extra":1}`)).toMatchObject({
      ok: true,
      value: { inFlight: 2 },
    })
  })

  it.each([
    ['not JSON', 'Error: killed', /^not JSON/],
    ['no run identity', '{"done":1,"total":2}', /^runId: /],
    ['a run identity of another shape', '{"runId":"RUN-1","done":1,"total":2}', /not a run identity/],
    ['done past total', `{"runId":"${RUN}","done":3,"total":2}`, /done: done exceeds total/],
    ['a negative count', `{"runId":"${RUN}","done":-1,"total":2}`, /^done: /],
    ['a fraction', `{"runId":"${RUN}","done":1.5,"total":2}`, /^done: /],
    ['too long', `{"runId":"${RUN}","done":1,"total":2,"pad":"${'x'.repeat(MAX_PROGRESS_BYTES)}"}`, /longer than 4096/],
  ])('refuses %s with a clear reason', (_what, text, why) => {
    const r = parseProgress(text)
    expect(r.ok).toBe(false)
    if (!r.ok) expect(r.error).toMatch(why)
  })
})

describe('countProgress', () => {
  const fresh = (): ProgressFields => ({ runId: RUN, counters: {} })

  it('counts what each attempt added to its run, once per Job; discarded items only when preempted', () => {
    const s = fresh()
    expect(countProgress(s, 'j1', { runId: RUN, done: 4, total: 10, inFlight: 2 }, true)).toEqual({
      completed: 4,
      discarded: 2,
    })
    // The same Job's report read again (redelivered): nothing more.
    expect(countProgress(s, 'j1', { runId: RUN, done: 4, total: 10, inFlight: 2 }, true)).toBeUndefined()
    expect(countProgress(s, 'j2', { runId: RUN, done: 10, total: 10, inFlight: 0 }, false)).toEqual({
      completed: 6,
      discarded: 0,
    })
    expect(s).toMatchObject({ runDone: 10, runTotal: 10, counters: { itemsDone: 10, itemsDiscarded: 2 } })
  })

  it("ignores a report of another run, and never counts a run's items back", () => {
    const s = fresh()
    expect(countProgress(s, 'j1', { runId: runIdOf('uid-x', 1, 9), done: 4, total: 10 }, false)).toBeUndefined()
    countProgress(s, 'j1', { runId: RUN, done: 6, total: 10 }, true)
    // An attempt that lost its run's record reports fewer: nothing completed, nothing taken back.
    expect(countProgress(s, 'j2', { runId: RUN, done: 2, total: 10 }, true)).toEqual({ completed: 0, discarded: 0 })
    expect(s).toMatchObject({ runDone: 6, counters: { itemsDone: 6 } })
  })
})

describe('decide with an attempt report', () => {
  /** Admitted at T0 + 11m, running, then preempted at T0 + 14m. */
  function preempted() {
    const t = new Timeline(aWorld())
    t.step(T0)
    t.step(T0 + 11 * MINUTE)
    t.change(() => ({ job: aJob(J(1), { started: true }) }))
    t.step(T0 + 11 * MINUTE + SECOND)
    t.change(() => ({ job: null, idle: anIdleState(T0 + 14 * MINUTE) }))
    t.step(T0 + 14 * MINUTE, cancelRequest(T0 + 14 * MINUTE))
    return t
  }

  it('a preemption counts its running seconds beyond the useful seconds, which keep their meaning', () => {
    const t = preempted()
    expect(t.state.counters).toMatchObject({ usefulSeconds: 3 * 60, preemptedSeconds: 3 * 60 })
  })

  it('the report of the preempted attempt: an Event, the counters and the status message', () => {
    const t = preempted()
    const runId = t.state.runId as string
    const now = T0 + 14 * MINUTE + 2 * SECOND
    const progress = { runId, done: 5, total: 12, inFlight: 3 }
    const d = t.step(now, { type: 'progress', jobName: J(1), progress, preempted: true })
    expect(d.actions).toContainEqual({
      type: 'recordEvent',
      eventType: 'Normal',
      reason: 'RunProgress',
      message: `Job ${J(1)} ended with run ${runId} at 5/12 items (5 completed by it; 3 in flight discarded by the preemption)`,
    })
    expect(t.state.counters).toMatchObject({ itemsDone: 5, itemsDiscarded: 3 })
    expect(d.status?.message).toMatch(new RegExp(`\\(run ${runId}: 5/12 items done\\)$`))
    expect(d.status).toMatchObject({ runId, runDone: 5, runTotal: 12, runDiscarded: 3 })
    expect(d.state?.phase).toBe('WaitingForIdle')
    // Delivered again: counted once, no second Event.
    const again = t.step(now + SECOND, { type: 'progress', jobName: J(1), progress, preempted: true })
    expect(again.actions.some((a) => a.type === 'recordEvent')).toBe(false)
    expect(t.state.counters).toMatchObject({ itemsDone: 5, itemsDiscarded: 3 })
  })

  it('the next attempt of the run keeps its progress; a new run starts from nothing', () => {
    const s = { namespace: 'ns', name: 'bf', generation: 1, attempts: 1, runDone: 5, runTotal: 12 }
    beginAttempt(s)
    expect(s).toMatchObject({ runAttempt: 1, runDone: undefined, runTotal: undefined })
    Object.assign(s, { runDone: 5, runTotal: 12, attempts: 2 })
    beginAttempt(s)
    expect(s).toMatchObject({ runAttempt: 2, runDone: 5, runTotal: 12 })
    endRun(s)
    s.attempts = 3
    beginAttempt(s)
    expect(s).toMatchObject({ runAttempt: 1, runDone: undefined })
  })
})
