// The Kubernetes side of the functions: the reads decide() needs and the few writes it asks for. Every write is
// idempotent (deterministic names, 404/409 tolerated where they mean "already done"); every request has a deadline
// (./http.ts).
import {
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  type V1CronJob,
  type V1Job,
} from '@kubernetes/client-node'
import { FINALIZER, GROUP, type ModelBackfill, type ModelBackfillStatus, VERSION } from '../core/api.js'
import { backfillLabelValue, LABEL_ATTEMPT, LABEL_BACKFILL } from '../core/names.js'
import { DEFAULT_KUBE_REQUEST_TIMEOUT_MS } from './deadline.js'
import { apiMessage, JobRejectedError, orNull, REJECTED, statusCode } from './errors.js'
import { EventRecorder } from './events.js'
import { makePooledClient, mergePatch, PooledAuthentication } from './http.js'
import type { KubeApi, KubeClients } from './port.js'
import { Reachability } from './reachable.js'
import { CONTROLLER_UID_LABEL, PLURALS } from './resources.js'

export class Kube implements KubeApi, KubeClients {
  readonly custom: CustomObjectsApi
  readonly batch: BatchV1Api
  readonly core: CoreV1Api
  /** Requests this process sent to the API server, by verb (the benchmark reads it). */
  readonly requests = { read: 0, list: 0, write: 0 }

  readonly auth: PooledAuthentication

  /** Deadline of every request (KUBE_REQUEST_TIMEOUT_MS; default 10 s). */
  readonly requestTimeoutMs: number
  /** The Events this process writes (reported by HOSTNAME: the pod; default `local`). */
  private readonly events: EventRecorder
  private readonly reachability: Reachability

  constructor(
    readonly kc: KubeConfig,
    opts: { requestTimeoutMs?: number; reportingInstance?: string } = {},
  ) {
    this.requestTimeoutMs = opts.requestTimeoutMs ?? DEFAULT_KUBE_REQUEST_TIMEOUT_MS
    this.auth = new PooledAuthentication(kc)
    this.custom = makePooledClient(kc, this.auth, CustomObjectsApi, this.requestTimeoutMs)
    this.batch = makePooledClient(kc, this.auth, BatchV1Api, this.requestTimeoutMs)
    this.core = makePooledClient(kc, this.auth, CoreV1Api, this.requestTimeoutMs)
    this.events = new EventRecorder(this.core, this.requests, opts.reportingInstance ?? 'local')
    this.reachability = new Reachability(() => this.core.getAPIResources())
  }

  /** Closes the pooled connections (idle ones never hold the process open, but a clean stop closes them). */
  close() {
    this.auth.close()
  }

  /**
   * Runs `call`; while it fails without an answer from the apiserver (refused, reset, timed out, or not ready yet),
   * waits for the apiserver to answer again and runs it again at once, for at most `maxWaitMs` in all; then the last
   * failure is thrown (the caller's own retry takes over). Why: a call retried only by its event's redelivery backoff
   * would run again up to that backoff after the apiserver is back. The wait is one probe shared by every caller
   * (./reachable.ts).
   */
  whenReachable<T>(call: () => Promise<T>, maxWaitMs: number): Promise<T> {
    return this.reachability.when(call, maxWaitMs)
  }

  private crd(plural: string, namespace: string, name: string) {
    return { group: GROUP, version: VERSION, plural, namespace, name }
  }

  getBackfill(namespace: string, name: string): Promise<ModelBackfill | null> {
    this.requests.read++
    return orNull(this.custom.getNamespacedCustomObject(this.crd(PLURALS.backfills, namespace, name)))
  }

  async listBackfills(namespace?: string): Promise<ModelBackfill[]> {
    this.requests.list++
    const list = namespace
      ? await this.custom.listNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          plural: PLURALS.backfills,
          namespace,
        })
      : await this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURALS.backfills })
    return (list as { items: ModelBackfill[] }).items
  }

  getModel(namespace: string, name: string): Promise<unknown | null> {
    this.requests.read++
    return orNull(this.custom.getNamespacedCustomObject(this.crd(PLURALS.models, namespace, name)))
  }

  /** One of our custom resources in one namespace, or (no namespace) across the cluster. */
  async listCustom(plural: string, namespace?: string): Promise<unknown[]> {
    if (!namespace) return this.listAll(plural)
    this.requests.list++
    const list = await this.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, plural, namespace })
    return (list as { items: unknown[] }).items
  }

  /**
   * Every pod of one Job, by its controller-uid label, in one DELETE of the collection and no read before it: no pod
   * of another Job (a same-named successor included) is ever matched. No grace period is passed: each pod keeps the
   * one its template sets, as a Job deletion would.
   */
  async deleteJobPods(namespace: string, jobUid: string): Promise<void> {
    this.requests.write++
    // No resourceVersion: the apiserver applies it to each pod's delete as a precondition too (409 for every pod),
    // so the selection is a consistent read.
    await this.core.deleteCollectionNamespacedPod({ namespace, labelSelector: `${CONTROLLER_UID_LABEL}=${jobUid}` })
  }

  /**
   * Many attempts' Jobs of one namespace in one DELETE of the collection: those carrying our backfill label with one
   * of `backfillValues` and one of `attemptValues` as their attempt label (set-based selector), so no Job we did not
   * create, and no same-named Job of another admission, is ever matched. Background propagation: the Jobs go at
   * once; their pods are deleted by the caller (deleteJobsPods) and, for any it misses, by the garbage collector.
   * At most MAX_COLLECTION_SELECTOR values (the selector travels in the URL); a value that is no label value throws
   * before anything is sent.
   */
  async deleteAttemptJobs(namespace: string, backfillValues: string[], attemptValues: string[]): Promise<void> {
    const backfills = [...new Set(backfillValues)]
    checkSelectorValues(backfills)
    checkSelectorValues(attemptValues)
    this.requests.write++
    const labelSelector = `${LABEL_BACKFILL} in (${backfills.join(',')}),${LABEL_ATTEMPT} in (${attemptValues.join(',')})`
    await this.batch.deleteCollectionNamespacedJob({
      namespace,
      labelSelector,
      propagationPolicy: 'Background',
      body: { propagationPolicy: 'Background' },
    })
  }

  /** The pods of many Jobs of one namespace (by their UIDs' controller-uid label) in one DELETE of the collection. */
  async deleteJobsPods(namespace: string, jobUids: string[]): Promise<void> {
    checkSelectorValues(jobUids)
    this.requests.write++
    await this.core.deleteCollectionNamespacedPod({
      namespace,
      labelSelector: `${CONTROLLER_UID_LABEL} in (${jobUids.join(',')})`,
    })
  }

  /** GamingSessions and GPULeases target nodes and GPU groups, which are cluster-wide: list all namespaces. */
  async listAll(plural: string): Promise<unknown[]> {
    this.requests.list++
    const list = await this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural })
    return (list as { items: unknown[] }).items
  }

  getCronJob(namespace: string, name: string): Promise<V1CronJob | null> {
    this.requests.read++
    return orNull(this.batch.readNamespacedCronJob({ namespace, name }))
  }

  getJob(namespace: string, name: string): Promise<V1Job | null> {
    this.requests.read++
    return orNull(this.batch.readNamespacedJob({ namespace, name }))
  }

  /**
   * Every backfill Job in scope: the contender gate is per model and per node, across declarations. Scoped
   * (`namespaces`), one list per managed namespace — the Roles grant nothing across the cluster.
   */
  async listBackfillJobs(namespaces?: readonly string[]): Promise<V1Job[]> {
    if (namespaces) {
      const lists = await Promise.all(
        namespaces.map((namespace) => {
          this.requests.list++
          return this.batch.listNamespacedJob({ namespace, labelSelector: LABEL_BACKFILL })
        }),
      )
      return lists.flatMap((l) => l.items)
    }
    this.requests.list++
    return (await this.batch.listJobForAllNamespaces({ labelSelector: LABEL_BACKFILL })).items
  }

  /** One declaration's own Jobs (by its label value): a handful, where the cluster-wide list may be hundreds. */
  async listOwnJobs(namespace: string, backfill: string): Promise<V1Job[]> {
    this.requests.list++
    const labelSelector = `${LABEL_BACKFILL}=${backfillLabelValue(backfill)}`
    return (await this.batch.listNamespacedJob({ namespace, labelSelector })).items
  }

  /**
   * Creates the attempt's Job. An existing Job of the same (deterministic) name is this attempt's only when its
   * controller is this very ModelBackfill (by UID): a re-created declaration of the same name would otherwise adopt
   * its predecessor's Job — and report its outcome — without running. A predecessor's Job is deleted (only that
   * one: preconditions on its UID) and 'predecessor' returned, so the caller retries once it is gone. A refusal
   * that no retry can fix (quota, admission webhook, invalid Job) throws JobRejectedError. The UID is the attempt's
   * Job's (created or existing), for a DELETE that can only hit that one.
   */
  async createJob(job: V1Job): Promise<{ result: 'created' | 'exists' | 'predecessor'; uid?: string }> {
    const namespace = job.metadata?.namespace as string
    const name = job.metadata?.name as string
    const owner = job.metadata?.ownerReferences?.find((r) => r.controller)?.uid
    this.requests.write++
    try {
      const created = await this.batch.createNamespacedJob({ namespace, body: job })
      return { result: 'created', uid: created.metadata?.uid }
    } catch (err) {
      const code = statusCode(err)
      if (code !== undefined && REJECTED.has(code)) throw new JobRejectedError(code, apiMessage(err))
      if (code !== 409) throw err
    }
    const existing = await this.getJob(namespace, name)
    if (!existing) return { result: 'predecessor' } // gone meanwhile: the retry creates it
    const controller = existing.metadata?.ownerReferences?.find((r) => r.controller)
    if (owner && controller?.uid === owner) return { result: 'exists', uid: existing.metadata?.uid }
    // A predecessor's: our label for this backfill name, controlled by a ModelBackfill of that name or orphaned.
    const backfill = job.metadata?.ownerReferences?.find((r) => r.controller)?.name ?? ''
    const predecessor =
      existing.metadata?.labels?.[LABEL_BACKFILL] === backfillLabelValue(backfill) &&
      (!controller || (controller.kind === 'ModelBackfill' && controller.name === backfill))
    if (!predecessor) {
      // Someone else's Job under the attempt's name: never deleted, the attempt cannot be created.
      throw new JobRejectedError(
        409,
        `the name is taken by Job ${namespace}/${name}, which ModelBackfill ${backfill} does not own`,
      )
    }
    await this.deleteJob(namespace, name, existing.metadata?.uid, 'Background')
    return { result: 'predecessor' }
  }

  /**
   * Foreground propagation: the Job stays (Cancelling) until its pods are gone. 404 means already deleted. With
   * `uid`, only that Job is deleted: a same-named replacement answers 409 ('replaced') and stays.
   */
  async deleteJob(
    namespace: string,
    name: string,
    uid?: string,
    propagationPolicy: 'Foreground' | 'Background' = 'Foreground',
  ): Promise<'deleted' | 'absent' | 'replaced'> {
    this.requests.write++
    try {
      // With a body the apiserver ignores the query's options: the propagation policy goes in the body too (a Job's
      // default is to orphan its pods, which would leave the work running).
      await this.batch.deleteNamespacedJob({
        namespace,
        name,
        propagationPolicy,
        body: uid ? { propagationPolicy, preconditions: { uid } } : undefined,
      })
      return 'deleted'
    } catch (err) {
      const code = statusCode(err)
      if (code === 404) return 'absent'
      if (code === 409 && uid) return 'replaced'
      throw err
    }
  }

  /**
   * Adds or removes our finalizer with a merge patch guarded by resourceVersion (409 → caller re-decides). The object
   * given is brought up to the patched version (finalizers, resourceVersion), so the status write that follows does
   * not conflict with our own patch (a re-read and a wasted write per new backfill).
   */
  async setFinalizer(backfill: ModelBackfill, present: boolean) {
    const current = backfill.metadata.finalizers ?? []
    const has = current.includes(FINALIZER)
    if (has === present) return
    const finalizers = present ? [...current, FINALIZER] : current.filter((f) => f !== FINALIZER)
    this.requests.write++
    try {
      const patched = (await this.custom.patchNamespacedCustomObject(
        {
          ...this.crd(PLURALS.backfills, backfill.metadata.namespace, backfill.metadata.name),
          body: { metadata: { finalizers, resourceVersion: backfill.metadata.resourceVersion } },
        },
        mergePatch,
      )) as Partial<ModelBackfill> | undefined
      const version = patched?.metadata?.resourceVersion
      if (version) backfill.metadata = { ...backfill.metadata, finalizers, resourceVersion: version }
    } catch (err) {
      if (statusCode(err) === 404) return
      throw err
    }
  }

  /** Replaces status with optimistic concurrency; returns false on a conflict so the caller can re-read. */
  async writeStatus(backfill: ModelBackfill, status: ModelBackfillStatus): Promise<boolean> {
    this.requests.write++
    try {
      await this.custom.replaceNamespacedCustomObjectStatus({
        ...this.crd(PLURALS.backfills, backfill.metadata.namespace, backfill.metadata.name),
        body: { ...backfill, status },
      })
      return true
    } catch (err) {
      const code = statusCode(err)
      if (code === 409) return false
      if (code === 404) return true
      throw err
    }
  }

  /** A core/v1 Event on the ModelBackfill, so `kubectl describe` tells the story; aggregated, never throws (./events.ts). */
  recordEvent(backfill: ModelBackfill, type: 'Normal' | 'Warning', reason: string, message: string): Promise<void> {
    return this.events.record(backfill, type, reason, message)
  }
}

/** Values in one set-based selector at most: a selector is part of the URL (100 UIDs: ~3.7 kB). */
export const MAX_COLLECTION_SELECTOR = 100

/** A set-based selector's values: 1..MAX_COLLECTION_SELECTOR label values (nothing that could widen the selector). */
function checkSelectorValues(values: string[]) {
  if (values.length === 0 || values.length > MAX_COLLECTION_SELECTOR) {
    throw new Error(`a collection DELETE takes 1 to ${MAX_COLLECTION_SELECTOR} values, not ${values.length}`)
  }
  for (const v of values) {
    if (!/^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/.test(v)) throw new Error(`"${v}" is no label value`)
  }
}
