// admit decides on watched copies of the ModelBackfill and its CronJob template (issue 11, admission lateness), and
// the Job must still come from the spec and template the user has when it is created: a copy that lags the apiserver
// must never put a Job from the old spec into the cluster (pkg/admission/copies-unchanged.ts). Each test makes admit's
// copy lag for good — the real watch stopped, its last objects kept, as a slow or stalled watch leaves them — then
// changes the object in the apiserver and lets the idle window's timer admit. Everything runs against the real
// servers; admit runs in a runner of its own (as deployed), lifecycle, demand and cancel beside it.
import type { V1Container } from '@kubernetes/client-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { jobName } from '../../../pkg/core/names.js'
import type { SharedCaches } from '../../../pkg/kube/shared-caches.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, handledAll, ms, waitUntil } from '../support/backfill-world.js'
import { startTestRunner, testInstance } from '../support/runner.js'

const env = useTestEnv()
let lifecycle: Runner | undefined
let preemption: Runner
let admit: Runner
let world: BackfillWorld

beforeAll(async () => {
  const instance = testInstance()
  lifecycle = await startTestRunner(env, { instance, functions: ['source', 'lifecycle'] })
  // The fence needs demand and cancel running: they stay up in every test.
  preemption = await startTestRunner(env, { instance, functions: ['demand', 'cancel'], watch: false })
  admit = await startTestRunner(env, { instance, functions: ['admit'], watch: false })
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  world?.close()
  await admit?.stop()
  await preemption?.stop()
  await lifecycle?.stop()
})

/** Stops lifecycle (and its watcher) for the rest of the file. */
async function stopLifecycle() {
  const r = lifecycle
  lifecycle = undefined
  await r?.stop()
}

const caches = () => admit.deps.caches as SharedCaches

/** Declares `id` (idle window 6 s: time for the test's change before the timer), waits for its window to run, and returns when its timer is due. */
async function waiting(id: string) {
  const n = await world.declare(id, { idleFor: '6s' })
  const w = await world.waitFor(n.backfill, 'WaitingForIdle', 'IdleWindow')
  return { ...n, due: ms(w.status?.idleSince) + 6000 }
}

describe.sequential("a change admit's watched copy has not seen", () => {
  it('templates changed before the POST: the Job has the new image; one now requesting a GPU gets none', async () => {
    const [image, gpu] = await Promise.all([waiting('tplimage'), waiting('tplgpu')])
    for (const n of [image, gpu]) {
      await waitUntil(
        'template in admit’s copy',
        async () => caches().templates?.get(env.namespace, n.template) ?? undefined,
      )
    }
    await caches().templates?.stop()
    const edit = async (template: string, change: (c: V1Container) => void) => {
      const tpl = await world.batch.readNamespacedCronJob({ name: template, namespace: env.namespace })
      const container = tpl.spec?.jobTemplate.spec?.template.spec?.containers[0]
      if (container) change(container)
      await world.batch.replaceNamespacedCronJob({ name: template, namespace: env.namespace, body: tpl })
    }
    await edit(image.template, (c) => {
      c.image = 'busybox:1.36'
    })
    await edit(gpu.template, (c) => {
      c.resources = { limits: { 'nvidia.com/gpu': '1' } }
    })
    const stale = caches().templates?.get(env.namespace, gpu.template)
    expect(stale?.spec?.jobTemplate.spec?.template.spec?.containers[0]?.resources?.limits).toBeUndefined()

    const job = await waitUntil('the Job', async () => (await world.job(jobName(image.backfill, 1))) ?? undefined)
    expect(job.spec?.template.spec?.containers[0]?.image).toBe('busybox:1.36')
    // The GPU gate decided on the template as it is now, not on the copy: Blocked, and no Job.
    await world.waitFor(gpu.backfill, 'Blocked', 'GPURequestForbidden', Math.max(0, gpu.due - Date.now()) + 30_000)
    // The timer's admission is over (admit has handled all it was sent): a Job POSTed from the stale copy would be
    // there by now.
    await handledAll(admit)
    expect(await world.jobsOf(gpu.backfill)).toEqual([])
    expect((await world.state(gpu.backfill))?.attempts ?? 0).toBe(0)
  })

  it('suspend: true set before the POST: no Job from the old spec, the backfill Suspended', async () => {
    const n = await waiting('suspend')
    await waitUntil(
      'backfill in admit’s copy',
      async () => caches().backfills?.get(env.namespace, n.backfill) ?? undefined,
    )
    // Lifecycle would see the change first and suspend the backfill itself: stop it, so the window's timer
    // (admit's) is the first decision to meet the new spec — on a copy that still says suspend: false.
    await stopLifecycle()
    await caches().backfills?.stop()
    await world.patchBackfillSpec(n.backfill, { suspend: true })
    expect(caches().backfills?.get(env.namespace, n.backfill)?.spec.suspend).toBeFalsy()

    await world.waitFor(n.backfill, 'Suspended', 'Suspended', Math.max(0, n.due - Date.now()) + 30_000)
    // The timer's admission is over (admit has handled all it was sent): a Job POSTed from the old spec would be
    // there by now.
    await handledAll(admit)
    expect(await world.jobsOf(n.backfill)).toEqual([])
    const state = await world.state(n.backfill)
    expect(state?.attempts ?? 0).toBe(0)
    expect(state?.phase).toBe('Suspended')
  })
})
