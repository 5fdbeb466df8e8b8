// lifecycle: Kubernetes-side changes — a ModelBackfill added/changed/deleted (spec, suspend, finalizer), a Model
// turning Ready or not or moving, gaming sessions, GPU leases, Jobs starting/finishing/disappearing — each
// re-decides the backfills it can affect. Job creation is forwarded to admit and Job deletion to cancel.
import { backfillKey } from '../../core/names.js'
import type { BackfillState } from '../../core/state.js'
import { STREAM_EVENTS } from '../../events/catalog.js'
import type { EventFunction } from '../../runtime/function.js'
import { type Deps, reconcile } from '../../runtime/reconcile.js'

async function currentState(deps: Deps, namespace: string, backfill: string): Promise<BackfillState | null> {
  const entry = await deps.bus.kv.backfills.get(backfillKey(namespace, backfill))
  return entry?.operation === 'PUT' ? entry.json<BackfillState>() : null
}

async function reconcileAll(deps: Deps, filter: (b: { namespace: string; model: string }) => boolean, ns?: string) {
  const scopes = ns ? [ns] : (deps.namespaces ?? [undefined])
  const backfills = (await Promise.all(scopes.map((n) => deps.kube.listBackfills(n)))).flat()
  for (const b of backfills) {
    if (!filter({ namespace: b.metadata.namespace, model: b.spec?.modelRef })) continue
    await reconcile(deps, 'lifecycle', b.metadata.namespace, b.metadata.name, { type: 'resource' })
  }
}

export const lifecycle: EventFunction = {
  name: 'lifecycle',
  concurrency: 8,
  subscriptions: [
    {
      stream: STREAM_EVENTS,
      subjects: [
        'flexinfer.events.backfill.changed',
        'flexinfer.events.model.>',
        'flexinfer.events.gaming.>',
        'flexinfer.events.gpu.>',
        'flexinfer.events.job.>',
      ],
    },
  ],
  async handle(event, deps) {
    const resource = { type: 'resource' } as const
    switch (event.type) {
      case 'ai.flexinfer.backfill.changed': {
        const { namespace, backfill, generation, deleting, deleted } = event.data
        // Our own status writes come back as updates; one that changes neither spec nor deletion needs nothing.
        const state = await currentState(deps, namespace, backfill)
        if (state && !deleting && !deleted && generation === state.generation) return
        await reconcile(deps, 'lifecycle', namespace, backfill, resource)
        return
      }
      case 'ai.flexinfer.model.ready':
        await reconcileAll(deps, (b) => b.model === event.data.model, event.data.namespace)
        return
      case 'ai.flexinfer.gaming.session':
      case 'ai.flexinfer.gpu.lease':
        // Sessions and leases target nodes and GPU groups: any backfill in the cluster may be affected.
        await reconcileAll(deps, () => true)
        return
      case 'ai.flexinfer.job.completed': {
        const { namespace, backfill, job, outcome } = event.data
        if (!backfill) return
        // A running Job reports many status updates; once Running is recorded they change nothing.
        if (outcome === 'Started') {
          const state = await currentState(deps, namespace, backfill)
          if (state?.jobName === job && state.phase === 'Running') return
        }
        await reconcile(deps, 'lifecycle', namespace, backfill, resource)
        return
      }
    }
  },
}
