// Takeover of objects FlexInfer's controller left behind, on the real servers: the ModelBackfills, their statuses
// and the Job of a running attempt exist BEFORE the functions start (the FlexInfer reference controller wrote them; the Job is built
// with the contract's name, labels, annotations and controller ownerReference, as the FlexInfer reference controller builds it).
// Started, the functions must rerun nothing that finished, adopt the running Job (claims taken, not deleted as a
// stray) and still preempt it on a foreground request; a new declaration on a model idle for an hour starts at once.
import type { V1CronJob } from '@kubernetes/client-node'
import { Kvm } from '@nats-io/kv'
import { afterAll, beforeAll, describe, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { BUCKET_CLAIMS } from '../../../events/catalog.js'
import type { ModelBackfill, ModelBackfillStatus } from '../../../pkg/core/api.js'
import { buildJob } from '../../../pkg/core/job.js'
import { jobName, modelKey } from '../../../pkg/core/names.js'
import { SCHEDULER_TICK_MS } from '../../../pkg/core/timer-tick.js'
import { sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, handledAll, waitUntil } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let world: BackfillWorld
const HOUR = 3_600_000
const ago = (ms: number) => new Date(Date.now() - ms).toISOString()

/** A declaration as the FlexInfer reference controller left it: object, then its status (status subresource). */
async function leftByReference(id: string, status: ModelBackfillStatus | null, modelOpts = {}) {
  const n = world.names(id)
  await world.model(n.model, { node: n.node, ...modelOpts })
  await world.template(n.template)
  const b = await world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '2s' })
  if (status) {
    await world.custom.replaceNamespacedCustomObjectStatus({
      group: 'ai.flexinfer',
      version: 'v1alpha2',
      namespace: env.namespace,
      plural: 'modelbackfills',
      name: n.backfill,
      body: { ...b, status: { observedGeneration: b.metadata.generation, ...status } },
    })
  }
  return { n, b }
}

/** The running attempt's Job, built as the FlexInfer reference controller builds it (contract naming, labels, owner). */
async function referenceJob(b: ModelBackfill, attempt: number, node: string) {
  const template = (await world.batch.readNamespacedCronJob({
    namespace: env.namespace,
    name: b.spec.templateRef,
  })) as V1CronJob
  const job = buildJob({ backfill: b, template, name: jobName(b.metadata.name, attempt), node, maxRunDurationMs: HOUR })
  return world.batch.createNamespacedJob({ namespace: env.namespace, body: job })
}

let running: { n: ReturnType<BackfillWorld['names']>; b: ModelBackfill }
const RUNNING_JOB = () => jobName(running.n.backfill, 2)

beforeAll(async () => {
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  await leftByReference('done', {
    phase: 'Succeeded',
    reason: 'JobComplete',
    message: 'Job done-1 completed',
    jobName: jobName('done', 1),
    attempts: 1,
    startedAt: ago(HOUR),
    completionTime: ago(HOUR / 2),
  })
  await leftByReference('failed', {
    phase: 'Failed',
    reason: 'JobFailed',
    jobName: jobName('failed', 3),
    attempts: 3,
    completionTime: ago(HOUR / 2),
  })
  running = await leftByReference('running', null)
  await referenceJob(running.b, 2, running.n.node)
  await world.custom.replaceNamespacedCustomObjectStatus({
    group: 'ai.flexinfer',
    version: 'v1alpha2',
    namespace: env.namespace,
    plural: 'modelbackfills',
    name: running.n.backfill,
    body: {
      ...running.b,
      status: {
        observedGeneration: 1,
        phase: 'Running',
        reason: 'JobRunning',
        jobName: RUNNING_JOB(),
        nodeName: running.n.node,
        attempts: 2,
        idleSince: ago(HOUR),
        startedAt: ago(HOUR / 2),
      },
    },
  })
  // Started only now: everything above is what the functions find.
  runner = await startTestRunner(env)
}, 60_000)
afterAll(async () => {
  world?.close()
  await runner?.stop()
})

describe('takeover from the FlexInfer reference controller', () => {
  it('finished declarations stay finished: no Job, no rerun, attempts kept', async ({ expect }) => {
    await waitUntil('state of done and failed', async () =>
      (await world.state('done')) && (await world.state('failed')) ? true : undefined,
    )
    // Time is the subject: idleFor (2s) and a scheduler tick past the moment they were taken over, when a window
    // opened then would have ended and its timer fired; then every function has handled all it was sent.
    await sleep(2000 + SCHEDULER_TICK_MS)
    await handledAll(runner)
    const done = await world.getBackfill('done')
    const failed = await world.getBackfill('failed')
    expect(`${done?.status?.phase}/${done?.status?.reason}`).toBe('Succeeded/JobComplete')
    expect(done?.status).toMatchObject({ attempts: 1, jobName: jobName('done', 1) })
    expect(`${failed?.status?.phase}/${failed?.status?.reason}`).toBe('Failed/JobFailed')
    expect(failed?.status?.attempts).toBe(3)
    expect(await world.jobsOf('done')).toEqual([])
    expect(await world.jobsOf('failed')).toEqual([])
    expect((await world.state('done'))?.counters).toMatchObject({ starts: 1, success: 1 })
    expect((await world.events('done')).map((e) => e.reason)).toContain('TakenOver')
  })

  it('the running Job is adopted (claims taken, not deleted), then preempted by a foreground request', async ({
    expect,
  }) => {
    const state = await waitUntil('the running backfill taken over', async () => {
      const s = await world.state(running.n.backfill)
      return s?.jobName === RUNNING_JOB() && s.phase === 'Running' ? s : undefined
    })
    expect(state).toMatchObject({ attempts: 2, nodeName: running.n.node })
    const claims = await new Kvm(env.nc).open(BUCKET_CLAIMS)
    const claim = await waitUntil('the model claim retaken', async () => {
      const e = await claims.get(`model.${modelKey(env.namespace, running.n.model)}`)
      return e?.operation === 'PUT' ? e.json<{ jobName: string }>() : undefined
    })
    expect(claim.jobName).toBe(RUNNING_JOB())
    // Everything the takeover set off is handled: nothing deleted the adopted Job.
    await handledAll(runner)
    const job = await world.job(RUNNING_JOB())
    expect(job?.metadata?.deletionTimestamp).toBeUndefined()
    expect((await world.jobsOf(running.n.backfill)).map((j) => j.metadata?.name)).toEqual([RUNNING_JOB()])

    // Foreground wins over the adopted attempt: demand finds it by its claim and cancel deletes it.
    await world.foreground(running.n.model)
    await waitUntil('the adopted Job deleted', async () => {
      const j = await world.job(RUNNING_JOB())
      return !j || j.metadata?.deletionTimestamp ? true : undefined
    })
    const after = await waitUntil('the preemption counted', async () => {
      const s = await world.state(running.n.backfill)
      return s?.counters.preemptions.foreground === 1 ? s : undefined
    })
    expect(after.counters.starts).toBeGreaterThanOrEqual(2)
    expect(after.counters.usefulSeconds).toBeGreaterThan(HOUR / 2 / 1000 - 60)
    expect((await world.events(running.n.backfill)).map((e) => e.reason)).toContain('BackfillCancelled')
  })

  it('a new declaration on a model idle for an hour (lastActiveTime) is admitted without a full window', async ({
    expect,
  }) => {
    const n = world.names('longidle')
    await world.model(n.model, { node: n.node, lastActiveTime: ago(HOUR) })
    await world.template(n.template)
    const created = Date.now()
    await world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '10m' })
    const started = await world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(Date.parse(started.status?.startedAt ?? '') - created).toBeLessThan(60_000)
    expect(started.status?.nodeName).toBe(n.node)
  })
})
