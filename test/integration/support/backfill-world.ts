// Builders and probes for end-to-end tests: Models (with status written through the status subresource, as
// FlexInfer would), CronJob templates, ModelBackfills, finishing a Job's pods the way a kubelet would, and
// waiting for a backfill to reach a phase. Everything goes through the real apiserver.
import { BatchV1Api, CoreV1Api, CustomObjectsApi, type KubeConfig, type V1Job } from '@kubernetes/client-node'
import type { KV } from '@nats-io/kv'
import { Kvm } from '@nats-io/kv'
import type { NatsConnection } from '@nats-io/transport-node'
import { GROUP, type ModelBackfill, type ModelBackfillSpec, VERSION } from '../../../core/api.js'
import { backfillKey } from '../../../core/names.js'
import type { BackfillState } from '../../../core/state.js'
import { BUCKET_BACKFILLS } from '../../../events/catalog.js'
import { sleep } from '../../env/exec.js'

export class BackfillWorld {
  readonly custom: CustomObjectsApi
  readonly batch: BatchV1Api
  readonly core: CoreV1Api

  constructor(
    readonly kc: KubeConfig,
    readonly namespace: string,
    readonly nc: NatsConnection,
  ) {
    this.custom = kc.makeApiClient(CustomObjectsApi)
    this.batch = kc.makeApiClient(BatchV1Api)
    this.core = kc.makeApiClient(CoreV1Api)
  }

  private crd(plural: string) {
    return { group: GROUP, version: VERSION, namespace: this.namespace, plural }
  }

  async model(name: string, opts: { phase?: string; node?: string; group?: string; lastActiveTime?: string } = {}) {
    const body = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'Model',
      metadata: { name, namespace: this.namespace },
      spec: { gpu: opts.group ? { shared: opts.group } : undefined },
    }
    const created = await this.custom.createNamespacedCustomObject({ ...this.crd('models'), body })
    await this.modelStatus(name, { phase: opts.phase ?? 'Ready', node: opts.node, lastActiveTime: opts.lastActiveTime })
    return created
  }

  async modelStatus(name: string, s: { phase?: string; node?: string; lastActiveTime?: string }) {
    const current = (await this.custom.getNamespacedCustomObject({ ...this.crd('models'), name })) as Record<
      string,
      unknown
    >
    await this.custom.replaceNamespacedCustomObjectStatus({
      ...this.crd('models'),
      name,
      body: {
        ...current,
        status: {
          phase: s.phase ?? 'Ready',
          ...(s.node ? { gpu: { node: s.node } } : {}),
          ...(s.lastActiveTime ? { lastActiveTime: s.lastActiveTime } : {}),
        },
      },
    })
  }

  async deleteModel(name: string) {
    await this.custom.deleteNamespacedCustomObject({ ...this.crd('models'), name })
  }

  async template(
    name: string,
    opts: {
      gpu?: boolean
      env?: { name: string; value?: string; valueFrom?: unknown }[]
      initContainer?: boolean
    } = {},
  ) {
    await this.batch.createNamespacedCronJob({
      namespace: this.namespace,
      body: {
        metadata: { name },
        spec: {
          schedule: '0 0 1 1 *',
          suspend: true,
          jobTemplate: {
            metadata: { labels: { app: 'eval' }, annotations: { 'example.com/keep': 'yes' } },
            spec: {
              backoffLimit: 0,
              template: {
                spec: {
                  restartPolicy: 'Never',
                  initContainers: opts.initContainer
                    ? [
                        {
                          name: 'prepare',
                          image: 'busybox',
                          env: [{ name: 'FLEXINFER_WORKLOAD_CLASS', value: 'foreground' }],
                        },
                      ]
                    : undefined,
                  containers: [
                    {
                      name: 'eval',
                      image: 'busybox',
                      command: ['sh', '-c', 'echo eval'],
                      env: opts.env as never,
                      resources: opts.gpu ? { limits: { 'nvidia.com/gpu': '1' } } : undefined,
                    },
                  ],
                },
              },
            },
          },
        },
      },
    })
  }

  async backfill(name: string, spec: Partial<ModelBackfillSpec> & { modelRef: string; templateRef: string }) {
    return (await this.custom.createNamespacedCustomObject({
      ...this.crd('modelbackfills'),
      body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'ModelBackfill', metadata: { name }, spec },
    })) as ModelBackfill
  }

  async patchBackfillSpec(name: string, spec: Partial<ModelBackfillSpec>) {
    const current = await this.getBackfill(name)
    await this.custom.replaceNamespacedCustomObject({
      ...this.crd('modelbackfills'),
      name,
      body: { ...current, spec: { ...current?.spec, ...spec } },
    })
  }

  async getBackfill(name: string): Promise<ModelBackfill | null> {
    try {
      return (await this.custom.getNamespacedCustomObject({ ...this.crd('modelbackfills'), name })) as ModelBackfill
    } catch (err) {
      if ((err as { code?: number }).code === 404) return null
      throw err
    }
  }

  async deleteBackfill(name: string) {
    await this.custom.deleteNamespacedCustomObject({ ...this.crd('modelbackfills'), name })
  }

  async gamingSession(name: string, nodeName: string, opts: { expiresAt?: string; mode?: string } = {}) {
    await this.custom.createNamespacedCustomObject({
      ...this.crd('gamingsessions'),
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: 'GamingSession',
        metadata: { name },
        spec: { nodeName, mode: opts.mode, expiresAt: opts.expiresAt },
      },
    })
  }

  async gpuLease(name: string, spec: { node?: string; group?: string; expiresAt?: string }) {
    await this.custom.createNamespacedCustomObject({
      ...this.crd('gpuleases'),
      body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'GPULease', metadata: { name }, spec },
    })
  }

  async deleteObject(plural: string, name: string) {
    await this.custom.deleteNamespacedCustomObject({ ...this.crd(plural), name })
  }

  async job(name: string): Promise<V1Job | null> {
    try {
      return await this.batch.readNamespacedJob({ namespace: this.namespace, name })
    } catch (err) {
      if ((err as { code?: number }).code === 404) return null
      throw err
    }
  }

  async jobs(): Promise<V1Job[]> {
    return (
      await this.batch.listNamespacedJob({ namespace: this.namespace, labelSelector: 'ai.flexinfer/model-backfill' })
    ).items
  }

  /** Plays the kubelet: the Job's pods finish with `phase`, and the real Job controller concludes the Job. */
  async finishJob(jobName: string, phase: 'Succeeded' | 'Failed') {
    const pods = await waitUntil(`pods of Job ${jobName}`, async () => {
      const list = await this.core.listNamespacedPod({
        namespace: this.namespace,
        labelSelector: `job-name=${jobName}`,
      })
      return list.items.length ? list.items : undefined
    })
    for (const pod of pods) {
      const now = new Date()
      await this.core.replaceNamespacedPodStatus({
        namespace: this.namespace,
        name: pod.metadata?.name as string,
        body: {
          ...pod,
          status: {
            ...pod.status,
            phase,
            containerStatuses: [
              {
                name: 'eval',
                image: 'busybox',
                imageID: '',
                ready: false,
                restartCount: 0,
                state: { terminated: { exitCode: phase === 'Succeeded' ? 0 : 1, startedAt: now, finishedAt: now } },
              },
            ],
          },
        },
      })
    }
  }

  async state(name: string): Promise<BackfillState | null> {
    const kv: KV = await new Kvm(this.nc).open(BUCKET_BACKFILLS)
    const entry = await kv.get(backfillKey(this.namespace, name))
    return entry?.operation === 'PUT' ? entry.json<BackfillState>() : null
  }

  /** Waits until the backfill's status satisfies `check` (phase and reason by default). */
  async waitFor(name: string, phase: string, reason?: string, timeoutMs = 30_000): Promise<ModelBackfill> {
    return waitUntil(
      `${name} to reach ${phase}${reason ? `/${reason}` : ''}`,
      async () => {
        const b = await this.getBackfill(name)
        return b?.status?.phase === phase && (!reason || b.status?.reason === reason) ? b : undefined
      },
      timeoutMs,
      async () => JSON.stringify((await this.getBackfill(name))?.status ?? null),
    )
  }
}

export async function waitUntil<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 30_000,
  describe?: () => Promise<string>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await probe()
    if (value !== undefined) return value
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs}ms waiting for ${what}${describe ? `; last: ${await describe()}` : ''}`,
      )
    }
    await sleep(100)
  }
}
