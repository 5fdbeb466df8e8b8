// The Kubernetes side of the functions: the reads decide() needs and the few writes it asks for. Every write is
// idempotent (deterministic names, 404/409 tolerated where they mean "already done"). Every request has a deadline
// (KUBE_REQUEST_TIMEOUT_MS): a half-open apiserver connection hung a DELETE for minutes, holding a concurrency slot.
import { createHash } from 'node:crypto'
import https from 'node:https'
import tls from 'node:tls'
import {
  BatchV1Api,
  type Configuration,
  CoreV1Api,
  CustomObjectsApi,
  createConfiguration,
  type HttpLibrary,
  IsomorphicFetchHttpLibrary,
  KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  makeInformer,
  PatchStrategy,
  type RequestContext,
  type SecurityAuthentication,
  ServerConfiguration,
  setHeaderOptions,
  type V1CronJob,
  type V1Job,
  wrapHttpLibrary,
} from '@kubernetes/client-node'
import { FINALIZER, GROUP, type ModelBackfill, type ModelBackfillStatus, VERSION } from '../core/api.js'
import { backfillLabelValue, LABEL_ATTEMPT, LABEL_BACKFILL } from '../core/names.js'
import { withDeadline } from '../lib/deadline.js'
import { ActiveJobs } from './active-jobs.js'
import {
  apiMessage,
  CONTROLLER_UID_LABEL,
  DEFAULT_KUBE_REQUEST_TIMEOUT_MS,
  JobRejectedError,
  KubeRequestTimeout,
  orNull,
  PLURALS,
  REJECTED,
  statusCode,
} from './kube-common.js'
import { checkNamespaceCount } from './scope.js'

export {
  apiMessage,
  CONTROLLER_UID_LABEL,
  DEFAULT_KUBE_REQUEST_TIMEOUT_MS,
  JobRejectedError,
  KubeRequestTimeout,
  kubeRequestTimeoutMs,
  PLURALS,
  statusCode,
} from './kube-common.js'

/** The kubeconfig of this process: in a pod its ServiceAccount (token and CA), else KUBECONFIG / ~/.kube/config. */
export function loadKubeConfig(): KubeConfig {
  const kc = new KubeConfig()
  kc.loadFromDefault()
  return kc
}

/**
 * client-node's fetch with a deadline per request: aborted after `timeoutMs` unless the whole answer (headers and
 * body, which the API layer reads later) is in; the abort surfaces as a KubeRequestTimeout. One timer per request,
 * cleared as soon as the body is read.
 */
export function deadlineHttpLibrary(timeoutMs: number): HttpLibrary {
  const inner = new IsomorphicFetchHttpLibrary()
  return wrapHttpLibrary({
    async send(request) {
      const controller = new AbortController()
      const timer = setTimeout(() => controller.abort(), timeoutMs)
      timer.unref()
      const caller = request.getSignal()
      request.setSignal(caller ? AbortSignal.any([caller, controller.signal]) : controller.signal)
      const timedOut = (err: unknown) =>
        controller.signal.aborted && !caller?.aborted
          ? new KubeRequestTimeout(request.getHttpMethod().toString(), request.getUrl(), timeoutMs)
          : err
      let response: Awaited<ReturnType<ReturnType<HttpLibrary['send']>['toPromise']>>
      try {
        response = await inner.send(request).toPromise()
      } catch (err) {
        clearTimeout(timer)
        throw timedOut(err)
      }
      const { body } = response
      const guarded =
        <T>(read: () => Promise<T>) =>
        async () => {
          try {
            return await read()
          } catch (err) {
            throw timedOut(err)
          } finally {
            clearTimeout(timer)
          }
        }
      response.body = { text: guarded(() => body.text()), binary: guarded(() => body.binary()) }
      return response
    },
  })
}

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch)

/**
 * The KubeConfig's authentication with a connection pool. client-node 1.x gives every request a new https.Agent,
 * so every API call paid a TCP and TLS handshake (~10 ms here, and CPU under load): on the preemption path that was
 * most of the time between a cancel request and its DELETE. Credentials are still applied per request from the
 * KubeConfig (a rotated ServiceAccount token is picked up); only connections are reused, over one keep-alive agent
 * per TLS identity (replaced, and the old one closed, when the CA or client certificate changes).
 */
export class PooledAuthentication implements SecurityAuthentication {
  private agent?: https.Agent
  private identity?: string
  /** TCP + TLS connections opened so far (the tests and the benchmark read it). */
  connections = 0

  constructor(private readonly kc: KubeConfig) {}

  getName() {
    return 'kubeconfig-pooled'
  }

  async applySecurityAuthentication(context: RequestContext) {
    await this.kc.applySecurityAuthentication(context)
    const made = context.getAgent()
    // Plain HTTP and proxies stay as the library made them.
    if (!made || made.constructor !== https.Agent) return
    const o = (made as https.Agent).options
    const hash = createHash('sha256')
    for (const part of [o.ca, o.cert, o.key, o.pfx, o.passphrase, o.servername, o.rejectUnauthorized]) {
      for (const v of Array.isArray(part) ? part : [part]) hash.update(Buffer.isBuffer(v) ? v : String(v)).update('\0')
    }
    const identity = hash.digest('base64')
    if (identity !== this.identity) {
      this.agent?.destroy()
      // One TLS context per identity: without it every new connection parses the CA, certificate and key again
      // (tls.connect makes a context per socket), ~10 ms of CPU each under load — and a start or a burst opens several.
      const secureContext = tls.createSecureContext({
        ca: o.ca,
        cert: o.cert,
        key: o.key,
        pfx: o.pfx,
        passphrase: o.passphrase,
      })
      const agent = new https.Agent({ ...o, keepAlive: true, secureContext })
      const connect = agent.createConnection.bind(agent)
      agent.createConnection = (...args: Parameters<typeof connect>) => {
        this.connections++
        return connect(...args)
      }
      this.agent = agent
      this.identity = identity
    }
    context.setAgent(this.agent as https.Agent)
  }

  close() {
    this.agent?.destroy()
    this.agent = undefined
    this.identity = undefined
  }
}

/** An API client of the KubeConfig's current cluster that reuses its connections (see PooledAuthentication). */
export function makePooledClient<T>(
  kc: KubeConfig,
  auth: PooledAuthentication,
  Api: new (configuration: Configuration) => T,
  requestTimeoutMs = DEFAULT_KUBE_REQUEST_TIMEOUT_MS,
): T {
  const cluster = kc.getCurrentCluster()
  if (!cluster) throw new Error('the kubeconfig has no current cluster')
  return new Api(
    createConfiguration({
      baseServer: new ServerConfiguration(cluster.server, {}),
      authMethods: { default: auth },
      httpApi: deadlineHttpLibrary(requestTimeoutMs),
    }),
  )
}

/**
 * The apiserver did not answer the request (refused, reset, timed out: no HTTP status), or answered that it cannot
 * yet (429 "storage is (re)initializing" right after a restart, 503).
 */
/** How a request that got no answer fails: the socket's errors, fetch's, our own deadline's. */
const NO_ANSWER =
  /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|EHOSTUNREACH|ENETUNREACH|EAI_AGAIN|socket hang up|fetch failed|DeadlineError|AbortError|FetchError/

/**
 * The apiserver did not answer (or answered "not yet": 429 while its storage initializes, 503). Only that: an error
 * of the caller's own (a refusal to delete, a decode failure) has no status either, and waiting would not change it.
 */
const notAnswering = (err: unknown) => {
  const code = statusCode(err)
  if (code === 429 || code === 503) return true
  if (code !== undefined) return false
  const e = err as { name?: unknown; code?: unknown; message?: unknown; cause?: { code?: unknown; message?: unknown } }
  return NO_ANSWER.test(`${e?.name} ${e?.code} ${e?.message} ${e?.cause?.code} ${e?.cause?.message}`)
}

/** How often a caller waiting for the apiserver (Kube.whenReachable) asks whether it answers. */
const REACHABLE_POLL_MS = 250
/** The longest one shared poll runs (bounded even when every caller gave up meanwhile). */
const POLL_FOR_MS = 60_000

export class Kube {
  readonly custom: CustomObjectsApi
  readonly batch: BatchV1Api
  readonly core: CoreV1Api
  /** Requests this process sent to the API server, by verb (the benchmark reads it). */
  readonly requests = { read: 0, list: 0, write: 0 }

  readonly auth: PooledAuthentication

  /** Deadline of every request (KUBE_REQUEST_TIMEOUT_MS; default 10 s). */
  readonly requestTimeoutMs: number
  /** Who reports the Events this process writes (HOSTNAME: the pod; default `local`). */
  private readonly reportingInstance: string

  constructor(
    readonly kc: KubeConfig,
    opts: { requestTimeoutMs?: number; reportingInstance?: string } = {},
  ) {
    this.requestTimeoutMs = opts.requestTimeoutMs ?? DEFAULT_KUBE_REQUEST_TIMEOUT_MS
    this.reportingInstance = opts.reportingInstance ?? 'local'
    this.auth = new PooledAuthentication(kc)
    this.custom = makePooledClient(kc, this.auth, CustomObjectsApi, this.requestTimeoutMs)
    this.batch = makePooledClient(kc, this.auth, BatchV1Api, this.requestTimeoutMs)
    this.core = makePooledClient(kc, this.auth, CoreV1Api, this.requestTimeoutMs)
  }

  /** Closes the pooled connections (idle ones never hold the process open, but a clean stop closes them). */
  close() {
    this.auth.close()
  }

  private answering: Promise<void> | undefined

  /**
   * Runs `call`; while it fails without an answer from the apiserver (refused, reset, timed out, or not ready yet), waits
   * for the apiserver to answer again and runs it again at once, for at most `maxWaitMs` in all; then the last
   * failure is thrown (the caller's own retry takes over). Why: retried only by its event's redelivery backoff (up to
   * 30 s apart by then), a call failed through an apiserver outage ran again up to that long after the apiserver was
   * back — a cancel done 10+ s after a 50 s outage. The wait is one probe shared by every caller: a discovery GET
   * (any authenticated identity may) every REACHABLE_POLL_MS, each with a deadline of its own.
   */
  async whenReachable<T>(call: () => Promise<T>, maxWaitMs: number): Promise<T> {
    const until = Date.now() + maxWaitMs
    for (;;) {
      try {
        return await call()
      } catch (err) {
        const left = until - Date.now()
        if (!notAnswering(err) || left <= 0) throw err
        this.answering ??= this.pollUntilAnswering().finally(() => {
          this.answering = undefined
        })
        const answered = await withDeadline(this.answering, left, 'the apiserver to answer').then(
          () => true,
          () => false,
        )
        if (!answered) throw err
      }
    }
  }

  /** Polls until the apiserver answers, at most POLL_FOR_MS (then rejects; a later caller starts another). */
  private async pollUntilAnswering(): Promise<void> {
    const until = Date.now() + POLL_FOR_MS
    for (;;) {
      if (Date.now() > until) throw new Error(`the apiserver did not answer within ${POLL_FOR_MS} ms`)
      try {
        await withDeadline(this.core.getAPIResources(), REACHABLE_POLL_MS * 4, 'apiserver discovery')
        return
      } catch (err) {
        if (!notAnswering(err)) return // an answer, even a refusal: it is reachable
        await new Promise((r) => setTimeout(r, REACHABLE_POLL_MS).unref())
      }
    }
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

  /** A core/v1 Event on the ModelBackfill, so `kubectl describe` tells the story. Best effort. */
  /** Counts of the aggregated Events this process wrote (name → count), bounded; see recordEvent. */
  private readonly eventCounts = new Map<string, number>()

  /**
   * Records an Event on the ModelBackfill. Identical Events (same object, type, reason and message) are aggregated
   * as `kubectl describe` expects (`count`, `lastTimestamp`, as client-go's correlator does): the Event's name is
   * derived from them, so a repeat — from this instance or another — updates the existing Event instead of
   * adding one. This process remembers counts it wrote (at most MAX_EVENT_COUNTS) to skip a read; a count raced by
   * another instance may be off by one, which is all an Event is worth. Never throws.
   */
  async recordEvent(backfill: ModelBackfill, type: 'Normal' | 'Warning', reason: string, message: string) {
    const { namespace, name: object, uid } = backfill.metadata
    const text = message.slice(0, 1024)
    const name = eventName(object, `${uid ?? ''}\n${type}\n${reason}\n${text}`)
    const now = new Date()
    try {
      const known = this.eventCounts.get(name)
      if (known !== undefined && (await this.bumpEvent(namespace, name, known + 1, now))) return
      this.requests.write++
      await this.core.createNamespacedEvent({
        namespace,
        body: {
          metadata: { name, namespace },
          involvedObject: {
            apiVersion: `${GROUP}/${VERSION}`,
            kind: 'ModelBackfill',
            name: object,
            namespace,
            uid,
            resourceVersion: backfill.metadata.resourceVersion,
          },
          type,
          reason,
          message: text,
          firstTimestamp: now,
          lastTimestamp: now,
          count: 1,
          source: { component: 'model-backfill' },
          reportingComponent: 'flexinfer.ai/model-backfill',
          reportingInstance: this.reportingInstance,
        },
      })
      this.rememberEvent(name, 1)
    } catch (err) {
      if (statusCode(err) !== 409) return // Events are for people; losing one must never fail a transition.
      try {
        // Written before (by another instance, or before a restart): count on from what is stored.
        this.requests.read++
        const stored = await this.core.readNamespacedEvent({ namespace, name })
        await this.bumpEvent(namespace, name, (stored.count ?? 1) + 1, now)
      } catch {
        // As above.
      }
    }
  }

  /** Sets an aggregated Event's count and lastTimestamp; false when it no longer exists (expired: create it). */
  private async bumpEvent(namespace: string, name: string, count: number, now: Date): Promise<boolean> {
    this.requests.write++
    try {
      await this.core.patchNamespacedEvent(
        { namespace, name, body: { count, lastTimestamp: now.toISOString() } },
        mergePatch,
      )
      this.rememberEvent(name, count)
      return true
    } catch (err) {
      this.eventCounts.delete(name)
      if (statusCode(err) === 404) return false
      throw err
    }
  }

  private rememberEvent(name: string, count: number) {
    this.eventCounts.delete(name) // re-inserted last: the oldest entry is the first to go
    this.eventCounts.set(name, count)
    if (this.eventCounts.size > MAX_EVENT_COUNTS) {
      const oldest = this.eventCounts.keys().next().value
      if (oldest !== undefined) this.eventCounts.delete(oldest)
    }
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

/** Aggregated Event names this process remembers the count of. */
export const MAX_EVENT_COUNTS = 4096

/** `<object>.<16 hex of sha256(identity)>`: a valid, deterministic Event name for one kind of repeated Event. */
export function eventName(object: string, identity: string): string {
  return `${object.slice(0, 200)}.${createHash('sha256').update(identity).digest('hex').slice(0, 16)}`
}

/** A watch that has delivered nothing (no event, no reconnect) for this long is re-opened. */
export const WATCH_IDLE_RESTART_MS = 5 * 60_000

/**
 * A list of one resource kept current by a watch (an informer), read without asking the apiserver. Watches are
 * long-lived, so they have no request deadline; instead a watch quiet for `idleRestartMs` is re-opened from its
 * resourceVersion (no re-list): a stalled or half-open connection (TCP keep-alive alone takes minutes to notice,
 * and never notices a peer that is up but stuck) then costs at most that long, and an idle cluster one watch
 * request per period.
 */
export class WatchCache<T extends KubernetesObject> {
  private readonly informer
  private stopped = false
  private lastActivity = Date.now()
  private watchdog?: NodeJS.Timeout
  /** Watches re-opened because they went quiet (tests read it). */
  idleRestarts = 0

  constructor(
    kc: KubeConfig,
    path: string,
    list: () => Promise<KubernetesListObject<T>>,
    labelSelector?: string,
    private readonly opts: { idleRestartMs?: number } = {},
  ) {
    this.informer = makeInformer(kc, path, list, labelSelector)
    this.informer.on('error', () => {
      if (!this.stopped) setTimeout(() => !this.stopped && this.informer.start().catch(() => {}), 1000)
    })
    const touch = () => {
      this.lastActivity = Date.now()
    }
    this.informer.on('add', touch)
    this.informer.on('update', touch)
    this.informer.on('delete', touch)
    this.informer.on('connect', touch)
  }

  /** Every change the watch applies to this copy (the initial list's objects and a re-list's included), in order. */
  onChange(listener: (object: T, removed: boolean) => void) {
    this.informer.on('add', (o) => listener(o, false))
    this.informer.on('update', (o) => listener(o, false))
    this.informer.on('delete', (o) => listener(o, true))
  }

  /**
   * Resolves once the initial list is in; rejects when it could not be read. client-node's informer resolves its
   * start either way (a failed list is only an `error` event, retried by the handler above), which left a copy
   * empty — no GamingSession, no GPULease — while its readers took it for the cluster's.
   */
  async start(): Promise<void> {
    let failed: { err: unknown } | undefined
    const onError = (err: unknown) => {
      failed ??= { err }
    }
    this.informer.on('error', onError)
    try {
      await this.informer.start()
    } finally {
      this.informer.off('error', onError)
    }
    if (failed) throw failed.err
    this.lastActivity = Date.now()
    const idleMs = this.opts.idleRestartMs ?? WATCH_IDLE_RESTART_MS
    this.watchdog ??= setInterval(() => {
      if (this.stopped || Date.now() - this.lastActivity < idleMs) return
      this.lastActivity = Date.now()
      this.idleRestarts++
      // Aborting the request ends the watch; the informer's own done/error path opens a new one (see above).
      ;(this.informer as unknown as { _stop?(): void })._stop?.()
    }, idleMs / 2)
    this.watchdog.unref()
  }

  list(): T[] {
    return [...this.informer.list()]
  }

  get(namespace: string, name: string): T | null {
    return this.informer.get(name, namespace) ?? null
  }

  async stop() {
    this.stopped = true
    clearInterval(this.watchdog)
    await this.informer.stop()
  }
}

/** What a watched copy offers its readers, whether it is one watch or one per managed namespace. */
export interface ObjectCache<T extends KubernetesObject> {
  start(): Promise<void>
  stop(): Promise<void>
  list(): T[]
  get(namespace: string, name: string): T | null
  /** Subscribes to every change the watches apply (before start(): from the initial list on). */
  onChange?(listener: (object: T, removed: boolean) => void): void
}

/**
 * One namespaced kind kept current in scope: one watch across the cluster, or — with `namespaces` (a scoped
 * deployment) — one per managed namespace, so that a Role per namespace is all the RBAC it needs. `path` and
 * `list` receive the namespace (undefined: the whole cluster).
 */
export class ScopedWatchCache<T extends KubernetesObject> implements ObjectCache<T> {
  private readonly caches = new Map<string | undefined, WatchCache<T>>()

  constructor(
    kc: KubeConfig,
    namespaces: readonly string[] | undefined,
    path: (namespace?: string) => string,
    list: (namespace?: string) => Promise<KubernetesListObject<T>>,
    labelSelector?: string,
  ) {
    checkNamespaceCount(namespaces)
    for (const ns of namespaces ?? [undefined]) {
      this.caches.set(ns, new WatchCache<T>(kc, path(ns), () => list(ns), labelSelector))
    }
  }

  async start() {
    await Promise.all([...this.caches.values()].map((c) => c.start()))
  }

  async stop() {
    await Promise.all([...this.caches.values()].map((c) => c.stop()))
  }

  list(): T[] {
    return [...this.caches.values()].flatMap((c) => c.list())
  }

  onChange(listener: (object: T, removed: boolean) => void) {
    for (const c of this.caches.values()) c.onChange(listener)
  }

  /** Out of scope: null (never a cluster-wide read). */
  get(namespace: string, name: string): T | null {
    const cache = this.caches.get(undefined) ?? this.caches.get(namespace)
    return cache?.get(namespace, name) ?? null
  }
}

/** The API path of a namespaced kind's collection: in one namespace, or across the cluster. */
const collection = (prefix: string, plural: string, namespace?: string) =>
  namespace ? `${prefix}/namespaces/${namespace}/${plural}` : `${prefix}/${plural}`

/**
 * Every backfill-labelled Job in scope (the cluster, or each managed namespace), kept current by watches: admit's
 * contender gate, cancel's check.
 */
export const backfillJobsCache = (kube: Kube, namespaces?: readonly string[]) =>
  new ScopedWatchCache<V1Job>(
    kube.kc,
    namespaces,
    (ns) => collection('/apis/batch/v1', 'jobs', ns),
    (ns) =>
      ns
        ? kube.batch.listNamespacedJob({ namespace: ns, labelSelector: LABEL_BACKFILL })
        : kube.batch.listJobForAllNamespaces({ labelSelector: LABEL_BACKFILL }),
    LABEL_BACKFILL,
  )

/** A watched copy of one of our custom resources (ai.flexinfer/v1alpha2), per managed namespace or cluster-wide. */
export function customObjectsCache<T extends KubernetesObject = KubernetesObject>(
  kube: Kube,
  plural: string,
  namespaces: readonly string[] | undefined,
): ObjectCache<T> {
  return new ScopedWatchCache<T>(
    kube.kc,
    namespaces,
    (ns) => collection(`/apis/${GROUP}/${VERSION}`, plural, ns),
    async (ns) =>
      (ns
        ? await kube.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, plural, namespace: ns })
        : await kube.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural })) as never,
  )
}

/**
 * What admit reads on every admission, kept current by watches: the gates then cost no apiserver round trip
 * (a burst of admissions made the apiserver the bottleneck). A watch lags by milliseconds; whatever changes in
 * that time arrives as an event of its own and is decided again (a Model turning not Ready cancels at once). The
 * claims in KV, not these caches, make two admissions exclusive.
 *
 * Jobs and Models are watched in scope (per managed namespace when scoped); GamingSessions and GPULeases across the
 * cluster always: they target nodes, and a session outside the scope must still block (and cancel) a backfill on
 * its node.
 *
 * With `admit` (the process serves admit): the ModelBackfills and the CronJobs too, in scope, so an admission
 * decides without the two apiserver GETs in front of it. admit still GETs both on
 * every decision, alongside its NATS steps, and commits nothing — creates no Job — unless they are what it decided
 * on (pkg/admission/fresh-check.ts): a copy only saves the wait, never decides on its own. The CronJob watch holds
 * every CronJob in scope (most are no template of ours): a scoped deployment bounds that to its namespaces.
 * Lifecycle's own copies (functions/lifecycle/caches.ts) have neither kind unless shared with admit's: its Role
 * has no watch on CronJobs.
 */
export class AdmissionCaches {
  readonly jobs: ObjectCache<V1Job>
  /** The live ones among `jobs`, by model, node and backfill label: admit's contender gate (pkg/kube/active-jobs.ts). */
  readonly activeJobs = new ActiveJobs<V1Job>()
  readonly models: ObjectCache<KubernetesObject>
  readonly gamingSessions: ObjectCache<KubernetesObject>
  readonly gpuLeases: ObjectCache<KubernetesObject>
  /** admit's only: the ModelBackfills (lifecycle's sweep shares them) and the CronJobs (templates), in scope. */
  readonly backfills?: ObjectCache<ModelBackfill & KubernetesObject>
  readonly templates?: ObjectCache<V1CronJob>

  constructor(kube: Kube, namespaces?: readonly string[], opts: { admit?: boolean } = {}) {
    const custom = <T extends KubernetesObject>(plural: string, scope: readonly string[] | undefined) =>
      customObjectsCache<T>(kube, plural, scope)
    this.jobs = backfillJobsCache(kube, namespaces)
    this.jobs.onChange?.(this.activeJobs.change)
    this.models = custom(PLURALS.models, namespaces)
    this.gamingSessions = custom(PLURALS.gamingSessions, undefined)
    this.gpuLeases = custom(PLURALS.gpuLeases, undefined)
    if (opts.admit) {
      this.backfills = custom<ModelBackfill & KubernetesObject>(PLURALS.backfills, namespaces)
      this.templates = new ScopedWatchCache<V1CronJob>(
        kube.kc,
        namespaces,
        (ns) => collection('/apis/batch/v1', 'cronjobs', ns),
        (ns) => (ns ? kube.batch.listNamespacedCronJob({ namespace: ns }) : kube.batch.listCronJobForAllNamespaces()),
      )
    }
  }

  private get all() {
    return [this.jobs, this.models, this.gamingSessions, this.gpuLeases, this.backfills, this.templates].filter(
      (c) => c !== undefined,
    ) as ObjectCache<KubernetesObject>[]
  }

  async start() {
    await Promise.all(this.all.map((c) => c.start()))
  }

  /**
   * Resolves once the copies admission decides on (Jobs, Models, GamingSessions, GPULeases) hold their initial
   * lists; admit's copies of the ModelBackfills and CronJobs go on syncing after. Those only save a GET: until one
   * holds an object, admit GETs it (pkg/admission/reconcile.ts), so a process may serve events before they are in —
   * a start's first admission need not wait for two more lists (cold start). One that fails is logged and stays
   * empty: every admission then GETs, as without copies.
   */
  async startDeciding(log: { warn(obj: object, msg: string): void }) {
    this.copiesSynced = Promise.all([this.backfills?.start(), this.templates?.start()]).then(() => {})
    this.copiesSynced.catch((err: unknown) =>
      log.warn({ err: String(err) }, 'a watched copy admit only saves GETs with did not start; admit GETs instead'),
    )
    await Promise.all([this.jobs, this.models, this.gamingSessions, this.gpuLeases].map((c) => c.start()))
  }

  /**
   * Settles once the ModelBackfills' and CronJobs' copies hold their initial lists (set by startDeciding). Whoever
   * reads a copy as the whole set — lifecycle's sweep, sharing admit's ModelBackfills — waits for it: an empty list
   * there would be a lost cancel, not a GET.
   */
  copiesSynced?: Promise<void>

  async stop() {
    await Promise.all(this.all.map((c) => c.stop()))
  }
}
