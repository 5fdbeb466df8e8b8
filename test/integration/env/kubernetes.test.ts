// The Kubernetes side of the environment behaves like a real cluster: RBAC is enforced for ServiceAccount tokens,
// the Job controller concludes Jobs, and the garbage collector follows owner references.
import {
  AuthenticationV1Api,
  BatchV1Api,
  CoreV1Api,
  type KubeConfig,
  RbacAuthorizationV1Api,
  type V1ConfigMap,
  type V1Job,
} from '@kubernetes/client-node'
import { describe, expect, it } from 'vitest'
import { waitFor } from '../../env/exec.js'
import { isApiError, useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()

async function expectForbidden(call: Promise<unknown>): Promise<void> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(err, 'expected the apiserver to refuse with 403 Forbidden').toBeDefined()
  expect(isApiError(err, 403), `expected 403, got ${String(err)}`).toBe(true)
}

describe('RBAC', () => {
  it('a ServiceAccount token without a Role is Forbidden to list pods; a Role and RoleBinding grant exactly that', async () => {
    const ns = env.namespace
    const saKc: KubeConfig = await env.saKubeConfig('pod-reader')

    const review = await saKc.makeApiClient(AuthenticationV1Api).createSelfSubjectReview({ body: {} })
    expect(review.status?.userInfo?.username).toBe(`system:serviceaccount:${ns}:pod-reader`)

    const asSa = saKc.makeApiClient(CoreV1Api)
    await expectForbidden(asSa.listNamespacedPod({ namespace: ns }))

    const rbac = env.kc.makeApiClient(RbacAuthorizationV1Api)
    await rbac.createNamespacedRole({
      namespace: ns,
      body: {
        metadata: { name: 'pod-reader' },
        rules: [{ apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] }],
      },
    })
    await rbac.createNamespacedRoleBinding({
      namespace: ns,
      body: {
        metadata: { name: 'pod-reader' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'pod-reader' },
        subjects: [{ kind: 'ServiceAccount', name: 'pod-reader', namespace: ns }],
      },
    })
    // The RBAC authorizer reads Roles through an informer: allowed within moments, not necessarily at once.
    const pods = await waitFor('the RoleBinding to take effect', () => asSa.listNamespacedPod({ namespace: ns }), {
      timeoutMs: 15_000,
    })
    expect(pods.items).toEqual([])

    // Only what the Role grants, only where it is bound.
    await expectForbidden(asSa.listNamespacedSecret({ namespace: ns }))
    await expectForbidden(asSa.listNamespacedPod({ namespace: 'default' }))
    await expectForbidden(asSa.deleteNamespacedPod({ namespace: ns, name: 'anything' }))
  })
})

function job(name: string, spec: Partial<NonNullable<V1Job['spec']>> = {}): V1Job {
  return {
    metadata: { name },
    spec: {
      backoffLimit: 0,
      template: {
        spec: {
          restartPolicy: 'Never',
          containers: [{ name: 'work', image: 'registry.invalid/never-pulled:1', command: ['sleep', '600'] }],
        },
      },
      ...spec,
    },
  }
}

function condition(j: V1Job, type: string) {
  return j.status?.conditions?.find((c) => c.type === type && c.status === 'True')
}

describe('the Job controller', () => {
  it('fails a Job with activeDeadlineSeconds 2 (condition Failed, reason DeadlineExceeded)', async () => {
    const batch = env.kc.makeApiClient(BatchV1Api)
    const ns = env.namespace
    await batch.createNamespacedJob({ namespace: ns, body: job('deadline', { activeDeadlineSeconds: 2 }) })

    // The controller really runs: it creates the Job's pod (which stays Pending: no scheduler, no kubelet).
    const core = env.kc.makeApiClient(CoreV1Api)
    await waitFor('the Job pod', async () => {
      const pods = await core.listNamespacedPod({ namespace: ns, labelSelector: 'job-name=deadline' })
      return pods.items.length > 0 || undefined
    })

    const failed = await waitFor(
      'Job deadline to fail',
      async () => {
        const j = await batch.readNamespacedJob({ name: 'deadline', namespace: ns })
        return condition(j, 'Failed') ? j : undefined
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    )
    expect(condition(failed, 'Failed')?.reason).toBe('DeadlineExceeded')
    expect(condition(failed, 'Complete')).toBeUndefined()
    const started = Date.parse(String(failed.status?.startTime))
    const failedAt = Date.parse(String(condition(failed, 'Failed')?.lastTransitionTime))
    expect(failedAt - started).toBeGreaterThanOrEqual(2_000)
  })

  it('completes a Job whose pod a test marks Succeeded through pods/status', async () => {
    const batch = env.kc.makeApiClient(BatchV1Api)
    const core = env.kc.makeApiClient(CoreV1Api)
    const ns = env.namespace
    await batch.createNamespacedJob({ namespace: ns, body: job('finishes') })
    const pod = await waitFor('the Job pod', async () => {
      const pods = await core.listNamespacedPod({ namespace: ns, labelSelector: 'job-name=finishes' })
      return pods.items[0]
    })
    expect(pod.status?.phase).toBe('Pending')
    await core.replaceNamespacedPodStatus({
      name: String(pod.metadata?.name),
      namespace: ns,
      body: { ...pod, status: { ...pod.status, phase: 'Succeeded' } },
    })
    const done = await waitFor(
      'Job finishes to complete',
      async () => {
        const j = await batch.readNamespacedJob({ name: 'finishes', namespace: ns })
        return condition(j, 'Complete') ? j : undefined
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    )
    expect(done.status?.succeeded).toBe(1)
    expect(condition(done, 'Failed')).toBeUndefined()
  })
})

describe('the garbage collector', () => {
  const configMap = (name: string, extra: Partial<NonNullable<V1ConfigMap['metadata']>> = {}): V1ConfigMap => ({
    metadata: { name, ...extra },
    data: { k: 'v' },
  })
  const ownedBy = (owner: V1ConfigMap, blockOwnerDeletion = false) => [
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      name: String(owner.metadata?.name),
      uid: String(owner.metadata?.uid),
      blockOwnerDeletion,
    },
  ]
  const gone = async (core: CoreV1Api, name: string) => {
    try {
      await core.readNamespacedConfigMap({ name, namespace: env.namespace })
      return false
    } catch (err) {
      if (isApiError(err, 404)) return true
      throw err
    }
  }

  it('deletes a dependent when its owner is deleted (background), and leaves unrelated objects alone', async () => {
    const core = env.kc.makeApiClient(CoreV1Api)
    const namespace = env.namespace
    const owner = await core.createNamespacedConfigMap({ namespace, body: configMap('owner') })
    await core.createNamespacedConfigMap({
      namespace,
      body: configMap('dependent', { ownerReferences: ownedBy(owner) }),
    })
    await core.createNamespacedConfigMap({ namespace, body: configMap('bystander') })

    await core.deleteNamespacedConfigMap({ name: 'owner', namespace })
    await waitFor('the dependent to be collected', () => gone(core, 'dependent'), { timeoutMs: 30_000 })
    expect(await gone(core, 'bystander')).toBe(false)
  })

  it('foreground deletion keeps the owner until its blocking dependent is gone', async () => {
    const core = env.kc.makeApiClient(CoreV1Api)
    const namespace = env.namespace
    const owner = await core.createNamespacedConfigMap({ namespace, body: configMap('fg-owner') })
    // A finalizer on the dependent holds it (and so the owner) in deletion until the test lets go.
    await core.createNamespacedConfigMap({
      namespace,
      body: configMap('fg-dependent', {
        ownerReferences: ownedBy(owner, true),
        finalizers: ['modelbackfill.test/hold'],
      }),
    })

    await core.deleteNamespacedConfigMap({ name: 'fg-owner', namespace, propagationPolicy: 'Foreground' })
    const dependent = await waitFor('the GC to delete the dependent', async () => {
      const d = await core.readNamespacedConfigMap({ name: 'fg-dependent', namespace })
      return d.metadata?.deletionTimestamp ? d : undefined
    })
    const heldOwner = await core.readNamespacedConfigMap({ name: 'fg-owner', namespace })
    expect(heldOwner.metadata?.deletionTimestamp).toBeDefined()
    expect(heldOwner.metadata?.finalizers).toContain('foregroundDeletion')

    await core.replaceNamespacedConfigMap({
      name: 'fg-dependent',
      namespace,
      body: { ...dependent, metadata: { ...dependent.metadata, finalizers: [] } },
    })
    await waitFor(
      'dependent and owner to be gone',
      async () => (await gone(core, 'fg-dependent')) && gone(core, 'fg-owner'),
      {
        timeoutMs: 30_000,
      },
    )
  })
})
