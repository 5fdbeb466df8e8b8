// End to end against the real apiserver, Job controller and nats-server: every function runs in-process over
// its JetStream consumer, fed by the local ApiServerSource stand-in, exactly as `npm start` runs them.

import { createForegroundEmitter } from '@flexinfer/gateway-emitter'
import { describe, expect, it } from 'vitest'
import { jobName } from '../../../pkg/core/names.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env, { httpPort: 0 })

describe('a quiet model gets its backfill', () => {
  it('waits for the idle window, copies the Job exactly, runs it and succeeds', async () => {
    await sys.world.model('m-happy', { node: 'node-happy' })
    await sys.world.template('tpl-happy', {
      initContainer: true,
      env: [
        { name: 'MODELS', value: 'old' },
        { name: 'FLEXINFER_WORKLOAD_CLASS', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
        { name: 'SECRET_ONE', valueFrom: { secretKeyRef: { name: 's', key: 'k' } } },
      ],
    })
    const created = Date.now()
    await sys.world.backfill('happy', {
      modelRef: 'm-happy',
      templateRef: 'tpl-happy',
      idleFor: '3s',
      maxRunDuration: '15m',
      env: { MODELS: 'm-happy=vllm', SECRET_ONE: 'literal', ZED: 'z', ALPHA: 'a' },
    })
    const waiting = await sys.world.waitFor('happy', 'WaitingForIdle', 'IdleWindow')
    expect(waiting.metadata.finalizers).toContain('ai.flexinfer/modelbackfill')

    const running = await sys.world.waitFor('happy', 'Running', 'JobRunning')
    expect(Date.parse(running.status?.startedAt ?? '')).toBeGreaterThanOrEqual(created + 3000 - 1000)
    expect(running.status?.attempts).toBe(1)
    expect(running.status?.nodeName).toBe('node-happy')
    const name = jobName('happy', 1)
    expect(running.status?.jobName).toBe(name)
    expect(running.status?.conditions?.find((c) => c.type === 'Ready')?.status).toBe('True')

    const job = await sys.world.job(name)
    expect(job?.metadata?.ownerReferences).toEqual([
      expect.objectContaining({ kind: 'ModelBackfill', name: 'happy', controller: true, blockOwnerDeletion: true }),
    ])
    expect(job?.metadata?.labels?.['ai.flexinfer/model-backfill']).toMatch(/^[0-9a-f]{16}$/)
    expect(job?.metadata?.labels?.app).toBe('eval')
    expect(job?.metadata?.annotations).toMatchObject({
      'ai.flexinfer/backfill-model': 'm-happy',
      'ai.flexinfer/backfill-node': 'node-happy',
      'example.com/keep': 'yes',
    })
    expect(job?.spec?.activeDeadlineSeconds).toBe(900)
    const pod = job?.spec?.template.spec
    // The run's identity and the attempt's number follow the contract's variables, in every container.
    const run = [
      { name: 'FLEXINFER_RUN_ID', value: expect.stringMatching(/^[0-9a-f]{16}$/) },
      { name: 'FLEXINFER_ATTEMPT', value: '1' },
    ]
    expect(pod?.initContainers?.[0]?.env).toEqual([{ name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' }, ...run])
    expect(pod?.containers[0]?.env).toEqual([
      { name: 'MODELS', value: 'm-happy=vllm' },
      { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' },
      { name: 'SECRET_ONE', value: 'literal' },
      { name: 'ALPHA', value: 'a' },
      { name: 'ZED', value: 'z' },
      ...run,
    ])

    await sys.world.finishJob(name, 'Succeeded')
    const done = await sys.world.waitFor('happy', 'Succeeded', 'JobComplete')
    expect(done.status?.completionTime).toBeTruthy()
    expect(done.status?.attempts).toBe(1)
    const state = await sys.world.state('happy')
    expect(state?.counters).toMatchObject({ starts: 1, success: 1, failed: 0 })
    expect(state?.counters.usefulSeconds).toBeGreaterThan(0)

    const metrics = await (await fetch(`${sys.runner.httpUrl}/metrics`)).text()
    expect(metrics).toContain(
      `flexinfer_model_backfill_starts_total{backfill="happy",namespace="${env.namespace}",model="m-happy"} 1`,
    )
    expect(metrics).toContain(
      `flexinfer_model_backfill_completions_total{backfill="happy",namespace="${env.namespace}",model="m-happy",result="success"} 1`,
    )
  })
})

describe('foreground always wins', () => {
  it('a foreground request cancels the running Job and the retry needs a new full window', async () => {
    await sys.world.model('m-fg', { node: 'node-fg' })
    await sys.world.template('tpl-fg')
    await sys.world.backfill('fg', { modelRef: 'm-fg', templateRef: 'tpl-fg', idleFor: '3s' })
    await sys.world.waitFor('fg', 'Running')
    const first = jobName('fg', 1)

    const emitter = createForegroundEmitter(env.nc)
    const requestAt = Date.now()
    await emitter.emit({ namespace: env.namespace, model: 'm-fg' })
    await waitUntil('Job 1 deleted', async () => ((await sys.world.job(first)) === null ? true : undefined), 10_000)

    const waiting = await sys.world.waitFor('fg', 'WaitingForIdle', 'IdleWindow')
    expect(waiting.status?.attempts).toBe(1)
    const cancelled = await sys.world.state('fg')
    expect(cancelled?.counters.preemptions.foreground).toBe(1)

    const retry = await sys.world.waitFor('fg', 'Running', 'JobRunning', 20_000)
    expect(retry.status?.attempts).toBe(2)
    expect(retry.status?.jobName).toBe(jobName('fg', 2))
    // A fresh FULL window after the request, not the remainder of the old one.
    expect(Date.parse(retry.status?.startedAt ?? '')).toBeGreaterThanOrEqual(requestAt + 3000)
    await emitter.close()
  })

  it('background-class requests never reset the idle window', async () => {
    await sys.world.model('m-bg', { node: 'node-bg' })
    await sys.world.template('tpl-bg')
    const emitter = createForegroundEmitter(env.nc)
    await sys.world.backfill('bg', { modelRef: 'm-bg', templateRef: 'tpl-bg', idleFor: '3s' })
    const stop = Date.now() + 4000
    while (Date.now() < stop) {
      await emitter.emit({ namespace: env.namespace, model: 'm-bg', workloadClass: 'background' })
      await new Promise((r) => setTimeout(r, 200))
    }
    expect(emitter.stats.background).toBeGreaterThan(10)
    const running = await sys.world.waitFor('bg', 'Running', undefined, 10_000)
    expect(running.status?.attempts).toBe(1)
  })
})
