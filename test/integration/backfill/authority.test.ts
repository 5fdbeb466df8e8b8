// What the functions may act on, and what they do when the cluster says no (issue 8): refs that cannot name an
// object end Blocked without breaking anyone else; a cancel request deletes only a Job of the backfill it names; a
// re-created ModelBackfill never adopts its predecessor's Job; a Job refused by the apiserver (ResourceQuota)
// releases its model and node and is retried on a re-check.
import { CoreV1Api } from '@kubernetes/client-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { afterAll, beforeAll, describe, inject, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { BUCKET_CLAIMS, STREAM_DEAD_LETTER } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { backfillLabelValue, jobName, LABEL_BACKFILL } from '../../../pkg/core/names.js'
import { SCHEDULER_TICK_MS } from '../../../pkg/core/timer-tick.js'
import { DEAD_LETTER_REASON } from '../../../pkg/jetstream/dead-letter-headers.js'
import { sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, handledAll, STARTED, waitUntil } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let world: BackfillWorld
/** A namespace with a ResourceQuota that allows no Job. */
let quotaWorld: BackfillWorld
/** A namespace no ModelBackfill lives in: its Jobs belong to someone else. */
let foreignWorld: BackfillWorld
const extra: string[] = []

async function namespace(suffix: string) {
  const core = env.kc.makeApiClient(CoreV1Api)
  const name = `${env.namespace}-${suffix}`
  await core.createNamespace({ body: { metadata: { name } } })
  extra.push(name)
  await waitUntil(`default ServiceAccount in ${name}`, async () =>
    core.readNamespacedServiceAccount({ name: 'default', namespace: name }).catch(() => undefined),
  )
  return new BackfillWorld(env.kc, name, env.nc)
}

beforeAll(async () => {
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  quotaWorld = await namespace('q')
  foreignWorld = await namespace('f')
  runner = await startTestRunner(env, { namespaces: [env.namespace, ...extra] })
})
afterAll(async () => {
  world?.close()
  await runner?.stop()
  for (const name of extra) {
    await env.kc
      .makeApiClient(CoreV1Api)
      .deleteNamespace({ name })
      .catch(() => {})
  }
})

describe.concurrent('hostile refs', () => {
  it('refs no object can have end Blocked with the reason; a normal backfill next to them runs', async ({ expect }) => {
    const n = await world.declare('plain')
    const hostile: [string, { modelRef?: string; templateRef?: string }, string][] = [
      ['space', { modelRef: 'gemma 4' }, 'ModelNotFound'],
      ['upper', { modelRef: 'Gemma' }, 'ModelNotFound'],
      ['star', { modelRef: 'llm*' }, 'ModelNotFound'],
      ['gt', { modelRef: 'llm.>' }, 'ModelNotFound'],
      ['dots', { modelRef: 'a..b' }, 'ModelNotFound'],
      ['unicode', { modelRef: 'modèle' }, 'ModelNotFound'],
      ['crlf', { modelRef: 'llm\r\nX-Injected: 1' }, 'ModelNotFound'],
      ['tpl-dotdot', { templateRef: '..' }, 'TemplateNotFound'],
      ['tpl-space', { templateRef: 'my template' }, 'TemplateNotFound'],
    ]
    for (const [id, refs] of hostile) {
      await world.backfill(`hostile-${id}`, { modelRef: n.model, templateRef: n.template, idleFor: '1s', ...refs })
    }
    // Longer than any name the CRD lets through: written past admission, as an old object would be.
    await world.backfillBypassingAdmission(inject('testEnv').etcdUrl, 'hostile-long', {
      modelRef: 'x'.repeat(300),
      templateRef: n.template,
      idleFor: '1s',
    })
    hostile.push(['long', { modelRef: 'x'.repeat(300) }, 'ModelNotFound'])
    const declaredAt = Date.now()

    for (const [id, refs, reason] of hostile) {
      const field = refs.modelRef !== undefined ? 'modelRef' : 'templateRef'
      const b = await world.waitFor(`hostile-${id}`, 'Blocked', reason)
      expect(b.status?.message).toMatch(
        new RegExp(`^${field} ".*"( \\(\\d+ characters\\))? is not a valid Kubernetes object name`, 's'),
      )
      expect(b.status?.message).not.toMatch(/[\r\n]/)
    }
    expect(await world.events('hostile-space')).toContainEqual(
      expect.objectContaining({ type: 'Warning', reason: 'Blocked', message: expect.stringMatching(/gemma 4/) }),
    )
    await world.waitFor(n.backfill, 'Running', 'JobRunning')
    // Time is the subject here: their idleFor (1s, and a scheduler tick) must have passed since the last of them was
    // declared, so that any timer armed for their window has fired; then admit has handled all it was sent.
    await sleep(declaredAt + 1000 + SCHEDULER_TICK_MS - Date.now())
    await handledAll(runner, ['admit'])
    // Still nothing created for them.
    for (const [id] of hostile) expect(await world.jobsOf(`hostile-${id}`)).toEqual([])
    // Fixing the ref is a spec change like any other: it then runs.
    await world.patchBackfillSpec('hostile-space', { modelRef: n.model })
    await world.waitFor('hostile-space', 'Blocked', 'ConcurrentBackfill')
  })
})

/** Publishes a cancel request as any function allowed to could; returns its dead-letter reason, if any. */
async function forgeCancel(data: { namespace: string; backfill: string; jobName: string }) {
  const jsm = await jetstreamManager(env.nc)
  const before = (await jsm.streams.info(STREAM_DEAD_LETTER)).state.last_seq
  const id = `forged-${Math.random().toString(16).slice(2)}`
  await jetstream(env.nc).publish(
    'flexinfer.events.backfill.cancel',
    encode(
      'ai.flexinfer.backfill.cancel',
      { ...data, reason: 'ForegroundDemand', at: new Date().toISOString() },
      { id },
    ),
  )
  const ours = `flexinfer.deadletter.${runner.functions.find((f) => f.name.startsWith('cancel'))?.name}`
  return waitUntil(
    `dead letter of ${id}`,
    async () => {
      const last = (await jsm.streams.info(STREAM_DEAD_LETTER)).state.last_seq
      for (let seq = before + 1; seq <= last; seq++) {
        const msg = await jsm.streams.getMessage(STREAM_DEAD_LETTER, { seq }).catch(() => null)
        const reason = msg?.subject === ours ? msg.header?.get(DEAD_LETTER_REASON) : ''
        if (reason?.includes(id)) return reason
      }
      return undefined
    },
    15_000,
  )
}

const alive = async (w: BackfillWorld, name: string) => {
  const job = await w.job(name)
  return job !== null && !job.metadata?.deletionTimestamp
}

describe.concurrent('cancel authority', () => {
  it('a cancel naming a Job no ModelBackfill owns, in another namespace, deletes nothing and is dead-lettered', async ({
    expect,
  }) => {
    await foreignWorld.batch.createNamespacedJob({
      namespace: foreignWorld.namespace,
      body: {
        metadata: { name: 'payroll' },
        spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox' }] } } },
      },
    })
    const reason = await forgeCancel({ namespace: foreignWorld.namespace, backfill: 'payroll', jobName: 'payroll' })
    expect(reason).toMatch(
      new RegExp(`refusing to delete Job ${foreignWorld.namespace}/payroll for backfill payroll: it carries no`),
    )
    // The dead letter is the cancel handled: the refusal is decided before any DELETE is sent.
    expect(await alive(foreignWorld, 'payroll')).toBe(true)
  })

  it('a Job with our label value but no owner, or owned by another backfill, is not deleted', async ({ expect }) => {
    await world.batch.createNamespacedJob({
      namespace: env.namespace,
      body: {
        metadata: { name: 'lookalike', labels: { [LABEL_BACKFILL]: backfillLabelValue('victim') } },
        spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox' }] } } },
      },
    })
    const noOwner = await forgeCancel({ namespace: env.namespace, backfill: 'victim', jobName: 'lookalike' })
    expect(noOwner).toMatch(/refusing to delete Job .*\/lookalike for backfill victim: it has no controller/)
    // A running attempt of a real backfill, named on behalf of another backfill.
    const n = await world.declare('owned')
    await world.waitFor(n.backfill, 'Running', 'JobRunning')
    const job = jobName(n.backfill, 1)
    const other = await forgeCancel({ namespace: env.namespace, backfill: 'victim', jobName: job })
    expect(other).toMatch(/its ai.flexinfer\/model-backfill label is not that of backfill victim/)
    // Both dead letters are the cancels handled: the refusal is decided before any DELETE is sent.
    expect(await alive(world, 'lookalike')).toBe(true)
    expect(await alive(world, job)).toBe(true)
    expect((await world.getBackfill(n.backfill))?.status?.phase).toBe('Running')
  })

  it("a Job carrying a backfill's label but not owned by it is never cleaned up as that backfill's stray", async ({
    expect,
  }) => {
    const n = world.names('labelled')
    await world.batch.createNamespacedJob({
      namespace: env.namespace,
      body: {
        metadata: { name: `${n.backfill}-7-unowned`, labels: { [LABEL_BACKFILL]: backfillLabelValue(n.backfill) } },
        spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox' }] } } },
      },
    })
    // The backfill is declared and decided many times (finalizer, window, timers): none of it may touch that Job.
    await world.declare('labelled')
    await world.waitFor(n.backfill, 'WaitingForIdle')
    // Its window ended, its timer fired and it was admitted; and the functions that reconcile (and so may delete a
    // stray) have handled all they were sent by then.
    await world.waitFor(n.backfill, 'Running', 'JobRunning')
    await handledAll(runner, ['admit', 'cancel', 'lifecycle'])
    expect(await alive(world, `${n.backfill}-7-unowned`)).toBe(true)
  })

  it('a real foreground cancel still deletes its Job at once', async ({ expect }) => {
    const n = await world.declare('realcancel')
    await world.waitFor(n.backfill, 'Running', 'JobRunning')
    const job = jobName(n.backfill, 1)
    expect((await world.pods(job)).length).toBeGreaterThan(0)
    const at = await world.foreground(n.model)
    await waitUntil('Job deleted', async () => ((await alive(world, job)) ? undefined : true), 5_000)
    expect(Date.now() - at).toBeLessThan(5_000)
    // Its pods go with it (the uid-guarded DELETE keeps foreground propagation; a Job's default orphans them).
    await waitUntil('pods deleted', async () => {
      const pods = await world.core.listNamespacedPod({ namespace: env.namespace, labelSelector: `job-name=${job}` })
      return pods.items.every((p) => p.metadata?.deletionTimestamp) ? true : undefined
    })
    await world.waitFor(n.backfill, 'WaitingForIdle', 'IdleWindow')
    expect((await world.state(n.backfill))?.counters.preemptions).toEqual({ foreground: 1 })
  })
})

describe.concurrent('adoption by name', () => {
  it('a re-created ModelBackfill runs its own Job, not its predecessor’s finished one of the same name', async ({
    expect,
  }) => {
    const n = await world.declare('reborn')
    await world.waitFor(n.backfill, 'Running', 'JobRunning')
    const job = jobName(n.backfill, 1)
    await world.finishJob(job, 'Succeeded')
    await world.waitFor(n.backfill, 'Succeeded', 'JobComplete')
    const oldUid = (await world.getBackfill(n.backfill))?.metadata.uid
    // Orphaned: the completed Job stays, without owner, under the name attempt 1 of any backfill "reborn" gets.
    const deleted = await env.kubectl(['delete', 'mbf', n.backfill, '-n', env.namespace, '--cascade=orphan'])
    expect(deleted.code).toBe(0)
    await waitUntil('old ModelBackfill gone', async () => ((await world.getBackfill(n.backfill)) ? undefined : true))
    expect((await world.job(job))?.status?.succeeded).toBe(1)

    const history = await world.history(n.backfill)
    await world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '2s' })
    const running = await world.waitFor(n.backfill, 'Running', 'JobRunning')
    const newUid = running.metadata.uid
    expect(newUid).not.toBe(oldUid)
    const current = await world.job(job)
    expect(current?.metadata?.ownerReferences?.find((r) => r.controller)?.uid).toBe(newUid)
    expect(current?.status?.succeeded ?? 0).toBe(0)
    expect(history.phases()).not.toContain('Succeeded/JobComplete')
    expect(history.phases().slice(0, 3)).toEqual(STARTED)
    history.stop()
  })
  it('a Job of someone else under the attempt’s name is left alone: Blocked/JobRejected, not adopted or deleted', async ({
    expect,
  }) => {
    const n = world.names('squatted')
    const job = jobName(n.backfill, 1)
    await world.batch.createNamespacedJob({
      namespace: env.namespace,
      body: {
        metadata: { name: job },
        spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox' }] } } },
      },
    })
    await world.declare('squatted')
    const blocked = await world.waitFor(n.backfill, 'Blocked', 'JobRejected')
    expect(blocked.status?.message).toMatch(/the name is taken by Job .*, which ModelBackfill squatted does not own/)
    expect(await alive(world, job)).toBe(true)
    expect((await world.job(job))?.metadata?.ownerReferences).toBeUndefined()
  })
})

describe.concurrent('a Job refused by the apiserver', () => {
  it('ResourceQuota count/jobs.batch=0: Blocked/JobRejected, claims released, re-checked until the quota goes', async ({
    expect,
  }) => {
    const ns = quotaWorld.namespace
    await quotaWorld.core.createNamespacedResourceQuota({
      namespace: ns,
      body: { metadata: { name: 'no-jobs' }, spec: { hard: { 'count/jobs.batch': '0' } } },
    })
    // The test environment runs no quota controller: write the status it would (usage 0 of 0), which is what the
    // apiserver's ResourceQuota admission checks a create against.
    const quota = await quotaWorld.core.readNamespacedResourceQuota({ namespace: ns, name: 'no-jobs' })
    await quotaWorld.core.replaceNamespacedResourceQuotaStatus({
      namespace: ns,
      name: 'no-jobs',
      body: { ...quota, status: { hard: { 'count/jobs.batch': '0' }, used: { 'count/jobs.batch': '0' } } },
    })
    const n = world.names('quota')
    await quotaWorld.model(n.model, { node: n.node })
    await quotaWorld.template(n.template)
    await quotaWorld.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '1s' })
    const blocked = await quotaWorld.waitFor(n.backfill, 'Blocked', 'JobRejected')
    expect(blocked.status?.message).toMatch(/was refused by the apiserver: .*exceeded quota: no-jobs/)
    expect(blocked.status?.jobName).toBeUndefined()
    expect(blocked.status?.attempts ?? 0).toBe(0)
    expect(await quotaWorld.events(n.backfill)).toContainEqual(
      expect.objectContaining({ type: 'Warning', reason: 'Blocked', message: expect.stringMatching(/^JobRejected: /) }),
    )
    const claims = await new Kvm(env.nc).open(BUCKET_CLAIMS)
    for (const key of [`model.${ns}.${n.model}`, `node.${n.node}`]) {
      const entry = await claims.get(key)
      expect(entry === null || entry.operation !== 'PUT', key).toBe(true)
    }

    // Another backfill on the same node (another model, another namespace) is not held up by the refused one.
    const other = world.names('quota-other')
    await world.model(other.model, { node: n.node })
    await world.template(other.template)
    await world.backfill(other.backfill, { modelRef: other.model, templateRef: other.template, idleFor: '1s' })
    await world.waitFor(other.backfill, 'Running', 'JobRunning')
    await world.finishJob(jobName(other.backfill, 1), 'Succeeded')
    await world.waitFor(other.backfill, 'Succeeded', 'JobComplete')

    await quotaWorld.core.deleteNamespacedResourceQuota({ namespace: ns, name: 'no-jobs' })
    const running = await quotaWorld.waitFor(n.backfill, 'Running', 'JobRunning', 90_000)
    expect(running.status?.attempts).toBe(1)
    expect((await quotaWorld.state(n.backfill))?.counters.starts).toBe(1)
  })
})
