// A namespace-scoped deployment with ONLY the generated namespace-scoped RBAC (dev/tools/rbac/generate.ts: a Role +
// RoleBinding per managed namespace, a read-only ClusterRole for GamingSessions and GPULeases alone), on the real
// RBAC-enforcing apiserver: every function runs as its own ServiceAccount with WATCH_NAMESPACES set, and must admit
// and preempt a backfill end to end — so none of them may list or watch Jobs, Models or ModelBackfills across the
// cluster. A GamingSession outside the scope still preempts a backfill on its node (read cluster-wide on purpose).
// Each ServiceAccount is refused listing Jobs and Models in another namespace and across the cluster.
import { randomBytes } from 'node:crypto'
import { BatchV1Api, CoreV1Api, CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { generateRbac, toYaml } from '../../../dev/tools/rbac/generate.js'
import { GROUP, VERSION } from '../../../pkg/core/api.js'
import { jobName } from '../../../pkg/core/names.js'
import { isApiError, useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner, testInstance } from '../support/runner.js'

const env = useTestEnv()
const suffix = `-${randomBytes(3).toString('hex')}`
const other = `t-scoped-other${suffix}`
const ROLES = ['admit', 'cancel', 'lifecycle', 'watch'] as const
/** The ServiceAccount of each role (the generator's names with the suffix; `watch` is the event source's). */
const SA = {
  admit: `model-backfill-admit${suffix}`,
  cancel: `model-backfill-cancel${suffix}`,
  lifecycle: `model-backfill-lifecycle${suffix}`,
  watch: `model-backfill-source${suffix}`,
}
/** A runner that cannot start within this is stuck (e.g. an informer whose list is refused retries forever). */
const START_DEADLINE_MS = 60_000

let manifests: ReturnType<typeof generateRbac> = []
const kcs = {} as Record<(typeof ROLES)[number], KubeConfig>
const runners: Runner[] = []
let world: BackfillWorld
let otherWorld: BackfillWorld

const status = async (call: Promise<unknown>) => {
  try {
    await call
    return 200
  } catch (err) {
    for (const code of [403, 404]) if (isApiError(err, code)) return code
    throw err
  }
}

const withDeadline = <T>(what: string, p: Promise<T>): Promise<T> => {
  let timer: NodeJS.Timeout | undefined
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} did not start within ${START_DEADLINE_MS} ms`)),
      START_DEADLINE_MS,
    )
  })
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer))
}

beforeAll(async () => {
  await env.kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: other } } })
  manifests = generateRbac({ namespaces: [env.namespace], serviceAccountNamespace: env.namespace, nameSuffix: suffix })
  const applied = await env.kubectl(['apply', '-f', '-'], { input: toYaml(manifests) })
  if (applied.code !== 0) throw new Error(applied.stderr)
  for (const role of ROLES) kcs[role] = await env.saKubeConfig(SA[role])
  // The authorizer follows RBAC objects through an informer: wait until the last Role applied is in effect.
  await waitUntil('the generated Roles in effect', async () => {
    const code = await status(kcs.watch.makeApiClient(BatchV1Api).listNamespacedJob({ namespace: env.namespace }))
    return code === 200 ? true : undefined
  })
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  otherWorld = new BackfillWorld(env.kc, other, env.nc)
  // As deployed: one process per function, each with its own ServiceAccount; the event source (source's watcher)
  // with the watch role; demand makes no Kubernetes call at all.
  const instance = testInstance()
  const start = (functions: string[], kubeconfig: KubeConfig, watch = false) =>
    withDeadline(
      functions.join(','),
      startTestRunner(env, { functions, kubeconfig, watch, instance, namespaces: [env.namespace] }),
    ).then((r) => runners.push(r))
  await start(['cancel'], kcs.cancel)
  await start(['admit'], kcs.admit)
  await start(['lifecycle'], kcs.lifecycle)
  await start(['source', 'demand'], kcs.watch, true)
})

afterAll(async () => {
  for (const r of runners) await r.stop().catch(() => {})
  world?.close()
  otherWorld?.close()
  await env.kubectl(['delete', '--ignore-not-found', '--wait=false', 'namespace', other])
  const cluster = manifests.filter((m) => !m.metadata.namespace)
  if (cluster.length) await env.kubectl(['delete', '--ignore-not-found', '-f', '-'], { input: toYaml(cluster) })
})

it('admits and preempts in the watched namespace with only the namespaced Roles; a session elsewhere still preempts', async () => {
  const node = `scoped-node-${env.namespace}`
  await world.model('sc-model', { node })
  await world.template('sc-tpl')
  await world.backfill('sc', { modelRef: 'sc-model', templateRef: 'sc-tpl', idleFor: '2s' })
  const running = await world.waitFor('sc', 'Running', 'JobRunning', 45_000)
  expect(running.status?.jobName).toBe(jobName('sc', 1))

  // Foreground demand: demand → cancel deletes the Job.
  await world.foreground('sc-model')
  await waitUntil(
    'Job 1 deleted',
    async () => ((await world.job(jobName('sc', 1))) === null ? true : undefined),
    20_000,
  )
  await world.waitFor('sc', 'WaitingForIdle', 'IdleWindow', 20_000)

  // Admitted again after a quiet window; then a GamingSession in a namespace outside the scope, on the model's
  // node: GamingSessions are read cluster-wide on purpose, so it cancels the attempt.
  await world.waitForStatus('sc', 'Running, attempt 2', (s) => s.phase === 'Running' && s.attempts === 2, 45_000)
  await otherWorld.gamingSession('sc-session', node)
  await waitUntil(
    'Job 2 deleted',
    async () => ((await world.job(jobName('sc', 2))) === null ? true : undefined),
    20_000,
  )
  await world.waitFor('sc', 'Blocked', 'GamingIntent', 20_000)
})

it('more than 64 namespaces is a start error, before any watch is opened', async () => {
  const many = Array.from({ length: 65 }, (_, i) => `ns-${i}`)
  await expect(
    startTestRunner(env, { functions: ['admit'], kubeconfig: kcs.admit, watch: true, namespaces: many }),
  ).rejects.toThrow(/at most 64/)
})

it('every ServiceAccount is refused listing Jobs and Models in another namespace and across the cluster', async () => {
  for (const role of ROLES) {
    const batch = kcs[role].makeApiClient(BatchV1Api)
    const custom = kcs[role].makeApiClient(CustomObjectsApi)
    const crd = (plural: string) => ({ group: GROUP, version: VERSION, plural })
    expect(await status(batch.listNamespacedJob({ namespace: other })), role).toBe(403)
    expect(await status(batch.listJobForAllNamespaces()), role).toBe(403)
    expect(await status(custom.listNamespacedCustomObject({ ...crd('models'), namespace: other })), role).toBe(403)
    expect(await status(custom.listClusterCustomObject(crd('models'))), role).toBe(403)
    expect(await status(custom.listClusterCustomObject(crd('modelbackfills'))), role).toBe(403)
    // In the watched namespace the same list is granted (every role reads Jobs there).
    expect(await status(batch.listNamespacedJob({ namespace: env.namespace })), role).toBe(200)
    // GamingSessions: read across the cluster by design.
    expect(await status(custom.listClusterCustomObject(crd('gamingsessions'))), role).toBe(200)
  }
})
