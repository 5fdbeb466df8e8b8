// Everything that cancels a running attempt, end to end: foreground demand (once and again), gaming intent, GPU
// leases, suspension, spec changes, the Model going away, turning not Ready or moving, and deleting the
// ModelBackfill itself. The cancel function deletes the Job; the status walks Cancelling → the next phase, the
// preemption is counted by reason in the KV state, and `kubectl describe` tells the story.
import { describe, it } from 'vitest'
import { jobName } from '../../../pkg/core/names.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { handledAll, ms, STARTED, waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env, { httpPort: 0 })

const gone = (job: string) =>
  waitUntil(`Job ${job} to be deleted`, async () => ((await sys.world.job(job)) === null ? true : undefined), 15_000)

/**
 * A declaration under names(id) that is Running its first attempt, with its status history recorded. Its pods are
 * held (as a kubelet stopping containers would hold them), so a cancelled Job stays visible while it is deleted and
 * Cancelling can be seen; cancelled() lets them go. `hold: false` keeps the environment's instant pod deletion.
 */
async function runningBackfill(id: string, opts: { group?: string; hold?: boolean } = {}) {
  const n = sys.world.names(id)
  const history = await sys.world.history(id)
  await sys.world.declare(id, {}, { group: opts.group })
  await sys.world.waitFor(id, 'Running', 'JobRunning')
  const job = jobName(id, 1)
  if (opts.hold !== false) await sys.world.holdPods(job)
  return { ...n, history, job }
}

/** Waits for Cancelling with `reason` while the Job is being deleted, then lets its pods (and so the Job) go. */
async function cancelled(r: { backfill: string; job: string }, reason: string) {
  const cancelling = await sys.world.waitFor(r.backfill, 'Cancelling', reason)
  await waitUntil(`Job ${r.job} to be deleting`, async () =>
    (await sys.world.job(r.job))?.metadata?.deletionTimestamp ? true : undefined,
  )
  await sys.world.releasePods(r.job)
  await gone(r.job)
  return cancelling
}

describe.concurrent('foreground demand', () => {
  it('Cancelling while the Job is being deleted, then WaitingForIdle with a fresh window', async ({ expect }) => {
    const r = await runningBackfill('cancelling')
    const requestAt = await sys.world.foreground(r.model)
    const cancelling = await sys.world.waitFor(r.backfill, 'Cancelling', 'ForegroundDemand')
    expect(cancelling.status?.jobName).toBe(r.job)
    expect(cancelling.status?.message).toBe(`foreground request for the model; deleting Job ${r.job}`)
    expect(cancelling.status?.conditions?.[0]).toMatchObject({ status: 'False', reason: 'ForegroundDemand' })
    const deleting = await sys.world.job(r.job)
    expect(deleting?.metadata?.deletionTimestamp).toBeTruthy()
    // Every function has handled what the deletion set off (the Job's update included): still Cancelling.
    await handledAll(sys.runner)
    expect((await sys.world.getBackfill(r.backfill))?.status?.phase).toBe('Cancelling')

    await sys.world.releasePods(r.job)
    await gone(r.job)
    const waiting = await sys.world.waitFor(r.backfill, 'WaitingForIdle', 'IdleWindow')
    expect(waiting.status?.jobName).toBeUndefined()
    expect(waiting.status?.attempts).toBe(1)
    expect(ms(waiting.status?.idleSince)).toBeGreaterThanOrEqual(requestAt)
    expect(await r.history.first(5)).toEqual([...STARTED, 'Cancelling/ForegroundDemand', 'WaitingForIdle/IdleWindow'])
    r.history.stop()
    const state = await sys.world.state(r.backfill)
    expect(state?.counters.preemptions).toEqual({ foreground: 1 })
    expect(state?.counters.usefulSeconds).toBeGreaterThan(0)
    expect(await sys.world.events(r.backfill)).toContainEqual({
      type: 'Normal',
      reason: 'BackfillCancelled',
      message: `Cancelled Job ${r.job}: ForegroundDemand`,
    })
  })

  it('repeatedly preempted: two foreground cancels → attempts 3, preemptions foreground 2', async ({ expect }) => {
    const r = await runningBackfill('preempted', { hold: false })
    const first = await sys.world.foreground(r.model)
    const second = await sys.world.waitForStatus(
      r.backfill,
      'Running attempt 2',
      (s) => s.phase === 'Running' && s.attempts === 2,
    )
    expect(ms(second.status?.startedAt)).toBeGreaterThanOrEqual(first + 2000)
    const again = await sys.world.foreground(r.model)
    const third = await sys.world.waitForStatus(
      r.backfill,
      'Running attempt 3',
      (s) => s.phase === 'Running' && s.attempts === 3,
    )
    r.history.stop()
    expect(ms(third.status?.startedAt)).toBeGreaterThanOrEqual(again + 2000)
    expect(third.status?.jobName).toBe(jobName(r.backfill, 3))
    expect((await sys.world.jobsOf(r.backfill)).map((j) => j.metadata?.name)).toEqual([jobName(r.backfill, 3)])

    const state = await sys.world.state(r.backfill)
    expect(state?.counters).toMatchObject({ starts: 3, success: 0, failed: 0, preemptions: { foreground: 2 } })
    const events = await sys.world.events(r.backfill)
    expect(events.filter((e) => e.reason === 'BackfillStarted').map((e) => e.message)).toEqual(
      [1, 2, 3].map((i) => `Started attempt ${i} as Job ${jobName(r.backfill, i)} on node ${r.node}`),
    )
    expect(events.filter((e) => e.reason === 'BackfillCancelled').map((e) => e.message)).toEqual(
      [1, 2].map((i) => `Cancelled Job ${jobName(r.backfill, i)}: ForegroundDemand`),
    )
    const described = await env.kubectl(['describe', 'mbf', r.backfill, '-n', env.namespace])
    expect(described.code).toBe(0)
    expect(described.stdout).toMatch(/Attempts:\s+3/)
    expect(described.stdout).toMatch(/Normal\s+BackfillCancelled\s+.*Cancelled Job .*: ForegroundDemand/)
    expect(described.stdout).toMatch(/Normal\s+BackfillStarted\s+.*Started attempt 3 as Job/)

    const metrics = await (await fetch(`${sys.runner.httpUrl}/metrics`)).text()
    const labels = `backfill="${r.backfill}",namespace="${env.namespace}",model="${r.model}"`
    expect(metrics).toContain(`flexinfer_model_backfill_preemptions_total{${labels},reason="foreground"} 2`)
    expect(metrics).toContain(`flexinfer_model_backfill_starts_total{${labels}} 3`)
    // What the PrometheusRule alerts on (pkg/observability/ops-metrics.ts): the phase, and each cancel's signal → DELETE.
    expect(metrics).toContain(`flexinfer_model_backfill_phase{${labels},phase="Running"} 1`)
    expect(metrics).toContain(`flexinfer_model_backfill_phase{${labels},phase="Blocked"} 0`)
    const count = /flexinfer_model_backfill_preemption_latency_seconds_count\{reason="ForegroundDemand"\} (\d+)/
    expect(Number(count.exec(metrics)?.[1])).toBeGreaterThanOrEqual(2)
  })
})

describe.concurrent('gaming intent and GPU leases', () => {
  it('a gaming session on the node cancels the attempt (preemption gaming) and then blocks it', async ({ expect }) => {
    const r = await runningBackfill('gaming-cancels')
    await sys.world.gamingSession(`${r.backfill}-session`, r.node)
    const cancelling = await cancelled(r, 'GamingIntent')
    expect(cancelling.status?.message).toBe(`a gaming session targets the model node; deleting Job ${r.job}`)
    const blocked = await sys.world.waitFor(r.backfill, 'Blocked', 'GamingIntent')
    expect(blocked.status?.message).toBe(`GamingSession ${r.backfill}-session targets node ${r.node}`)
    // After a cancellation the gates run in order again: a fresh idle window first, then the session blocks.
    expect(await r.history.first(6)).toEqual([
      ...STARTED,
      'Cancelling/GamingIntent',
      'WaitingForIdle/IdleWindow',
      'Blocked/GamingIntent',
    ])
    r.history.stop()
    const state = await sys.world.state(r.backfill)
    expect(state?.attempts).toBe(1)
    expect(state?.counters.preemptions).toEqual({ gaming: 1 })
    const events = await sys.world.events(r.backfill)
    expect(events).toContainEqual({
      type: 'Normal',
      reason: 'BackfillCancelled',
      message: `Cancelled Job ${r.job}: GamingIntent`,
    })
    expect(events).toContainEqual({
      type: 'Warning',
      reason: 'Blocked',
      message: `GamingIntent: GamingSession ${r.backfill}-session targets node ${r.node}`,
    })
  })

  it('a GPU lease on the model node cancels the attempt (GPULeaseActive, preemption gpu_lease)', async ({ expect }) => {
    const r = await runningBackfill('lease-node')
    await sys.world.gpuLease(`${r.backfill}-lease`, { node: r.node })
    await cancelled(r, 'GPULeaseActive')
    const blocked = await sys.world.waitFor(r.backfill, 'Blocked', 'GPULeaseActive')
    expect(blocked.status?.message).toBe(`GPULease ${env.namespace}/${r.backfill}-lease holds the model's GPU`)
    expect(await r.history.first(6)).toEqual([
      ...STARTED,
      'Cancelling/GPULeaseActive',
      'WaitingForIdle/IdleWindow',
      'Blocked/GPULeaseActive',
    ])
    r.history.stop()
    expect((await sys.world.state(r.backfill))?.counters.preemptions).toEqual({ gpu_lease: 1 })
    expect(await sys.world.events(r.backfill)).toContainEqual({
      type: 'Normal',
      reason: 'BackfillCancelled',
      message: `Cancelled Job ${r.job}: GPULeaseActive`,
    })
  })

  it("a GPU lease on the model's GPU group (another node) cancels the attempt too", async ({ expect }) => {
    const group = `grp-${env.namespace}`
    const r = await runningBackfill('lease-group', { group })
    await sys.world.gpuLease(`${r.backfill}-lease`, { group, node: `elsewhere-${env.namespace}` })
    const cancelling = await cancelled(r, 'GPULeaseActive')
    expect(cancelling.status?.message).toBe(`a GPU lease holds the model node or GPU group; deleting Job ${r.job}`)
    await sys.world.waitFor(r.backfill, 'Blocked', 'GPULeaseActive')
    r.history.stop()
    expect((await sys.world.state(r.backfill))?.counters.preemptions).toEqual({ gpu_lease: 1 })
  })
})

describe.concurrent('suspension and spec changes', () => {
  it('suspend cancels the running attempt (Cancelling/Suspended → Suspended); unsuspending resumes', async ({
    expect,
  }) => {
    const r = await runningBackfill('suspend')
    await sys.world.patchBackfillSpec(r.backfill, { suspend: true })
    const cancelling = await cancelled(r, 'Suspended')
    expect(cancelling.status?.message).toBe(`spec.suspend is true; deleting Job ${r.job}`)
    const suspended = await sys.world.waitFor(r.backfill, 'Suspended', 'Suspended')
    expect(suspended.status).toMatchObject({ observedGeneration: 2, attempts: 1 })
    expect(suspended.status?.jobName).toBeUndefined()
    expect(await r.history.first(5)).toEqual([...STARTED, 'Cancelling/Suspended', 'Suspended/Suspended'])
    expect((await sys.world.state(r.backfill))?.counters.preemptions).toEqual({ suspended: 1 })
    expect(await sys.world.events(r.backfill)).toContainEqual({
      type: 'Normal',
      reason: 'BackfillCancelled',
      message: `Cancelled Job ${r.job}: Suspended`,
    })

    await sys.world.patchBackfillSpec(r.backfill, { suspend: false })
    const resumed = await sys.world.waitForStatus(
      r.backfill,
      'Running attempt 2',
      (s) => s.phase === 'Running' && s.attempts === 2,
    )
    r.history.stop()
    expect(resumed.status?.observedGeneration).toBe(3)
    expect(resumed.status?.jobName).toBe(jobName(r.backfill, 2))
  })

  it('a spec change cancels the running attempt (SpecChanged) and the next one runs the new spec', async ({
    expect,
  }) => {
    const r = await runningBackfill('respec')
    const changedAt = Date.now()
    await sys.world.patchBackfillSpec(r.backfill, { env: { EXTRA: 'new' } })
    const cancelling = await cancelled(r, 'SpecChanged')
    expect(cancelling.status?.message).toBe(`the spec changed; deleting Job ${r.job}`)
    const second = await sys.world.waitForStatus(
      r.backfill,
      'Running attempt 2',
      (s) => s.phase === 'Running' && s.attempts === 2,
    )
    expect(second.status?.observedGeneration).toBe(2)
    // A cancelled attempt is followed by a fresh full window.
    expect(ms(second.status?.startedAt)).toBeGreaterThanOrEqual(changedAt + 2000)
    expect(await r.history.first(7)).toEqual([...STARTED, 'Cancelling/SpecChanged', ...STARTED])
    r.history.stop()
    const job = await sys.world.job(jobName(r.backfill, 2))
    expect(job?.spec?.template.spec?.containers[0]?.env).toEqual([
      { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' },
      { name: 'EXTRA', value: 'new' },
      { name: 'FLEXINFER_RUN_ID', value: second.status?.runId },
      // The spec change ended the first run: this attempt is the first of a new one.
      { name: 'FLEXINFER_ATTEMPT', value: '1' },
    ])
    expect(second.status?.runAttempt).toBe(1)
    expect((await sys.world.state(r.backfill))?.counters.preemptions).toEqual({ spec_changed: 1 })
  })
})

describe.concurrent('the Model changes under a running attempt', () => {
  it('Model deleted → Cancelling/ModelNotFound → Blocked/ModelNotFound', async ({ expect }) => {
    const r = await runningBackfill('model-deleted')
    await sys.world.deleteModel(r.model)
    const cancelling = await cancelled(r, 'ModelNotFound')
    expect(cancelling.status?.message).toBe(`the Model no longer exists; deleting Job ${r.job}`)
    await sys.world.waitFor(r.backfill, 'Blocked', 'ModelNotFound')
    expect(await r.history.first(5)).toEqual([...STARTED, 'Cancelling/ModelNotFound', 'Blocked/ModelNotFound'])
    r.history.stop()
    expect((await sys.world.state(r.backfill))?.counters.preemptions).toEqual({ model_unavailable: 1 })
  })

  it('Model not Ready → Cancelling/ModelNotReady → WaitingForIdle/ModelNotReady; Ready again starts over', async ({
    expect,
  }) => {
    const r = await runningBackfill('model-unready')
    await sys.world.modelStatus(r.model, { phase: 'Loading', node: r.node })
    const cancelling = await cancelled(r, 'ModelNotReady')
    expect(cancelling.status?.message).toBe(`the Model is no longer Ready; deleting Job ${r.job}`)
    const waiting = await sys.world.waitFor(r.backfill, 'WaitingForIdle', 'ModelNotReady')
    expect(waiting.status?.message).toBe(`Model ${r.model} is Loading`)
    expect(await r.history.first(5)).toEqual([...STARTED, 'Cancelling/ModelNotReady', 'WaitingForIdle/ModelNotReady'])
    expect((await sys.world.state(r.backfill))?.counters.preemptions).toEqual({ other: 1 })

    const readyAt = Date.now()
    await sys.world.modelStatus(r.model, { phase: 'Ready', node: r.node })
    const second = await sys.world.waitForStatus(
      r.backfill,
      'Running attempt 2',
      (s) => s.phase === 'Running' && s.attempts === 2,
    )
    r.history.stop()
    expect(ms(second.status?.startedAt)).toBeGreaterThanOrEqual(readyAt + 2000)
  })

  it('Model moved to another node → Cancelling/NodeChanged; the next attempt runs on the new node', async ({
    expect,
  }) => {
    const r = await runningBackfill('model-moved')
    const newNode = `${r.node}-b`
    await sys.world.modelStatus(r.model, { phase: 'Ready', node: newNode })
    const cancelling = await cancelled(r, 'NodeChanged')
    expect(cancelling.status?.message).toBe(`the Model moved to another node; deleting Job ${r.job}`)
    const second = await sys.world.waitForStatus(
      r.backfill,
      'Running attempt 2',
      (s) => s.phase === 'Running' && s.attempts === 2,
    )
    expect(await r.history.first(7)).toEqual([...STARTED, 'Cancelling/NodeChanged', ...STARTED])
    r.history.stop()
    expect(second.status?.nodeName).toBe(newNode)
    const job = await sys.world.job(jobName(r.backfill, 2))
    expect(job?.metadata?.annotations?.['ai.flexinfer/backfill-node']).toBe(newNode)
    expect((await sys.world.state(r.backfill))?.counters.preemptions).toEqual({ other: 1 })
  })

  it('Model loses its node → Cancelling/NodeUnresolved → WaitingForIdle/NodeUnresolved', async ({ expect }) => {
    const r = await runningBackfill('model-nodeless')
    await sys.world.modelStatus(r.model, { phase: 'Ready' })
    const cancelling = await cancelled(r, 'NodeUnresolved')
    expect(cancelling.status?.message).toBe(`the Model node cannot be resolved; deleting Job ${r.job}`)
    const waiting = await sys.world.waitFor(r.backfill, 'WaitingForIdle', 'NodeUnresolved')
    expect(waiting.status?.nodeName).toBeUndefined()
    expect(await r.history.first(5)).toEqual([...STARTED, 'Cancelling/NodeUnresolved', 'WaitingForIdle/NodeUnresolved'])
    r.history.stop()
    expect((await sys.world.state(r.backfill))?.counters.preemptions).toEqual({ other: 1 })
  })
})

describe.concurrent('deleting the ModelBackfill', () => {
  it('deletes the Job first, then lets the finalizer go: object, Job and KV state are all gone', async ({ expect }) => {
    const r = await runningBackfill('deleted')
    r.history.stop()
    await sys.world.deleteBackfill(r.backfill)
    // The Job is being deleted, and the declaration waits for it with its finalizer in place.
    await waitUntil('the Job to be deleting', async () =>
      (await sys.world.job(r.job))?.metadata?.deletionTimestamp ? true : undefined,
    )
    const waiting = await waitUntil('the deletion message', async () => {
      const b = await sys.world.getBackfill(r.backfill)
      return b?.status?.message?.includes('being deleted') ? b : undefined
    })
    expect(waiting.metadata.deletionTimestamp).toBeTruthy()
    expect(waiting.metadata.finalizers).toContain('ai.flexinfer/modelbackfill')
    expect(waiting.status?.message).toBe(`ModelBackfill is being deleted; waiting for Job ${r.job} to be removed`)
    // A deletion counts no preemption (as the FlexInfer reference controller); the time run until then is still useful time.
    const deleting = await sys.world.state(r.backfill)
    expect(deleting?.counters.preemptions).toEqual({})
    expect(deleting?.counters.usefulSeconds).toBeGreaterThan(0)
    expect(await sys.world.events(r.backfill)).toContainEqual({
      type: 'Normal',
      reason: 'BackfillCancelled',
      message: `ModelBackfill is being deleted; deleting Job ${r.job}`,
    })
    // Every function has handled what the deletion set off: the ModelBackfill is still there.
    await handledAll(sys.runner)
    expect(await sys.world.getBackfill(r.backfill)).not.toBeNull()

    await sys.world.releasePods(r.job)
    await gone(r.job)
    await waitUntil('the ModelBackfill to be gone', async () =>
      (await sys.world.getBackfill(r.backfill)) === null ? true : undefined,
    )
    await waitUntil('its KV state to be gone', async () =>
      (await sys.world.state(r.backfill)) === null ? true : undefined,
    )
    expect(await sys.world.jobsOf(r.backfill)).toEqual([])
  })
})
