// Watched copies: a kind's objects kept current by watches and read from memory, without asking the apiserver.
import type { KubeConfig, KubernetesListObject, KubernetesObject, V1Job, V1Pod } from '@kubernetes/client-node'
import { makeInformer } from '@kubernetes/client-node'
import { GROUP, VERSION } from '../core/api.js'
import { LABEL_BACKFILL } from '../core/names.js'
import type { KubeClients } from './port.js'
import { checkNamespaceCount } from './scope.js'

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
   * start either way (a failed list is only an `error` event, retried by the handler above): the copy would be
   * empty — no GamingSession, no GPULease — while its readers take it for the cluster's.
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
export const collection = (prefix: string, plural: string, namespace?: string) =>
  namespace ? `${prefix}/namespaces/${namespace}/${plural}` : `${prefix}/${plural}`

/**
 * Every backfill-labelled Job in scope (the cluster, or each managed namespace), kept current by watches: admit's
 * contender gate, cancel's check.
 */
export const backfillJobsCache = (kube: KubeClients, namespaces?: readonly string[]) =>
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

/**
 * The attempts' pods (the backfill label their Jobs' pod template carries, pkg/core/job.ts) in scope, kept current
 * by watches: lifecycle reads their termination messages as they end (functions/lifecycle/pod-reports.ts). Only
 * our label is listed, so the copy holds as many pods as the backfill Jobs still standing have.
 */
export const backfillPodsCache = (kube: KubeClients, namespaces?: readonly string[]) =>
  new ScopedWatchCache<V1Pod>(
    kube.kc,
    namespaces,
    (ns) => collection('/api/v1', 'pods', ns),
    (ns) =>
      ns
        ? kube.core.listNamespacedPod({ namespace: ns, labelSelector: LABEL_BACKFILL })
        : kube.core.listPodForAllNamespaces({ labelSelector: LABEL_BACKFILL }),
    LABEL_BACKFILL,
  )

/** A watched copy of one of our custom resources (ai.flexinfer/v1alpha2), per managed namespace or cluster-wide. */
export function customObjectsCache<T extends KubernetesObject = KubernetesObject>(
  kube: KubeClients,
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
