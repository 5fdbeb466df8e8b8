// How attempts end, end to end: a one-shot success stays Succeeded, a failure (pod failed, or the real Job
// controller's activeDeadlineSeconds from maxRunDuration) stays Failed until the spec changes, and repeatAfter
// schedules the next run after a cooldown through every gate again (one ~70s test: repeatAfter cannot be under 1m).
import { describe, it } from 'vitest'
import { jobName } from '../../../pkg/core/names.js'
import { SCHEDULER_TICK_MS } from '../../../pkg/core/timer-tick.js'
import { sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { handledAll, ms, ready, STARTED, waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env)

describe.concurrent('Succeeded', () => {
  it('one-shot: Succeeded/JobComplete, no nextRunTime, and it does not repeat', async ({ expect }) => {
    const n = sys.world.names('oneshot')
    const history = await sys.world.history(n.backfill)
    await sys.world.declare(n.backfill)
    await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    const job = jobName(n.backfill, 1)
    await sys.world.finishJob(job, 'Succeeded')
    const done = await sys.world.waitFor(n.backfill, 'Succeeded', 'JobComplete')
    const doneAt = Date.now()
    const completed = await sys.world.waitForJobCondition(job, 'Complete')
    expect(done.status?.message).toBe(`Job ${job} completed`)
    expect(done.status?.completionTime).toBe(new Date(completed.status?.completionTime as Date).toISOString())
    expect(done.status?.nextRunTime).toBeUndefined()
    expect(done.status).toMatchObject({ attempts: 1, jobName: job })
    expect(ready(done)).toBe('True')
    expect(await sys.world.events(n.backfill)).toContainEqual({
      type: 'Normal',
      reason: 'Completed',
      message: `Job ${job} completed`,
    })

    // A one-shot declaration is done: time is the subject, idleFor (and a scheduler tick) past the completion, so a
    // window wrongly re-opened by it would have ended and its timer fired; then every function has handled all it
    // was sent.
    await sleep(doneAt + 2000 + SCHEDULER_TICK_MS - Date.now())
    await handledAll(sys.runner)
    const later = await sys.world.getBackfill(n.backfill)
    expect(`${later?.status?.phase}/${later?.status?.reason}`).toBe('Succeeded/JobComplete')
    expect(later?.status?.attempts).toBe(1)
    expect((await sys.world.jobsOf(n.backfill)).map((j) => j.metadata?.name)).toEqual([job])
    expect(await history.first(4)).toEqual([...STARTED, 'Succeeded/JobComplete'])
    expect(history.phases()).toHaveLength(4)
    history.stop()
    const state = await sys.world.state(n.backfill)
    expect(state?.counters).toMatchObject({ starts: 1, success: 1, failed: 0, preemptions: {} })
    expect(state?.counters.usefulSeconds).toBeGreaterThan(0)
  })
})

describe.concurrent('Failed', () => {
  it('a Job whose pod fails: Failed/JobFailed, terminal, never repeats', async ({ expect }) => {
    const n = sys.world.names('podfails')
    const history = await sys.world.history(n.backfill)
    await sys.world.declare(n.backfill)
    await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    const job = jobName(n.backfill, 1)
    await sys.world.finishJob(job, 'Failed')
    const failed = await sys.world.waitFor(n.backfill, 'Failed', 'JobFailed')
    const failedAt = Date.now()
    const condition = (await sys.world.waitForJobCondition(job, 'Failed')).status?.conditions?.find(
      (c) => c.type === 'Failed',
    )
    expect(condition?.reason).toBe('BackoffLimitExceeded')
    expect(failed.status?.message).toBe(`Job ${job} failed: ${condition?.message}; change the spec to retry`)
    expect(failed.status?.completionTime).toBeTruthy()
    expect(failed.status?.nextRunTime).toBeUndefined()
    expect(ready(failed)).toBe('False')
    expect(await sys.world.events(n.backfill)).toContainEqual({
      type: 'Warning',
      reason: 'Failed',
      message: `Job ${job} failed: ${condition?.message}`,
    })

    // Terminal: time is the subject, idleFor (and a scheduler tick) past the failure, so a window wrongly re-opened
    // by it would have ended and its timer fired; then every function has handled all it was sent.
    await sleep(failedAt + 2000 + SCHEDULER_TICK_MS - Date.now())
    await handledAll(sys.runner)
    expect((await sys.world.getBackfill(n.backfill))?.status?.phase).toBe('Failed')
    expect((await sys.world.jobsOf(n.backfill)).map((j) => j.metadata?.name)).toEqual([job])
    expect(await history.first(4)).toEqual([...STARTED, 'Failed/JobFailed'])
    expect(history.phases()).toHaveLength(4)
    history.stop()
    expect((await sys.world.state(n.backfill))?.counters).toMatchObject({ starts: 1, success: 0, failed: 1 })
  })

  it('maxRunDuration 2s: the Job controller ends it at its deadline → Failed/JobFailed, no repeat even with repeatAfter', async ({
    expect,
  }) => {
    const n = sys.world.names('deadline')
    const history = await sys.world.history(n.backfill)
    await sys.world.declare(n.backfill, { maxRunDuration: '2s', repeatAfter: '1m' })
    const job = jobName(n.backfill, 1)
    // Nobody finishes the pod: the real Job controller enforces activeDeadlineSeconds. Running lasts only the 2 s
    // from the Job's startTime; on a loaded machine the function may first observe the Job after it failed, and
    // status is level-based (it shows what it observes), so Running may be skipped. Proof that the Job did run
    // comes from the Job itself: startTime set and the DeadlineExceeded condition.
    const failed = await sys.world.waitFor(n.backfill, 'Failed', 'JobFailed', 40_000)
    const failedAt = Date.now()
    const ended = await sys.world.waitForJobCondition(job, 'Failed')
    expect(ended.spec?.activeDeadlineSeconds).toBe(2)
    expect(ended.status?.startTime).toBeTruthy()
    const condition = ended.status?.conditions?.find((c) => c.type === 'Failed')
    expect(condition?.reason).toBe('DeadlineExceeded')
    // Every phase the status went through is the usual start, Running at most skipped, then Failed.
    const phases = await waitUntil(
      'the history to reach Failed/JobFailed',
      async () => (history.phases().at(-1) === 'Failed/JobFailed' ? history.phases() : undefined),
      10_000,
    )
    history.stop()
    const started = phases.includes('Running/JobRunning') ? STARTED : STARTED.filter((p) => p !== 'Running/JobRunning')
    expect(phases).toEqual([...started, 'Failed/JobFailed'])
    expect(failed.status?.message).toBe(`Job ${job} failed: ${condition?.message}; change the spec to retry`)
    expect(failed.status?.message).toContain('deadline')
    expect(failed.status?.nextRunTime).toBeUndefined()
    const state = await sys.world.state(n.backfill)
    expect(state?.counters).toMatchObject({ starts: 1, failed: 1, success: 0 })
    expect(state?.nextRunTime).toBeUndefined()

    // Terminal: time is the subject, idleFor (and a scheduler tick) past the failure, so a window wrongly re-opened
    // by it would have ended and its timer fired; then every function has handled all it was sent.
    await sleep(failedAt + 2000 + SCHEDULER_TICK_MS - Date.now())
    await handledAll(sys.runner)
    const later = await sys.world.getBackfill(n.backfill)
    expect(`${later?.status?.phase}/${later?.status?.reason}`).toBe('Failed/JobFailed')
    expect(later?.status?.attempts).toBe(1)
  })

  it('a spec change clears a terminal Failed and starts over (old Job removed)', async ({ expect }) => {
    const n = sys.world.names('refail')
    const history = await sys.world.history(n.backfill)
    await sys.world.declare(n.backfill)
    await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    const first = jobName(n.backfill, 1)
    await sys.world.finishJob(first, 'Failed')
    await sys.world.waitFor(n.backfill, 'Failed', 'JobFailed')

    await sys.world.patchBackfillSpec(n.backfill, { env: { RETRY: 'yes' } })
    const second = await sys.world.waitForStatus(
      n.backfill,
      'Running attempt 2',
      (s) => s.phase === 'Running' && s.attempts === 2,
    )
    expect(second.status).toMatchObject({ observedGeneration: 2, jobName: jobName(n.backfill, 2) })
    expect(second.status?.completionTime).toBeUndefined()
    await waitUntil(`Job ${first} to be removed`, async () =>
      (await sys.world.job(first)) === null ? true : undefined,
    )
    expect(await history.first(4)).toEqual([...STARTED, 'Failed/JobFailed'])
    history.stop()
    expect((await sys.world.state(n.backfill))?.counters).toMatchObject({ starts: 2, failed: 1, preemptions: {} })
  })
})

describe.concurrent('repeatAfter', () => {
  it('Succeeded/RepeatScheduled with nextRunTime = completionTime + 1m; then RepeatCleanup, RepeatDue and attempt 2', {
    timeout: 120_000,
  }, async ({ expect }) => {
    const n = sys.world.names('repeats')
    const history = await sys.world.history(n.backfill)
    await sys.world.declare(n.backfill, { idleFor: '3s', repeatAfter: '1m' })
    await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    const first = jobName(n.backfill, 1)
    // Held pods keep the old Job visible while the re-arm removes it, so RepeatCleanup can be seen.
    await sys.world.holdPods(first)
    await sys.world.finishJob(first, 'Succeeded')
    const scheduled = await sys.world.waitFor(n.backfill, 'Succeeded', 'RepeatScheduled')
    const completion = ms(scheduled.status?.completionTime)
    const next = ms(scheduled.status?.nextRunTime)
    expect(next - completion).toBe(60_000)
    expect(scheduled.status?.message).toBe(
      `Job ${first} completed; next run may start after ${scheduled.status?.nextRunTime}`,
    )
    expect(ready(scheduled)).toBe('True')
    expect(await sys.world.events(n.backfill)).toContainEqual({
      type: 'Normal',
      reason: 'Completed',
      message: `Job ${first} completed`,
    })
    expect((await sys.world.state(n.backfill))?.counters).toMatchObject({ starts: 1, success: 1 })

    // Cooldown over: the previous run's Job is removed first (RepeatCleanup) ...
    const cleanup = await sys.world.waitFor(n.backfill, 'Succeeded', 'RepeatCleanup', next - Date.now() + 15_000)
    expect(Date.now()).toBeGreaterThanOrEqual(next)
    expect(cleanup.status?.message).toBe(`cooldown over; removing Job ${first} of the previous run`)
    expect((await sys.world.job(first))?.metadata?.deletionTimestamp).toBeTruthy()
    expect(await sys.world.jobsOf(n.backfill)).toHaveLength(1)

    // ... then every gate runs again, the idle gate included: a foreground request now means a fresh window.
    const requestAt = await sys.world.foreground(n.model)
    await waitUntil('the request in the idle state', async () =>
      ms((await sys.world.idle(n.model))?.lastForegroundAt) >= requestAt ? true : undefined,
    )
    await sys.world.releasePods(first)
    const second = await sys.world.waitForStatus(
      n.backfill,
      'Running attempt 2',
      (s) => s.phase === 'Running' && s.attempts === 2,
    )
    expect(await sys.world.job(first)).toBeNull()
    // RepeatDue lasts only until the fresh window completes: read it from the history, not by polling.
    expect(await history.first(8)).toEqual([
      ...STARTED,
      'Succeeded/RepeatScheduled',
      'Succeeded/RepeatCleanup',
      'WaitingForIdle/RepeatDue',
      'Starting/JobCreated',
      'Running/JobRunning',
    ])
    const due = history.statuses.find((s) => s.reason === 'RepeatDue')
    expect(ms(due?.idleSince)).toBeGreaterThanOrEqual(requestAt)
    const windowEnd = new Date(ms(due?.idleSince) + 3000).toISOString()
    expect(due?.message).toBe(`cooldown over; idle since ${due?.idleSince}; window completes at ${windowEnd}`)
    expect(ms(second.status?.startedAt)).toBeGreaterThanOrEqual(requestAt + 3000)
    expect(second.status?.jobName).toBe(jobName(n.backfill, 2))
    expect(second.status?.nextRunTime).toBeUndefined()
    expect(second.status?.completionTime).toBeUndefined()
    history.stop()
    expect((await sys.world.state(n.backfill))?.counters).toMatchObject({ starts: 2, success: 1, preemptions: {} })
  })
})
