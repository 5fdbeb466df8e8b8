// Knative Serving's part, played by the harness for the Broker-served functions: no Serving runs here (no
// kubelet), so for a Knative Service of the overlay the function it names (FUNCTION, TRANSPORT=http) is served in
// this process over HTTP (pkg/transport/http-adapter.ts, as its container would), a Service + Endpoints of the Knative
// Service's name makes http://<name>.<namespace>.svc.cluster.local reach it (through cluster-proxy.ts), and the
// Knative Service's status gets that address and Ready, as Serving would write it. The Triggers resolve their
// subscriber refs to that address by Knative's own addressable resolver.
import { CoreV1Api, CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node'
import type { InboundEvent } from '../../events/codec.js'
import { parseWatchNamespaces } from '../../pkg/kube/scope.js'
import { scoped } from '../../pkg/transport/deps.js'
import type { EventFunction } from '../../pkg/transport/function.js'
import { type HttpFunction, startHttpFunction } from '../../pkg/transport/http-adapter.js'
import { exposeService, type Manifest } from './eventing.js'

const KSVC = { group: 'serving.knative.dev', version: 'v1', plural: 'services' }

export interface ServedService {
  name: string
  /** The function's env FUNCTION in the Knative Service. */
  fn: string
  served?: HttpFunction
  /** `<type> <namespace>` of every event POSTed to it, before its scope is applied (newest last, bounded). */
  received: string[]
  /** Serves it (again, after stop(): a subscriber outage and its end) on the same port. */
  start(): Promise<void>
  stop(): Promise<void>
}

/** FUNCTION of a Knative Service's first container. */
export const functionOf = (ksvc: Manifest): string | undefined =>
  ksvc.spec?.template?.spec?.containers?.[0]?.env?.find((e: { name: string }) => e.name === 'FUNCTION')?.value

/**
 * The managed namespaces a workload's manifest names (WATCH_NAMESPACES, parsed as cmd/manager/main.ts does). Required
 * here: the test cluster is shared with other test files, whose objects an unscoped function would act on.
 */
export function watchNamespacesOf(workload: Manifest): string[] {
  const env = workload.spec?.template?.spec?.containers?.[0]?.env as { name: string; value?: string }[] | undefined
  const namespaces = parseWatchNamespaces(env?.find((e) => e.name === 'WATCH_NAMESPACES')?.value)
  if (!namespaces) throw new Error(`${workload.kind} ${workload.metadata?.name} has no WATCH_NAMESPACES`)
  return namespaces
}

const RECEIVED_MAX = 2_000
const namespaceOf = (event: InboundEvent) => {
  const data = event.data as { namespace?: unknown; metadata?: { namespace?: unknown } } | undefined
  const ns = data?.namespace ?? data?.metadata?.namespace
  return typeof ns === 'string' ? ns : '-'
}

export async function serveKnativeService(opts: {
  kc: KubeConfig
  ksvc: Manifest
  fn: EventFunction
  natsUrl: string
  namespace: string
  /** The test system's instance (pkg/transport/deps.ts scoped): admit's fence then looks at that system's demand and cancel. */
  instance?: string
}): Promise<ServedService> {
  const { kc, ksvc, namespace } = opts
  const name = ksvc.metadata.name
  // As its container would run it (cmd/manager/main.ts): scoped to its manifest's WATCH_NAMESPACES, reads per namespace.
  const namespaces = watchNamespacesOf(ksvc)
  const inScope = scoped(opts.fn, namespaces)
  let port = 0
  const service: ServedService = {
    name,
    fn: opts.fn.name,
    received: [],
    async start() {
      const observed: EventFunction = {
        ...inScope,
        handle(event, deps) {
          if (service.received.push(`${event.type} ${namespaceOf(event)}`) > RECEIVED_MAX) service.received.shift()
          return inScope.handle(event, deps)
        },
      }
      service.served = await startHttpFunction(observed, {
        natsUrl: opts.natsUrl,
        kubeconfig: kc,
        port,
        host: '127.0.0.1',
        namespaces,
      })
      service.served.deps.instance = opts.instance
      port = Number(new URL(service.served.url).port)
    },
    async stop() {
      await service.served?.stop()
      service.served = undefined
    },
  }
  await service.start()
  await exposeService(kc.makeApiClient(CoreV1Api), namespace, name, port)
  const url = `http://${name}.${namespace}.svc.cluster.local`
  const now = new Date().toISOString()
  const custom = kc.makeApiClient(CustomObjectsApi)
  const current = (await custom.getNamespacedCustomObject({ ...KSVC, namespace, name })) as Manifest
  await custom.replaceNamespacedCustomObjectStatus({
    ...KSVC,
    namespace,
    name,
    body: {
      ...current,
      status: {
        observedGeneration: current.metadata.generation,
        url,
        address: { url },
        conditions: ['ConfigurationsReady', 'Ready', 'RoutesReady'].map((type) => ({
          type,
          status: 'True',
          lastTransitionTime: now,
        })),
      },
    },
  })
  return service
}
