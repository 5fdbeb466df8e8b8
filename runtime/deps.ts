// What every entry point (the JetStream runner, the HTTP adapter, the bridge) opens before it serves events: one
// NATS bus, a Kubernetes client and, where admit runs, its watched caches. Also the per-instance scoping that lets
// several independent systems share one NATS server.
import { KubeConfig } from '@kubernetes/client-node'
import { STREAM_EVENTS, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST, STREAM_TIMERS } from '../events/catalog.js'
import type { InboundEvent } from '../events/codec.js'
import { consumerName, type EventFunction } from './function.js'
import { AdmissionCaches, Kube } from './kube.js'
import { createLogger, type Logger } from './log.js'
import { Bus } from './nats.js'
import type { Deps } from './reconcile.js'
import { checkNamespaceCount } from './scope.js'

/** What every process (runner, HTTP function, bridge) is started with. */
export interface ProcessOptions {
  natsUrl: string
  kubeconfig?: KubeConfig
  logger?: Logger
  now?: () => number
  /**
   * Manage only these namespaces (env WATCH_NAMESPACES, runtime/scope.ts; at most MAX_WATCH_NAMESPACES): namespaced
   * kinds are then read per namespace only. Default: the whole cluster.
   */
  namespaces?: string[]
  /**
   * Create the NATS topology (streams, buckets, this process's durable consumers) at start: true by default (local
   * runs, tests); false when deployed (NATS_PROVISION=false), where the provision step made it (runtime/provision.ts).
   */
  provision?: boolean
  /** With provision false: how long to wait for the provisioned topology before failing (default 120 s). */
  topologyWaitMs?: number
}

export interface DepsOptions extends ProcessOptions {
  /** NATS connection name (shows in the server's monitoring). */
  name: string
  /** Names of the functions served: admit gets its watched caches. */
  functions?: readonly string[]
}

export async function openDeps(opts: DepsOptions): Promise<Deps & { close(): Promise<void> }> {
  const log = opts.logger ?? createLogger('model-backfill')
  checkNamespaceCount(opts.namespaces)
  const bus = await Bus.connect(opts.natsUrl, opts.name, {
    provision: opts.provision,
    waitMs: opts.topologyWaitMs,
    log,
  })
  const kube = new Kube(opts.kubeconfig ?? loadKubeConfig())
  const deps: Deps = {
    kube,
    bus,
    log,
    now: opts.now ?? Date.now,
    namespaces: opts.namespaces,
  }
  if (opts.functions?.includes('admit')) {
    // Scoped: Jobs and Models watched per managed namespace (a Role each), sessions and leases cluster-wide.
    deps.caches = new AdmissionCaches(kube, opts.namespaces)
    await deps.caches.start()
  }
  return {
    ...deps,
    async close() {
      await deps.caches?.stop()
      await bus.close()
      kube.close()
    },
  }
}

export function loadKubeConfig(): KubeConfig {
  const kc = new KubeConfig()
  kc.loadFromDefault()
  return kc
}

/** Namespace an event is about, when it says (catalog events carry it in data; ApiServerSource in the object). */
function eventNamespace(event: InboundEvent): string | undefined {
  const data = event.data as { namespace?: unknown; metadata?: { namespace?: unknown } }
  const ns = data.namespace ?? data.metadata?.namespace
  return typeof ns === 'string' ? ns : undefined
}

/** A function's name in a runner with an instance name: its durable consumers carry it (see scoped). */
export const instanceName = (fn: string, instance?: string) => (instance ? `${fn}-${instance}` : fn)

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
  const handle: EventFunction['handle'] = (event, deps) => {
    const ns = eventNamespace(event)
    if (namespaces && ns !== undefined && !namespaces.includes(ns) && !targetsNodes(event)) return Promise.resolve()
    return fn.handle(event, deps)
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
