// Builders and probes for end-to-end tests: Models (with status written through the status subresource, as
// FlexInfer would), CronJob templates, ModelBackfills, finishing a Job's pods the way a kubelet would, and
// waiting for a backfill to reach a phase. Everything goes through the real apiserver.
import { randomUUID } from 'node:crypto'
import { createForegroundEmitter } from '@flexinfer/gateway-emitter'
import {
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Job,
  type V1Pod,
  Watch,
} from '@kubernetes/client-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import type { KV } from '@nats-io/kv'
import { Kvm } from '@nats-io/kv'
import type { NatsConnection } from '@nats-io/transport-node'
import type { Runner } from '../../../cmd/manager/runner.js'
import {
  BUCKET_BACKFILLS,
  BUCKET_MODEL_IDLE,
  catalog,
  STREAM_EVENTS,
  STREAM_FOREGROUND,
  STREAM_FOREGROUND_LAST,
  STREAM_TIMERS,
} from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import {
  GROUP,
  type ModelBackfill,
  type ModelBackfillSpec,
  type ModelBackfillStatus,
  VERSION,
} from '../../../pkg/core/api.js'
import { ANNOTATION_MODEL, ANNOTATION_NODE, backfillKey, LABEL_BACKFILL, modelKey } from '../../../pkg/core/names.js'
import type { BackfillState, ModelIdleState } from '../../../pkg/core/state.js'
import { isNotFound } from '../../../pkg/jetstream/errors.js'
import { consumerName } from '../../../pkg/jetstream/names.js'
import { sleep } from '../../env/exec.js'

export class BackfillWorld {
  readonly custom: CustomObjectsApi
  readonly batch: BatchV1Api
  readonly core: CoreV1Api
  private readonly watches = new Set<() => void>()

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

  /** A Model; `hostname` sets spec.nodeSelector["kubernetes.io/hostname"] (the node when status.gpu.node is unset). */
  async model(
    name: string,
    opts: { phase?: string; node?: string; group?: string; hostname?: string; lastActiveTime?: string } = {},
  ) {
    const body = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'Model',
      metadata: { name, namespace: this.namespace },
      spec: {
        gpu: opts.group ? { shared: opts.group } : undefined,
        nodeSelector: opts.hostname ? { 'kubernetes.io/hostname': opts.hostname } : undefined,
      },
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
      /** The Job's backoffLimit: 0 unless given; null leaves it unset (the Job default, 6). */
      backoffLimit?: number | null
      /** The container's image and shell script (a real node runs them): busybox and `echo eval` unless given. */
      image?: string
      script?: string
      terminationGracePeriodSeconds?: number
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
              backoffLimit: opts.backoffLimit === null ? undefined : (opts.backoffLimit ?? 0),
              template: {
                spec: {
                  restartPolicy: 'Never',
                  terminationGracePeriodSeconds: opts.terminationGracePeriodSeconds,
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
                      image: opts.image ?? 'busybox',
                      // A local image (the node's) is never pulled.
                      imagePullPolicy: opts.image ? 'Never' : undefined,
                      command: ['sh', '-c', opts.script ?? 'echo eval'],
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

  async backfill(
    name: string,
    spec: Partial<ModelBackfillSpec> & { modelRef: string; templateRef: string },
    annotations?: Record<string, string>,
  ) {
    return (await this.custom.createNamespacedCustomObject({
      ...this.crd('modelbackfills'),
      body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'ModelBackfill', metadata: { name, annotations }, spec },
    })) as ModelBackfill
  }

  /** Replaces the spec fields given; retried when a status write of the functions raced the read (409). */
  async patchBackfillSpec(name: string, spec: Partial<ModelBackfillSpec>) {
    for (let i = 0; ; i++) {
      const current = await this.getBackfill(name)
      try {
        await this.custom.replaceNamespacedCustomObject({
          ...this.crd('modelbackfills'),
          name,
          body: { ...current, spec: { ...current?.spec, ...spec } },
        })
        return
      } catch (err) {
        if ((err as { code?: number }).code !== 409 || i >= 10) throw err
      }
    }
  }

  /** Names for one test's objects. Nodes are cluster-wide (sessions, leases, contenders): unique per namespace. */
  names(id: string) {
    return { backfill: id, model: `${id}-model`, template: `${id}-tpl`, node: `${id}-${this.namespace}` }
  }

  /**
   * The usual setup under names(id): a Ready model on its own node, a CPU-only template and a backfill on them
   * (idleFor 2s unless `spec` says otherwise).
   */
  async declare(
    id: string,
    spec: Partial<ModelBackfillSpec> = {},
    model: { phase?: string; node?: string; group?: string; hostname?: string } = {},
  ) {
    const n = this.names(id)
    await this.model(n.model, { node: n.node, ...model })
    await this.template(n.template)
    await this.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '2s', ...spec })
    return n
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

  /** `finalizers` keep it around with a deletionTimestamp after a delete (a session being torn down). */
  async gamingSession(
    name: string,
    nodeName: string,
    opts: { expiresAt?: string; mode?: string; finalizers?: string[] } = {},
  ) {
    await this.custom.createNamespacedCustomObject({
      ...this.crd('gamingsessions'),
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: 'GamingSession',
        metadata: { name, finalizers: opts.finalizers },
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

  async getObject(plural: string, name: string): Promise<{ metadata?: { deletionTimestamp?: string } } | null> {
    try {
      return await this.custom.getNamespacedCustomObject({ ...this.crd(plural), name })
    } catch (err) {
      if ((err as { code?: number }).code === 404) return null
      throw err
    }
  }

  /** Lets a custom object that is held by finalizers go. */
  async clearFinalizers(plural: string, name: string) {
    await this.custom.patchNamespacedCustomObject(
      { ...this.crd(plural), name, body: { metadata: { finalizers: null } } },
      mergePatch,
    )
  }

  /**
   * A ModelBackfill written straight to etcd, past the apiserver's validation: what an object created before the
   * CRD carried its CEL rules looks like. The apiserver serves it (and its watch reports it) like any other.
   */
  async backfillBypassingAdmission(etcdUrl: string, name: string, spec: Record<string, unknown>) {
    const object = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'ModelBackfill',
      metadata: {
        name,
        namespace: this.namespace,
        uid: randomUUID(),
        generation: 1,
        creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      },
      spec,
    }
    const b64 = (text: string) => Buffer.from(text).toString('base64')
    const response = await fetch(`${etcdUrl}/v3/kv/put`, {
      method: 'POST',
      body: JSON.stringify({
        key: b64(`/registry/${GROUP}/modelbackfills/${this.namespace}/${name}`),
        value: b64(JSON.stringify(object)),
      }),
    })
    if (!response.ok) throw new Error(`etcd put failed: ${response.status} ${await response.text()}`)
  }

  /**
   * Another declaration's active backfill Job (labelled and annotated as ours are, but owned by nobody here): the
   * contender gate must see it. Its pods stay Pending like every Job's in this environment.
   */
  async foreignJob(name: string, opts: { node: string; model: string }) {
    await this.batch.createNamespacedJob({
      namespace: this.namespace,
      body: {
        metadata: {
          name,
          labels: { [LABEL_BACKFILL]: 'f0f0f0f0f0f0f0f0' },
          annotations: { [ANNOTATION_MODEL]: opts.model, [ANNOTATION_NODE]: opts.node },
        },
        spec: {
          backoffLimit: 0,
          template: { spec: { restartPolicy: 'Never', containers: [{ name: 'eval', image: 'busybox' }] } },
        },
      },
    })
  }

  async job(name: string): Promise<V1Job | null> {
    try {
      return await this.batch.readNamespacedJob({ namespace: this.namespace, name })
    } catch (err) {
      if ((err as { code?: number }).code === 404) return null
      throw err
    }
  }

  /** Waits until the Job controller has concluded the Job (condition Complete or Failed True); returns it. */
  async waitForJobCondition(name: string, type: 'Complete' | 'Failed', timeoutMs = 30_000): Promise<V1Job> {
    return waitUntil(
      `Job ${name} to be ${type}`,
      async () => {
        const job = await this.job(name)
        return job?.status?.conditions?.some((c) => c.type === type && c.status === 'True') ? job : undefined
      },
      timeoutMs,
      async () => JSON.stringify((await this.job(name))?.status ?? null),
    )
  }

  /** The Jobs owned by one backfill (its attempts that still exist). */
  async jobsOf(backfill: string): Promise<V1Job[]> {
    return (await this.jobs()).filter((j) => j.metadata?.ownerReferences?.some((r) => r.name === backfill))
  }

  async jobs(): Promise<V1Job[]> {
    return (
      await this.batch.listNamespacedJob({ namespace: this.namespace, labelSelector: 'ai.flexinfer/model-backfill' })
    ).items
  }

  /** The Job's pods, once the Job controller has created them. */
  async pods(jobName: string): Promise<V1Pod[]> {
    return waitUntil(`pods of Job ${jobName}`, async () => {
      const list = await this.core.listNamespacedPod({
        namespace: this.namespace,
        labelSelector: `job-name=${jobName}`,
      })
      return list.items.length ? list.items : undefined
    })
  }

  /**
   * Holds the Job's pods with a finalizer of ours, as a kubelet still stopping containers would: a Job deleted with
   * foreground propagation then stays visible (deletionTimestamp set) until releasePods().
   */
  async holdPods(jobName: string) {
    for (const pod of await this.pods(jobName)) {
      const finalizers = [...(pod.metadata?.finalizers ?? []), HOLD_FINALIZER]
      await this.patchPodFinalizers(pod, finalizers)
    }
  }

  async releasePods(jobName: string) {
    const list = await this.core.listNamespacedPod({ namespace: this.namespace, labelSelector: `job-name=${jobName}` })
    for (const pod of list.items) {
      await this.patchPodFinalizers(
        pod,
        (pod.metadata?.finalizers ?? []).filter((f) => f !== HOLD_FINALIZER),
      )
    }
  }

  /** Finalizers guarded by resourceVersion (the Job controller edits them too); retried on a conflict. */
  private async patchPodFinalizers(pod: V1Pod, finalizers: string[]) {
    let current = pod
    let wanted = finalizers
    const mine = finalizers.includes(HOLD_FINALIZER)
    for (let i = 0; ; i++) {
      try {
        await this.core.patchNamespacedPod(
          {
            namespace: this.namespace,
            name: current.metadata?.name as string,
            body: { metadata: { finalizers: wanted, resourceVersion: current.metadata?.resourceVersion } },
          },
          mergePatch,
        )
        return
      } catch (err) {
        if ((err as { code?: number }).code !== 409 || i >= 10) throw err
        current = await this.core.readNamespacedPod({
          namespace: this.namespace,
          name: current.metadata?.name as string,
        })
        const others = (current.metadata?.finalizers ?? []).filter((f) => f !== HOLD_FINALIZER)
        wanted = mine ? [...others, HOLD_FINALIZER] : others
      }
    }
  }

  /** Plays the kubelet: the Job's pods finish with `phase`, and the real Job controller concludes the Job. */
  async finishJob(jobName: string, phase: 'Succeeded' | 'Failed', message?: string) {
    await this.terminatePods(jobName, phase === 'Succeeded' ? 0 : 1, message)
  }

  /**
   * Plays the kubelet stopping the Job's pods (pods/status): the container terminated with `exitCode` and, when
   * given, `message` as its termination message. A pod being deleted (held: holdPods) stays so.
   */
  async terminatePods(jobName: string, exitCode: number, message?: string) {
    const phase = exitCode === 0 ? 'Succeeded' : 'Failed'
    const pods = await this.pods(jobName)
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
                state: {
                  terminated: {
                    exitCode,
                    startedAt: now,
                    finishedAt: now,
                    ...(message === undefined ? {} : { message }),
                  },
                },
              },
            ],
          },
        },
      })
    }
  }

  /** The Kubernetes Events on the ModelBackfill (what `kubectl describe` shows), oldest first. */
  async events(name: string): Promise<{ type: string; reason: string; message: string }[]> {
    const list = await this.core.listNamespacedEvent({
      namespace: this.namespace,
      fieldSelector: `involvedObject.kind=ModelBackfill,involvedObject.name=${name}`,
    })
    return list.items
      .sort((a, b) => String(a.metadata?.creationTimestamp).localeCompare(String(b.metadata?.creationTimestamp)))
      .map((e) => ({ type: e.type ?? '', reason: e.reason ?? '', message: e.message ?? '' }))
  }

  /**
   * Records every status the backfill goes through, from a watch: each write is seen, so a transient phase that
   * polling would miss (Starting, Cancelling, RepeatCleanup) is in the history. Start it before the change.
   */
  async history(name: string): Promise<StatusHistory> {
    const statuses: ModelBackfillStatus[] = []
    let resourceVersion: string | undefined
    let controller: AbortController | undefined
    let stopped = false
    const start = async (): Promise<void> => {
      controller = await new Watch(this.kc).watch(
        `/apis/${GROUP}/${VERSION}/namespaces/${this.namespace}/modelbackfills`,
        { fieldSelector: `metadata.name=${name}`, resourceVersion },
        (type, obj: ModelBackfill) => {
          if (type === 'ERROR') resourceVersion = undefined // e.g. 410 Gone: start over from the current object
          if (type !== 'ADDED' && type !== 'MODIFIED') return
          resourceVersion = obj.metadata.resourceVersion
          const last = statuses.at(-1)
          if (obj.status?.phase && JSON.stringify(last) !== JSON.stringify(obj.status)) statuses.push(obj.status)
        },
        () => {
          if (!stopped) setTimeout(() => start().catch(() => {}), 100)
        },
      )
    }
    await start()
    this.watches.add(() => {
      stopped = true
      controller?.abort()
    })
    const phases = () => {
      const out: string[] = []
      for (const s of statuses) {
        const p = `${s.phase}/${s.reason}`
        if (out.at(-1) !== p) out.push(p)
      }
      return out
    }
    return {
      statuses,
      phases,
      first(count, timeoutMs = 30_000) {
        return waitUntil(
          `${count} phases of ${name}`,
          async () => (phases().length >= count ? phases().slice(0, count) : undefined),
          timeoutMs,
          async () => JSON.stringify(phases()),
        )
      },
      stop() {
        stopped = true
        controller?.abort()
      },
    }
  }

  async state(name: string): Promise<BackfillState | null> {
    const kv: KV = await new Kvm(this.nc).open(BUCKET_BACKFILLS)
    const entry = await kv.get(backfillKey(this.namespace, name))
    return entry?.operation === 'PUT' ? entry.json<BackfillState>() : null
  }

  /** Waits until the stored state of every one of these backfills passes `ok`. */
  async waitForStates(what: string, names: string[], ok: (s: BackfillState | null) => boolean, timeoutMs = 60_000) {
    await waitUntil(
      what,
      async () => {
        for (const name of names) if (!ok(await this.state(name))) return undefined
        return true
      },
      timeoutMs,
    )
  }

  /** One foreground request for the model, as a gateway publishes it; returns the time just before it was sent. */
  async foreground(model: string): Promise<number> {
    const emitter = createForegroundEmitter(this.nc)
    const at = Date.now()
    await emitter.emit({ namespace: this.namespace, model })
    await emitter.close()
    return at
  }

  /**
   * One foreground request on the foreground subject (what a plain NATS client of the contract publishes, with no
   * per-model token); returns the time NATS stored it.
   */
  async foregroundOnDocumentedSubject(model: string): Promise<number> {
    const js = jetstream(this.nc)
    const subject = catalog['ai.flexinfer.foreground.request'].subject
    const ack = await js.publish(
      subject,
      encode('ai.flexinfer.foreground.request', { namespace: this.namespace, model }),
    )
    const stored = await (await jetstreamManager(this.nc)).streams.getMessage(ack.stream, { seq: ack.seq })
    return stored?.time.getTime() ?? Date.now()
  }

  /** The model's idle state as the demand function keeps it (newest foreground request). */
  async idle(model: string): Promise<ModelIdleState | null> {
    const kv: KV = await new Kvm(this.nc).open(BUCKET_MODEL_IDLE)
    const entry = await kv.get(modelKey(this.namespace, model))
    return entry?.operation === 'PUT' ? entry.json<ModelIdleState>() : null
  }

  /** Stops every history() watch still open (those of a test that failed before stopping its own). */
  close() {
    for (const stop of this.watches) stop()
    this.watches.clear()
  }

  /** Waits until the backfill reaches `phase` (and `reason`, when given). */
  async waitFor(name: string, phase: string, reason?: string, timeoutMs = 30_000): Promise<ModelBackfill> {
    return this.waitForStatus(
      name,
      `${phase}${reason ? `/${reason}` : ''}`,
      (s) => s.phase === phase && (!reason || s.reason === reason),
      timeoutMs,
    )
  }

  /** Waits until the backfill's status satisfies `check`, e.g. Running with attempts 2. */
  async waitForStatus(
    name: string,
    what: string,
    check: (status: ModelBackfillStatus) => boolean,
    timeoutMs = 30_000,
  ): Promise<ModelBackfill> {
    return waitUntil(
      `${name} to reach ${what}`,
      async () => {
        const b = await this.getBackfill(name)
        return b?.status && check(b.status) ? b : undefined
      },
      timeoutMs,
      async () => JSON.stringify((await this.getBackfill(name))?.status ?? null),
    )
  }
}

const HOLD_FINALIZER = 'test.flexinfer.ai/hold'
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch)

export interface StatusHistory {
  /** Every distinct status written, oldest first. */
  statuses: ModelBackfillStatus[]
  /** `phase/reason` of each status, consecutive repeats folded. */
  phases(): string[]
  /**
   * The first `count` phases, once the watch has seen that many (it may lag a GET by a moment): compare them with
   * the expected story, a diverging one fails the comparison rather than the wait.
   */
  first(count: number, timeoutMs?: number): Promise<string[]>
  stop(): void
}

export async function waitUntil<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 30_000,
  describe?: () => Promise<string>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let transient: unknown
  for (;;) {
    let value: T | undefined
    try {
      value = await probe()
    } catch (e) {
      // A probe's own NATS request that times out or finds no responder while a server is restarting or a leader
      // is being elected (a test's fault, not the system's) is one more "not yet"; anything else fails at once.
      if (!isTransientNatsError(e)) throw e
      transient = e
    }
    if (value !== undefined) return value
    if (Date.now() > deadline) {
      const last = describe ? `; last: ${await describe()}` : transient ? `; last probe error: ${transient}` : ''
      throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}${last}`)
    }
    await sleep(100)
  }
}

/**
 * Waits until the runner's functions (`names`, unscoped, e.g. ['admit']; all when omitted) have handled every event
 * stored for them so far: nothing pending or unacknowledged on any of their consumers. An event is acknowledged only
 * once handled (or dead-lettered), so a "nothing happened" assertion made after this covers every event they were
 * sent — timers that fired included — instead of what an arbitrary sleep happened to let through.
 */
export async function handledAll(
  runner: Pick<Runner, 'deps' | 'functions'>,
  names?: string[],
  timeoutMs = 30_000,
): Promise<void> {
  const fns = runner.functions.filter((f) => !names || names.some((n) => f.name === n || f.name.startsWith(`${n}-`)))
  const streams = [STREAM_EVENTS, STREAM_TIMERS, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST]
  // Read together, so that one look is close to a snapshot of them all.
  const left = async () =>
    (
      await Promise.all(
        fns.flatMap((f) =>
          streams.map(async (stream) => {
            const durable = consumerName(f.name, stream)
            const info = await runner.deps.bus.jsm.consumers.info(stream, durable).catch((e) => {
              if (isNotFound(e)) return null
              throw e
            })
            return info && info.num_pending + info.num_ack_pending > 0
              ? `${durable}: ${info.num_pending} pending, ${info.num_ack_pending} unacked`
              : undefined
          }),
        ),
      )
    ).filter((busy) => busy !== undefined)
  await waitUntil(
    `${names?.join(', ') ?? 'every function'} to handle what was sent`,
    async () => ((await left()).length === 0 ? true : undefined),
    timeoutMs,
    async () => (await left()).join('; '),
  )
}

const TRANSIENT_NATS_ERRORS = new Set([
  'TimeoutError',
  'NoRespondersError',
  'RequestError',
  'ConnectionError',
  'JetStreamNotEnabled',
])
const isTransientNatsError = (e: unknown) => e instanceof Error && TRANSIENT_NATS_ERRORS.has(e.name)

/** Milliseconds of an RFC 3339 time in a status (NaN when absent). */
export const ms = (time: string | undefined) => Date.parse(time ?? '')

/** The status story of every first attempt: the idle window, the Job created, the Job active. */
export const STARTED = ['WaitingForIdle/IdleWindow', 'Starting/JobCreated', 'Running/JobRunning']

/** The Ready condition's status. */
export const ready = (b: { status?: { conditions?: { type: string; status: string }[] } }) =>
  b.status?.conditions?.find((c) => c.type === 'Ready')?.status
