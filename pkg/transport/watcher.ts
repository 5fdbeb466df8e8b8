// Kubernetes as an event source for local runs and tests: list+watch the same resources Knative's
// ApiServerSource (Resource mode) watches in production and publish the same CloudEvents into NATS, so the
// functions run one code path everywhere. Informers relist and re-watch on their own after errors.
import { type KubeConfig, type KubernetesObject, makeInformer } from '@kubernetes/client-node'
import { apiserverSubject } from '../../events/catalog.js'
import { encodeApiServerEvent, type KubeObject } from '../../events/codec.js'
import { GROUP, VERSION } from '../core/api.js'
import { LABEL_BACKFILL } from '../core/names.js'
import type { Bus } from '../jetstream/bus.js'
import type { KubeClients } from '../kube/port.js'
import { checkNamespaceCount } from '../kube/scope.js'
import type { Logger } from '../observability/log.js'

/** Resources that target nodes or GPU groups: they concern backfills in every namespace. */
export const NODE_SCOPED = new Set(['gamingsessions', 'gpuleases'])

interface Watched {
  resource: string
  apiVersion: string
  kind: string
  path: string
  labelSelector?: string
  list: () => Promise<{ items: KubernetesObject[] }>
}

/** The resources ApiServerSource watches in production; per namespace when the deployment is scoped. */
export function watchedResources(kube: KubeClients, namespace?: string): Watched[] {
  const scope = namespace ? `/namespaces/${namespace}` : ''
  const custom = (plural: string, kind: string): Watched => ({
    resource: plural,
    apiVersion: `${GROUP}/${VERSION}`,
    kind,
    path: `/apis/${GROUP}/${VERSION}${scope}/${plural}`,
    list: async () =>
      namespace
        ? kube.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, plural, namespace })
        : kube.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural }),
  })
  return [
    custom('modelbackfills', 'ModelBackfill'),
    custom('models', 'Model'),
    custom('gamingsessions', 'GamingSession'),
    custom('gpuleases', 'GPULease'),
    {
      resource: 'jobs',
      apiVersion: 'batch/v1',
      kind: 'Job',
      path: `/apis/batch/v1${scope}/jobs`,
      labelSelector: LABEL_BACKFILL,
      list: async () =>
        namespace
          ? kube.batch.listNamespacedJob({ namespace, labelSelector: LABEL_BACKFILL })
          : kube.batch.listJobForAllNamespaces({ labelSelector: LABEL_BACKFILL }),
    },
  ]
}

export interface Watcher {
  stop(): Promise<void>
}

export async function startWatcher(
  kc: KubeConfig,
  kube: KubeClients,
  bus: Bus,
  log: Logger,
  namespaces?: string[],
): Promise<Watcher> {
  checkNamespaceCount(namespaces)
  const source = kc.getCurrentCluster()?.server ?? 'kubernetes'
  // stop() aborts each watch, which the informer reports as an error: without this flag the restart below would
  // bring a stopped watcher back to life a second later (listing and watching for a runner that is gone).
  let stopped = false
  // GamingSessions and GPULeases target nodes and GPU groups, not namespaces: a session anywhere must cancel a
  // backfill on its node, so they are watched cluster-wide even by a scoped deployment.
  const resources = namespaces
    ? [
        ...namespaces.flatMap((ns) => watchedResources(kube, ns).filter((w) => !NODE_SCOPED.has(w.resource))),
        ...watchedResources(kube).filter((w) => NODE_SCOPED.has(w.resource)),
      ]
    : watchedResources(kube)
  const informers = resources.map((w) => {
    const informer = makeInformer(kc, w.path, w.list as never, w.labelSelector)
    const publish = (verb: 'add' | 'update' | 'delete') => (obj: KubernetesObject) => {
      // Watch events omit apiVersion/kind on list items; ApiServerSource always carries them.
      const full = { apiVersion: w.apiVersion, kind: w.kind, ...obj } as KubeObject
      const meta = obj.metadata ?? {}
      const subject = `/apis/${w.apiVersion}/namespaces/${meta.namespace}/${w.resource}/${meta.name}`
      const id = `${meta.uid}.${meta.resourceVersion}.${verb}`
      bus.js
        .publish(apiserverSubject(w.resource), encodeApiServerEvent(verb, full, { source, subject, id }), { msgID: id })
        .catch((err) => log.error({ err, resource: w.resource, name: meta.name }, 'watcher publish failed'))
    }
    informer.on('add', publish('add'))
    informer.on('update', publish('update'))
    informer.on('delete', publish('delete'))
    informer.on('error', (err) => {
      if (stopped) return
      log.warn({ err: String(err), resource: w.resource }, 'watch error; restarting in 1s')
      setTimeout(() => {
        if (!stopped) informer.start().catch(() => {})
      }, 1000)
    })
    return informer
  })
  await Promise.all(informers.map((i) => i.start()))
  return {
    async stop() {
      stopped = true
      await Promise.all(informers.map((i) => i.stop()))
    },
  }
}
