// What every entry point (the JetStream runner, the HTTP adapter, the bridge) opens before it serves events: one
// NATS bus, a Kubernetes client and, where admit runs, its watched caches. Also the per-instance scoping that lets
// several independent systems share one NATS server.
import type { KubeConfig } from '@kubernetes/client-node'
import { STREAM_EVENTS, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST, STREAM_TIMERS } from '../../events/catalog.js'
import type { InboundEvent } from '../../events/codec.js'
import type { GateDeployment } from '../core/gate.js'
import { Bus } from '../jetstream/bus.js'
import type { NatsCredentialFiles } from '../jetstream/connect.js'
import { consumerName, instanceName } from '../jetstream/names.js'
import type { KubeApi, KubeClients } from '../kube/port.js'
import { checkNamespaceCount } from '../kube/scope.js'
import type { SharedCaches } from '../kube/shared-caches.js'
import { createLogger, type Logger } from '../observability/log.js'
import type { Deps, EventFunction, Settings } from './function.js'

/** What every process (runner, HTTP function, bridge) is started with. */
export interface ProcessOptions {
  natsUrl: string
  kubeconfig?: KubeConfig
  logger?: Logger
  now?: () => number
  /**
   * Manage only these namespaces (env WATCH_NAMESPACES, pkg/kube/scope.ts; at most MAX_WATCH_NAMESPACES): namespaced
   * kinds are then read per namespace only. Default: the whole cluster.
   */
  namespaces?: string[]
  /**
   * Create the NATS topology (streams, buckets, this process's durable consumers) at start: true by default (local
   * runs, tests); false when deployed (NATS_PROVISION=false), where the provision step made it (cmd/manager/provision.ts).
   */
  provision?: boolean
  /** With provision false: how long to wait for the provisioned topology before failing (default 120 s). */
  topologyWaitMs?: number
  /** The background gate admit injects (GATE_IMAGE and GATE_NATS_URL); unset: none. */
  gate?: GateDeployment
  /** The functions' and the adapters' settings (cmd/manager/config.ts); unset: every default. */
  settings?: Settings
  /** NATS_CONNECT_WAIT_MS: how long to wait for NATS at start (default 120 s). */
  connectWaitMs?: number
  /** NATS_CREDS_FILE / NATS_NKEY_SEED_FILE: the credentials of a mounted Secret (pkg/jetstream/connect.ts). */
  natsCredentials?: NatsCredentialFiles
  /** NATS_REPLICAS: replicas of what provisioning creates (default 1). */
  replicas?: number
  /** KUBE_REQUEST_TIMEOUT_MS: deadline of every Kubernetes API request (default 10 s). */
  kubeRequestTimeoutMs?: number
  /** HOSTNAME: this pod, as Kubernetes Events report it (default `local`). */
  hostname?: string
}

export interface DepsOptions extends ProcessOptions {
  /** NATS connection name (shows in the server's monitoring). */
  name: string
  /** Names of the functions served: admit and lifecycle get the watched caches (Deps.caches). */
  functions?: readonly string[]
  /** A Kubernetes client whatever the functions (the runner's watcher); default: needsKube(functions). */
  kube?: boolean
}

export async function openDeps(opts: DepsOptions): Promise<Deps & { close(): Promise<void> }> {
  const log = opts.logger ?? createLogger('model-backfill')
  checkNamespaceCount(opts.namespaces)
  // The Kubernetes side (the client's import, admit's watched caches and their initial lists) and the NATS side
  // (connect, bind the topology) are started together: the client's compile and the caches' apiserver round trips
  // overlap the connect's, instead of following them (cold start). Both are done before any event is served.
  const kubeSide = openKube(opts, log)
  const busSide = Bus.connect(opts.natsUrl, opts.name, {
    provision: opts.provision,
    waitMs: opts.topologyWaitMs,
    connectWaitMs: opts.connectWaitMs,
    credentials: opts.natsCredentials,
    replicas: opts.replicas,
    log,
  })
  const [k, b] = await Promise.allSettled([kubeSide, busSide])
  if (k.status === 'rejected' || b.status === 'rejected') {
    if (k.status === 'fulfilled') await k.value.close()
    if (b.status === 'fulfilled') await b.value.close()
    throw k.status === 'rejected' ? k.reason : (b as PromiseRejectedResult).reason
  }
  const { kube, caches } = k.value
  const bus = b.value
  const deps: Deps = {
    kube,
    bus,
    log,
    now: opts.now ?? Date.now,
    namespaces: opts.namespaces,
    gate: opts.gate,
    settings: opts.settings,
    caches,
  }
  return {
    ...deps,
    async close() {
      await caches?.stop()
      await bus.close()
      kube.close()
    },
  }
}

/**
 * The Kubernetes client, where a function calls the apiserver (see KUBE_FREE_FUNCTIONS), and, where admit or
 * lifecycle runs, the watched caches: those admit decides on synced before this resolves, the copies of the
 * ModelBackfills and CronJobs (SharedCaches.startDeciding) after. The one place a process builds the caches its
 * functions share.
 */
async function openKube(
  opts: DepsOptions,
  log: Logger,
): Promise<{ kube: KubeApi & KubeClients; caches?: SharedCaches; close(): Promise<void> }> {
  const client = (opts.kube ?? needsKube(opts.functions)) ? await loadClient() : undefined
  const kube = client
    ? new client.Kube(opts.kubeconfig ?? client.loadKubeConfig(), {
        requestTimeoutMs: opts.kubeRequestTimeoutMs,
        reportingInstance: opts.hostname,
      })
    : noKube()
  const admit = opts.functions?.includes('admit') ?? false
  if (!client || !(admit || opts.functions?.includes('lifecycle'))) return { kube, close: async () => kube.close() }
  // Scoped: Jobs, Models, ModelBackfills, CronJobs and pods watched per managed namespace (a Role each), sessions and
  // leases cluster-wide. The CronJobs only for admit (lifecycle's Role cannot watch them).
  // The attempts' pods only for lifecycle (the one Role that may read them).
  const lifecycle = opts.functions?.includes('lifecycle') ?? false
  const caches = new client.SharedCaches(kube, opts.namespaces, { backfills: true, templates: admit, pods: lifecycle })
  const close = async () => {
    await caches.stop()
    kube.close()
  }
  try {
    await caches.startDeciding(log)
  } catch (err) {
    await close()
    throw err
  }
  return { kube, caches, close }
}

/** The Kubernetes client's modules, loaded only by a process that calls the apiserver (see KUBE_FREE_FUNCTIONS). */
async function loadClient() {
  const [{ Kube }, { loadKubeConfig }, { SharedCaches }] = await Promise.all([
    import('../kube/client.js'),
    import('../kube/http.js'),
    import('../kube/shared-caches.js'),
  ])
  return { Kube, loadKubeConfig, SharedCaches }
}

/**
 * Functions that make no Kubernetes API call on any path: demand decides from NATS alone, source and the ingress
 * only publish. A process that serves only these loads no Kubernetes client (@kubernetes/client-node is ~1 MB of
 * the bundle, its model classes built at load: most of a cold start). test/integration/transport/
 * cold-start-modules.test.ts checks that demand's process loads none.
 */
export const KUBE_FREE_FUNCTIONS: ReadonlySet<string> = new Set(['demand', 'source', 'ingress'])

/** Unknown or absent function lists (the bridge, everything in one process) get a client. */
export const needsKube = (functions?: readonly string[]) =>
  !functions?.length || functions.some((f) => !KUBE_FREE_FUNCTIONS.has(f))

/**
 * Deps.kube of a process without a Kubernetes client: it counts no request (the benchmark reads `requests`), and
 * anything else says plainly that the function must be taken out of KUBE_FREE_FUNCTIONS.
 */
export function noKube(): KubeApi & KubeClients {
  const requests = Object.freeze({ read: 0, list: 0, write: 0 })
  const fail = (prop: PropertyKey) => {
    throw new Error(
      `Kube.${String(prop)} used in a process without a Kubernetes client: a function that calls the apiserver ` +
        'must not be listed in KUBE_FREE_FUNCTIONS (pkg/transport/deps.ts)',
    )
  }
  return new Proxy({} as KubeApi & KubeClients, {
    get(_, prop) {
      if (prop === 'requests') return requests
      if (prop === 'close') return () => {}
      // Promise resolution and inspection probe these; they are not Kube calls.
      if (prop === 'then' || typeof prop === 'symbol') return undefined
      return fail(prop)
    },
  })
}

/** Namespace an event is about, when it says (catalog events carry it in data; ApiServerSource in the object). */
function eventNamespace(event: InboundEvent): string | undefined {
  const data = event.data as { namespace?: unknown; metadata?: { namespace?: unknown } }
  const ns = data.namespace ?? data.metadata?.namespace
  return typeof ns === 'string' ? ns : undefined
}

/** Gaming sessions and GPU leases target nodes and GPU groups: a scoped deployment must see them from anywhere. */
function targetsNodes(event: InboundEvent): boolean {
  if (event.type === 'ai.flexinfer.gaming.session' || event.type === 'ai.flexinfer.gpu.lease') return true
  const kind = (event.data as { kind?: unknown }).kind
  return event.type.startsWith('dev.knative.apiserver.resource.') && (kind === 'GamingSession' || kind === 'GPULease')
}

/**
 * Restricts a function to namespaces (events about others are acknowledged and skipped, except gaming sessions and
 * GPU leases, which concern every namespace's backfills) and, with an instance
 * name, gives it durable consumers of its own (`<function>-<instance>`, from new messages on).
 */
export function scoped(fn: EventFunction, namespaces?: string[], instance?: string): EventFunction {
  if (!namespaces && !instance) return fn
  const handle: EventFunction['handle'] = (event, deps, ctx) => {
    const ns = eventNamespace(event)
    if (namespaces && ns !== undefined && !namespaces.includes(ns) && !targetsNodes(event)) return Promise.resolve()
    return fn.handle(event, deps, ctx)
  }
  return {
    ...fn,
    name: instanceName(fn.name, instance),
    subscriptions: instance ? fn.subscriptions.map((s) => ({ ...s, deliverNew: true })) : fn.subscriptions,
    start: fn.start?.bind(fn),
    stop: fn.stop?.bind(fn),
    handle,
  }
}

/** Removes an instance's own consumers when it stops (production consumers are shared and stay). */
export async function deleteInstanceConsumers(bus: Bus, functionNames: string[]) {
  for (const name of functionNames) {
    for (const stream of [STREAM_EVENTS, STREAM_TIMERS, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST]) {
      await bus.jsm.consumers.delete(stream, consumerName(name, stream)).catch(() => {})
    }
  }
}
