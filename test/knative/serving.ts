// Knative Serving's part, played by the harness for the Broker-served functions: no Serving runs here (no
// kubelet), so for a Knative Service of the overlay the function it names (FUNCTION, TRANSPORT=http) is served in
// this process over HTTP (runtime/http-adapter.ts, as its container would), a Service + Endpoints of the Knative
// Service's name makes http://<name>.<namespace>.svc.cluster.local reach it (through cluster-proxy.ts), and the
// Knative Service's status gets that address and Ready, as Serving would write it. The Triggers resolve their
// subscriber refs to that address by Knative's own addressable resolver.
import { CoreV1Api, CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node'
import { scoped } from '../../runtime/deps.js'
import type { EventFunction } from '../../runtime/function.js'
import { type HttpFunction, startHttpFunction } from '../../runtime/http-adapter.js'
import { exposeService, type Manifest } from './eventing.js'

const KSVC = { group: 'serving.knative.dev', version: 'v1', plural: 'services' }

export interface ServedService {
  name: string
  /** The function's env FUNCTION in the Knative Service. */
  fn: string
  served?: HttpFunction
  /** Serves it (again, after stop(): a subscriber outage and its end) on the same port. */
  start(): Promise<void>
  stop(): Promise<void>
}

/** FUNCTION of a Knative Service's first container. */
export const functionOf = (ksvc: Manifest): string | undefined =>
  ksvc.spec?.template?.spec?.containers?.[0]?.env?.find((e: { name: string }) => e.name === 'FUNCTION')?.value

export async function serveKnativeService(opts: {
  kc: KubeConfig
  ksvc: Manifest
  fn: EventFunction
  natsUrl: string
  namespace: string
  /** The test system's instance (runtime/deps scoped): admit's fence then looks at that system's demand and cancel. */
  instance?: string
}): Promise<ServedService> {
  const { kc, ksvc, namespace } = opts
  const name = ksvc.metadata.name
  let port = 0
  const service: ServedService = {
    name,
    fn: opts.fn.name,
    async start() {
      service.served = await startHttpFunction(scoped(opts.fn, [namespace]), {
        natsUrl: opts.natsUrl,
        kubeconfig: kc,
        port,
        host: '127.0.0.1',
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
