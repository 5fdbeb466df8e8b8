// The admission gates end to end: why a declaration stays WaitingForIdle (model not Ready, foreground requests
// resetting the window, no node), how it gets from the idle window to a running Job, and why it becomes Blocked
// (model or template missing, GPU in the template, invalid spec) or stays Suspended. Rows of the guide's phase and
// troubleshooting tables. Tests run concurrently: each one has its own model, node, template and backfill.

import { createForegroundEmitter } from '@flexinfer/gateway-emitter'
import { describe, inject, it } from 'vitest'
import { jobName } from '../../../pkg/core/names.js'
import { SCHEDULER_TICK_MS } from '../../../pkg/core/timer-tick.js'
import { sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { handledAll, ms, ready } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env)

/**
 * Time is the subject: idleFor (and a scheduler tick) past `since`, when any timer armed for a window opened then
 * has fired; then admit has handled all it was sent, that timer included.
 */
async function pastIdleFor(since: number, idleForMs = 2000) {
  await sleep(since + idleForMs + SCHEDULER_TICK_MS - Date.now())
  await handledAll(sys.runner, ['admit'])
}

describe.concurrent('WaitingForIdle', () => {
  it('ModelNotReady while the model is not Ready; the idle window starts only when it turns Ready', async ({
    expect,
  }) => {
    const n = await sys.world.declare('notready', {}, { phase: 'Loading' })
    const waiting = await sys.world.waitFor(n.backfill, 'WaitingForIdle', 'ModelNotReady')
    expect(waiting.status?.message).toBe(`Model ${n.model} is Loading`)
    expect(waiting.status?.idleSince).toBeUndefined()
    expect(ready(waiting)).toBe('False')

    await pastIdleFor(Date.now()) // a model that is not warm gets no backfill
    const still = await sys.world.getBackfill(n.backfill)
    expect(`${still?.status?.phase}/${still?.status?.reason}`).toBe('WaitingForIdle/ModelNotReady')
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])

    const readyAt = Date.now()
    await sys.world.modelStatus(n.model, { phase: 'Ready', node: n.node })
    const idle = await sys.world.waitFor(n.backfill, 'WaitingForIdle', 'IdleWindow')
    expect(ms(idle.status?.idleSince)).toBeGreaterThanOrEqual(readyAt)
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(ms(running.status?.startedAt)).toBeGreaterThanOrEqual(readyAt + 2000)
    expect(running.status?.attempts).toBe(1)
  })

  it('IdleWindow reports idleSince, and the Job is admitted only once the full window has passed', async ({
    expect,
  }) => {
    const before = Date.now()
    const n = await sys.world.declare('window', { idleFor: '3s' })
    const waiting = await sys.world.waitFor(n.backfill, 'WaitingForIdle', 'IdleWindow')
    const idleSince = ms(waiting.status?.idleSince)
    expect(idleSince).toBeGreaterThanOrEqual(before)
    expect(idleSince).toBeLessThanOrEqual(Date.now())
    expect(waiting.status?.message).toBe(
      `idle since ${waiting.status?.idleSince}; window completes at ${new Date(idleSince + 3000).toISOString()}`,
    )
    expect(waiting.status?.attempts).toBe(0)
    expect(waiting.status?.jobName).toBeUndefined()
    expect(ready(waiting)).toBe('False')
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])

    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(running.status?.idleSince).toBe(waiting.status?.idleSince)
    expect(ms(running.status?.startedAt)).toBeGreaterThanOrEqual(idleSince + 3000)
  })

  it('stays WaitingForIdle while foreground requests keep resetting the window (status.idleSince moves)', async ({
    expect,
  }) => {
    const n = await sys.world.declare('resets')
    await sys.world.waitFor(n.backfill, 'WaitingForIdle', 'IdleWindow')
    const history = await sys.world.history(n.backfill)
    const emitter = createForegroundEmitter(env.nc)
    let last = 0
    const until = Date.now() + 6000 // three windows' worth of requests, 400 ms apart
    while (Date.now() < until) {
      last = Date.now()
      await emitter.emit({ namespace: env.namespace, model: n.model })
      await sleep(400) // time is the subject: requests at this pace keep the model busy
    }
    await emitter.close()
    expect(history.phases()).toEqual(['WaitingForIdle/IdleWindow'])
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])
    // The window was re-armed to the newest request more than once while the requests kept coming.
    expect(new Set(history.statuses.map((s) => s.idleSince)).size).toBeGreaterThanOrEqual(2)

    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    history.stop()
    expect(ms(running.status?.idleSince)).toBeGreaterThanOrEqual(last)
    expect(ms(running.status?.startedAt)).toBeGreaterThanOrEqual(last + 2000)
    expect(running.status?.attempts).toBe(1)
  })

  it('NodeUnresolved while the model has no node; admitted on the node once the model reports one', async ({
    expect,
  }) => {
    const n = sys.world.names('nonode')
    await sys.world.model(n.model) // Ready, but neither status.gpu.node nor a hostname selector
    await sys.world.template(n.template)
    await sys.world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '2s' })
    const waiting = await sys.world.waitFor(n.backfill, 'WaitingForIdle', 'NodeUnresolved')
    expect(waiting.status?.message).toBe(`Model ${n.model} has no status.gpu.node or hostname selector`)
    await pastIdleFor(Date.now())
    expect((await sys.world.getBackfill(n.backfill))?.status?.reason).toBe('NodeUnresolved')
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])

    await sys.world.modelStatus(n.model, { phase: 'Ready', node: n.node })
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(running.status?.nodeName).toBe(n.node)
  })

  it('the node may come from the hostname node selector when status.gpu.node is unset', async ({ expect }) => {
    const n = sys.world.names('hostname')
    await sys.world.model(n.model, { hostname: n.node })
    await sys.world.template(n.template)
    await sys.world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '2s' })
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(running.status?.nodeName).toBe(n.node)
    const job = await sys.world.job(jobName(n.backfill, 1))
    expect(job?.metadata?.annotations?.['ai.flexinfer/backfill-node']).toBe(n.node)
  })
})

describe.concurrent('Starting and Running', () => {
  it('WaitingForIdle → Starting (Job created) → Running (Job active), with Started and Running events', async ({
    expect,
  }) => {
    const n = sys.world.names('admitted')
    const history = await sys.world.history(n.backfill)
    await sys.world.declare(n.backfill)
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    const job = jobName(n.backfill, 1)
    expect(await history.first(3)).toEqual(['WaitingForIdle/IdleWindow', 'Starting/JobCreated', 'Running/JobRunning'])
    history.stop()

    const starting = history.statuses.find((s) => s.phase === 'Starting')
    expect(starting).toMatchObject({ jobName: job, nodeName: n.node, attempts: 1, message: expect.any(String) })
    expect(starting?.conditions?.[0]).toMatchObject({ type: 'Ready', status: 'False', reason: 'JobCreated' })
    expect(running.status).toMatchObject({ jobName: job, nodeName: n.node, attempts: 1, observedGeneration: 1 })
    expect(running.status?.message).toBe(`Job ${job} is running on node ${n.node}`)
    expect(running.status?.conditions?.[0]).toMatchObject({ type: 'Ready', status: 'True', reason: 'JobRunning' })
    expect(running.status?.startedAt).toBe(starting?.startedAt)
    expect(await sys.world.job(job)).not.toBeNull()

    // Admit records Started right after creating the Job, lifecycle records Running when the Job controller starts
    // it: either may be written first (and describe orders events by second-granular timestamps anyway).
    const events = await sys.world.events(n.backfill)
    expect(events).toHaveLength(2)
    expect(events).toEqual(
      expect.arrayContaining([
        { type: 'Normal', reason: 'BackfillStarted', message: `Started attempt 1 as Job ${job} on node ${n.node}` },
        { type: 'Normal', reason: 'Running', message: `Job ${job} is running` },
      ]),
    )
    const state = await sys.world.state(n.backfill)
    expect(state).toMatchObject({ phase: 'Running', attempts: 1, jobName: job })
    expect(state?.counters).toMatchObject({ starts: 1, success: 0, failed: 0, preemptions: {} })
  })
})

describe.concurrent('Blocked', () => {
  it('ModelNotFound while the Model does not exist; runs once it appears', async ({ expect }) => {
    const n = sys.world.names('nomodel')
    await sys.world.template(n.template)
    await sys.world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '2s' })
    const blocked = await sys.world.waitFor(n.backfill, 'Blocked', 'ModelNotFound')
    const message = `Model ${env.namespace}/${n.model} not found`
    expect(blocked.status?.message).toBe(message)
    expect(ready(blocked)).toBe('False')
    expect(await sys.world.events(n.backfill)).toContainEqual({
      type: 'Warning',
      reason: 'Blocked',
      message: `ModelNotFound: ${message}`,
    })

    // Time is the subject: longer than idleFor while the Model is missing, that time is not an idle window.
    await sleep(2500)
    const createdAt = Date.now()
    await sys.world.model(n.model, { node: n.node })
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(running.status?.attempts).toBe(1)
    // Like a Model turning Ready, one that appears starts its idle window then.
    expect(ms(running.status?.idleSince)).toBeGreaterThanOrEqual(createdAt)
    expect(ms(running.status?.startedAt)).toBeGreaterThanOrEqual(createdAt + 2000)
  })

  it('TemplateNotFound while the CronJob is missing; admitted once it exists (re-checked: nothing watches CronJobs)', async ({
    expect,
  }) => {
    const n = sys.world.names('notemplate')
    await sys.world.model(n.model, { node: n.node })
    await sys.world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '2s' })
    const blocked = await sys.world.waitFor(n.backfill, 'Blocked', 'TemplateNotFound')
    const message = `CronJob ${env.namespace}/${n.template} not found`
    expect(blocked.status?.message).toBe(message)
    expect(await sys.world.events(n.backfill)).toContainEqual({
      type: 'Warning',
      reason: 'Blocked',
      message: `TemplateNotFound: ${message}`,
    })
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])

    // Nothing watches CronJobs: the next re-check admits it (at the latest its RECHECK_MS timer, 15s).
    await sys.world.template(n.template)
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning', 30_000)
    expect(running.status?.attempts).toBe(1)
  })

  it('GPURequestForbidden when the template limits a GPU; no Job even after the idle window', async ({ expect }) => {
    const n = sys.world.names('gputpl')
    await sys.world.model(n.model, { node: n.node })
    await sys.world.template(n.template, { gpu: true })
    await sys.world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '2s' })
    const blocked = await sys.world.waitFor(n.backfill, 'Blocked', 'GPURequestForbidden')
    const message = `CronJob ${n.template} container eval sets limits.nvidia.com/gpu=1; backfill must not request a GPU`
    expect(blocked.status?.message).toBe(message)
    await pastIdleFor(Date.now())
    expect((await sys.world.getBackfill(n.backfill))?.status?.reason).toBe('GPURequestForbidden')
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])
    expect((await sys.world.state(n.backfill))?.attempts).toBe(0)
    const blockedEvents = (await sys.world.events(n.backfill)).filter((e) => e.reason === 'Blocked')
    // Re-checks that find the same problem do not repeat the event.
    expect(blockedEvents).toEqual([{ type: 'Warning', reason: 'Blocked', message: `GPURequestForbidden: ${message}` }])
  })

  it('InvalidEnvironment: kubectl apply refuses it, and an object that slipped past the CRD rules is Blocked', async ({
    expect,
  }) => {
    const n = sys.world.names('badenv')
    await sys.world.model(n.model, { node: n.node })
    await sys.world.template(n.template)
    const spec = { modelRef: n.model, templateRef: n.template, idleFor: '2s' }
    const apply = (name: string, env_: Record<string, string>) =>
      env.kubectl(['apply', '-n', env.namespace, '-f', '-'], {
        input: JSON.stringify({
          apiVersion: 'ai.flexinfer/v1alpha2',
          kind: 'ModelBackfill',
          metadata: { name },
          spec: { ...spec, env: env_ },
        }),
      })
    const badName = await apply(`${n.backfill}-a`, { '1BAD': 'x' })
    expect(badName.code).not.toBe(0)
    expect(badName.stderr).toContain('env names must match ^[A-Za-z_][A-Za-z0-9_]*$')
    const reserved = await apply(`${n.backfill}-b`, { FLEXINFER_WORKLOAD_CLASS: 'foreground' })
    expect(reserved.code).not.toBe(0)
    expect(reserved.stderr).toContain('FLEXINFER_WORKLOAD_CLASS is reserved')
    expect(await sys.world.getBackfill(`${n.backfill}-a`)).toBeNull()

    // No object the API accepts can carry such an env: write one to etcd directly, as a declaration created
    // before the CRD carried its CEL rules would be. The functions must still block it.
    const { etcdUrl } = inject('testEnv')
    await sys.world.backfillBypassingAdmission(etcdUrl, `${n.backfill}-c`, { ...spec, env: { 'BAD-NAME': 'x' } })
    await sys.world.backfillBypassingAdmission(etcdUrl, `${n.backfill}-d`, {
      ...spec,
      env: { FLEXINFER_WORKLOAD_CLASS: 'foreground' },
    })
    const c = await sys.world.waitFor(`${n.backfill}-c`, 'Blocked', 'InvalidEnvironment')
    expect(c.status?.message).toBe('invalid environment variable name(s): BAD-NAME')
    const d = await sys.world.waitFor(`${n.backfill}-d`, 'Blocked', 'InvalidEnvironment')
    expect(d.status?.message).toBe('FLEXINFER_WORKLOAD_CLASS is reserved and cannot be overridden')
    await pastIdleFor(Date.now())
    expect(await sys.world.jobsOf(`${n.backfill}-c`)).toEqual([])
    expect(await sys.world.jobsOf(`${n.backfill}-d`)).toEqual([])
    expect(await sys.world.events(`${n.backfill}-c`)).toContainEqual({
      type: 'Warning',
      reason: 'Blocked',
      message: 'InvalidEnvironment: invalid environment variable name(s): BAD-NAME',
    })
  })

  it('InvalidRepeatAfter: kubectl apply refuses 30s, and an object that slipped past the CRD rules is Blocked', async ({
    expect,
  }) => {
    const n = sys.world.names('badrepeat')
    await sys.world.model(n.model, { node: n.node })
    await sys.world.template(n.template)
    const spec = { modelRef: n.model, templateRef: n.template, idleFor: '2s', repeatAfter: '30s' }
    const refused = await env.kubectl(['apply', '-n', env.namespace, '-f', '-'], {
      input: JSON.stringify({
        apiVersion: 'ai.flexinfer/v1alpha2',
        kind: 'ModelBackfill',
        metadata: { name: n.backfill },
        spec,
      }),
    })
    expect(refused.code).not.toBe(0)
    expect(refused.stderr).toContain('repeatAfter must be 0 (one-shot) or at least 1m')

    await sys.world.backfillBypassingAdmission(inject('testEnv').etcdUrl, n.backfill, spec)
    const blocked = await sys.world.waitFor(n.backfill, 'Blocked', 'InvalidRepeatAfter')
    expect(blocked.status?.message).toBe('repeatAfter 30s must be 0 or at least 1m')
    await pastIdleFor(Date.now())
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])
  })
})

describe.concurrent('Suspended', () => {
  it('a declaration created suspended admits nothing; unsuspending it starts the first attempt', async ({ expect }) => {
    const n = await sys.world.declare('created-suspended', { suspend: true })
    const suspended = await sys.world.waitFor(n.backfill, 'Suspended', 'Suspended')
    expect(suspended.status?.message).toBe('spec.suspend is true; no attempt may run')
    expect(ready(suspended)).toBe('False')
    await pastIdleFor(Date.now())
    expect((await sys.world.getBackfill(n.backfill))?.status?.phase).toBe('Suspended')
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])

    await sys.world.patchBackfillSpec(n.backfill, { suspend: false })
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(running.status).toMatchObject({ attempts: 1, observedGeneration: 2 })
  })
})
