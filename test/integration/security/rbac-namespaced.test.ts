// Namespace-scoped RBAC with the real (RBAC-enforcing) apiserver: the generator's Roles for one managed namespace,
// applied as is. admit creates and deletes Jobs there and nowhere else; cancel deletes Jobs there and nowhere else;
// neither patches a ModelBackfill in an unlisted namespace; the cluster-wide reads the code needs still work.
import { randomBytes } from 'node:crypto'
import { BatchV1Api, CoreV1Api, CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { generateRbac, toYaml } from '../../../dev/tools/rbac/generate.js'
import { GROUP, VERSION } from '../../../pkg/core/api.js'
import { isApiError, useTestEnv } from '../../env/fixture.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const suffix = `-${randomBytes(3).toString('hex')}`
const unlisted = `t-rbac-unlisted${suffix}`
let manifests: ReturnType<typeof generateRbac>
const kcs: Record<string, KubeConfig> = {}

const job = (name: string) => ({
  metadata: { name },
  spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'x', image: 'busybox' }] } } },
})
const status = async (call: Promise<unknown>) => {
  try {
    await call
    return 200
  } catch (err) {
    for (const code of [403, 404]) if (isApiError(err, code)) return code
    throw err
  }
}

beforeAll(async () => {
  await env.kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: unlisted } } })
  manifests = generateRbac({ namespaces: [env.namespace], serviceAccountNamespace: env.namespace, nameSuffix: suffix })
  const applied = await env.kubectl(['apply', '-f', '-'], { input: toYaml(manifests) })
  if (applied.code !== 0) throw new Error(applied.stderr)
  for (const fn of ['admit', 'cancel']) kcs[fn] = await env.saKubeConfig(`model-backfill-${fn}${suffix}`)
  // The authorizer follows RBAC objects through an informer: wait until admit's Role is in effect.
  await waitUntil('the generated Role in effect', async () => {
    const code = await status(
      kcs.admit
        ?.makeApiClient(BatchV1Api)
        .createNamespacedJob({ namespace: env.namespace, body: job('probe') }) as Promise<unknown>,
    )
    return code === 200 ? true : undefined
  })
  await env.kc.makeApiClient(BatchV1Api).createNamespacedJob({ namespace: unlisted, body: job('theirs') })
})

afterAll(async () => {
  await env.kubectl(['delete', '--ignore-not-found', '--wait=false', 'namespace', unlisted])
  const cluster = manifests?.filter((m) => !m.metadata.namespace) ?? []
  if (cluster.length) await env.kubectl(['delete', '--ignore-not-found', '-f', '-'], { input: toYaml(cluster) })
})

it('admit creates and deletes Jobs in its namespace only', async () => {
  const batch = kcs.admit?.makeApiClient(BatchV1Api) as BatchV1Api
  expect(await status(batch.createNamespacedJob({ namespace: unlisted, body: job('x-admit') }))).toBe(403)
  expect(await status(batch.deleteNamespacedJob({ namespace: unlisted, name: 'theirs' }))).toBe(403)
  expect(
    await status(
      batch.deleteNamespacedJob({ namespace: env.namespace, name: 'probe', propagationPolicy: 'Background' }),
    ),
  ).toBe(200)
})

it('cancel deletes Jobs in its namespace only, and creates none', async () => {
  const batch = kcs.cancel?.makeApiClient(BatchV1Api) as BatchV1Api
  expect(await status(batch.deleteNamespacedJob({ namespace: unlisted, name: 'theirs' }))).toBe(403)
  // A burst's collection DELETE: granted in its namespace, refused in an unlisted one.
  const collection = (namespace: string) =>
    batch.deleteCollectionNamespacedJob({ namespace, labelSelector: 'ai.flexinfer/attempt in (none)' })
  expect(await status(collection(unlisted))).toBe(403)
  expect(await status(collection(env.namespace))).toBe(200)
  expect(await status(batch.createNamespacedJob({ namespace: env.namespace, body: job('x-cancel') }))).toBe(403)
  await env.kc.makeApiClient(BatchV1Api).createNamespacedJob({ namespace: env.namespace, body: job('ours') })
  expect(
    await status(
      batch.deleteNamespacedJob({ namespace: env.namespace, name: 'ours', propagationPolicy: 'Background' }),
    ),
  ).toBe(200)
  // The Job in the unlisted namespace is still there.
  expect(
    (await env.kc.makeApiClient(BatchV1Api).readNamespacedJob({ namespace: unlisted, name: 'theirs' })).metadata?.name,
  ).toBe('theirs')
})

it('no ModelBackfill of an unlisted namespace can be patched or its status written; the cluster-wide reads work', async () => {
  for (const fn of ['admit', 'cancel']) {
    const custom = kcs[fn]?.makeApiClient(CustomObjectsApi) as CustomObjectsApi
    const where = (namespace: string) => ({
      group: GROUP,
      version: VERSION,
      plural: 'modelbackfills',
      namespace,
      name: 'x',
    })
    expect(await status(custom.patchNamespacedCustomObject({ ...where(unlisted), body: [] })), fn).toBe(403)
    expect(await status(custom.replaceNamespacedCustomObjectStatus({ ...where(unlisted), body: {} })), fn).toBe(403)
    // In its own namespace the verb is granted: the object just does not exist.
    expect(await status(custom.getNamespacedCustomObject(where(env.namespace))), fn).toBe(404)
    expect(await status(custom.getNamespacedCustomObject(where(unlisted))), fn).toBe(403)
    // GamingSessions and GPULeases target nodes: read across the cluster by design.
    expect(
      await status(custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: 'gamingsessions' })),
      fn,
    ).toBe(200)
  }
  // Events are written only where the backfills are.
  const core = kcs.admit?.makeApiClient(CoreV1Api) as CoreV1Api
  const event = {
    metadata: { name: `e${suffix}` },
    involvedObject: { kind: 'Pod', name: 'x' },
    reason: 'Test',
    message: 'x',
  }
  expect(
    await status(
      core.createNamespacedEvent({
        namespace: unlisted,
        body: { ...event, metadata: { ...event.metadata, namespace: unlisted } },
      }),
    ),
  ).toBe(403)
})
