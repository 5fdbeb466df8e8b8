// What admit's start waits for (pkg/transport/deps.ts openDeps, pkg/kube/shared-caches.ts SharedCaches.startDeciding): the watched
// copies it decides on — Jobs, Models, GamingSessions, GPULeases — before it serves; its copies of the ModelBackfills
// and CronJobs, which only save a GET, after (cold start). Shown with a ServiceAccount that may list and watch only
// the first four: admit's Kubernetes side still opens, a ModelBackfill or CronJob is then not in a copy (admit GETs
// it), and lifecycle, which lists the shared ModelBackfill copy whole on a sweep, refuses to start on it.
import { afterAll, expect, it } from 'vitest'
import { LifecycleCaches } from '../../../functions/lifecycle/caches.js'
import { openDeps } from '../../../pkg/transport/deps.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
const closers: (() => Promise<void>)[] = []
afterAll(async () => {
  for (const close of closers) await close().catch(() => {})
})

/** A ServiceAccount that may list and watch Jobs and Models in the namespace and, cluster-wide, `clusterWide`. */
async function serviceAccount(sa: string, clusterWide: string) {
  const ns = env.namespace
  await env.kubectl(['create', 'serviceaccount', sa, '-n', ns])
  await env.kubectl(['create', 'role', sa, '-n', ns, '--verb=list,watch', '--resource=jobs.batch,models.ai.flexinfer'])
  await env.kubectl(['create', 'rolebinding', sa, '-n', ns, `--role=${sa}`, `--serviceaccount=${ns}:${sa}`])
  const clusterRole = `${sa}-${ns}`
  closers.push(async () => {
    await env.kubectl(['delete', 'clusterrolebinding', clusterRole, '--ignore-not-found'])
    await env.kubectl(['delete', 'clusterrole', clusterRole, '--ignore-not-found'])
  })
  const made = await env.kubectl([
    'create',
    'clusterrole',
    clusterRole,
    '--verb=list,watch',
    `--resource=${clusterWide}`,
  ])
  expect(made.code, made.stderr).toBe(0)
  await env.kubectl([
    'create',
    'clusterrolebinding',
    clusterRole,
    `--clusterrole=${clusterRole}`,
    `--serviceaccount=${ns}:${sa}`,
  ])
  return env.saKubeConfig(sa)
}

const openAdmit = async (kubeconfig: Awaited<ReturnType<typeof serviceAccount>>) =>
  openDeps({
    natsUrl: env.natsUrl,
    name: 'admit-start-test',
    functions: ['admit'],
    kubeconfig,
    namespaces: [env.namespace],
  })

it("admit serves once the copies it decides on are in; the ModelBackfills' and CronJobs' copies may come later", async () => {
  const ns = env.namespace
  const deps = await openAdmit(
    await serviceAccount('admit-deciding-only', 'gamingsessions.ai.flexinfer,gpuleases.ai.flexinfer'),
  )
  closers.push(() => deps.close())
  const caches = deps.caches
  expect(caches).toBeDefined()
  // The deciding copies are synced (an empty namespace: empty lists, not an error).
  expect(caches?.models.list()).toEqual([])
  // The others could not list: admit finds nothing in them and GETs instead (pkg/reconcile/observe.ts).
  await expect(caches?.copiesSynced).rejects.toThrow()
  expect(caches?.backfills?.get(ns, 'anything')).toBeNull()
  expect(caches?.templates?.get(ns, 'anything')).toBeNull()
  // lifecycle sharing these copies lists the ModelBackfills whole: it must not start on a copy that is not in.
  await expect(LifecycleCaches.start(deps)).rejects.toThrow()
}, 60_000)

it('a copy admit decides on that cannot be listed stops the start (an empty GPULease copy would admit onto leased GPUs)', async () => {
  const kubeconfig = await serviceAccount('admit-no-leases', 'gamingsessions.ai.flexinfer')
  await expect(openAdmit(kubeconfig)).rejects.toThrow()
}, 60_000)
