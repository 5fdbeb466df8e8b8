// source: turns Kubernetes ApiServerSource events (dev.knative.apiserver.resource.add|update|delete, Resource
// mode: the object is the data) into the catalog's own events, so every other function sees one vocabulary
// whether Knative's ApiServerSource or the local watcher produced them.

import { STREAM_EVENTS } from '../../events/catalog.js'
import type { InboundEvent } from '../../events/codec.js'
import { LABEL_BACKFILL } from '../../pkg/core/names.js'
import { gamingSessionView, gpuLeaseView, jobView, modelView } from '../../pkg/core/world.js'
import type { Deps } from '../../pkg/transport/function.js'
import { type EventFunction, PermanentError } from '../../pkg/transport/function.js'

const GROUP_PREFIX = 'ai.flexinfer/'

export async function translate(event: InboundEvent, deps: Deps): Promise<void> {
  if (!event.type.startsWith('dev.knative.apiserver.resource.')) return
  const obj = event.data as { apiVersion?: string; kind?: string; metadata: Record<string, unknown> }
  const deleted = event.type === 'dev.knative.apiserver.resource.delete'
  const namespace = String(obj.metadata.namespace ?? '')
  const name = String(obj.metadata.name)
  // The source event id makes re-publishing on redelivery a no-op (JetStream de-duplication).
  const msgID = `source:${event.id}`
  const isOurs = obj.apiVersion?.startsWith(GROUP_PREFIX)
  switch (`${isOurs ? 'flexinfer' : obj.apiVersion}/${obj.kind}`) {
    case 'flexinfer/ModelBackfill': {
      const generation = Number(obj.metadata.generation ?? 0) || undefined
      await deps.bus.publish(
        'ai.flexinfer.backfill.changed',
        { namespace, backfill: name, generation, deleting: Boolean(obj.metadata.deletionTimestamp), deleted },
        { msgID },
      )
      return
    }
    case 'flexinfer/Model': {
      const m = modelView(obj)
      await deps.bus.publish(
        'ai.flexinfer.model.ready',
        { namespace, model: name, ready: m.ready && !deleted, node: m.node, lastActiveTime: m.lastActiveTime, deleted },
        { msgID },
      )
      return
    }
    case 'flexinfer/GamingSession': {
      const s = gamingSessionView(obj)
      await deps.bus.publish(
        'ai.flexinfer.gaming.session',
        { namespace, name, nodeName: s.nodeName, deleted },
        { msgID },
      )
      return
    }
    case 'flexinfer/GPULease': {
      const l = gpuLeaseView(obj)
      await deps.bus.publish(
        'ai.flexinfer.gpu.lease',
        { namespace, name, node: l.node, group: l.group, deleted },
        { msgID },
      )
      return
    }
    case 'batch/v1/Job': {
      const j = jobView(obj)
      if (!j.backfillLabel) return // not ours: the ApiServerSource selects on the label, the watcher too
      const owner = (
        obj.metadata.ownerReferences as { kind?: string; name?: string; controller?: boolean }[] | undefined
      )?.find((r) => r.controller && r.kind === 'ModelBackfill')
      const outcome = deleted ? 'Deleted' : (j.outcome ?? (j.started ? 'Started' : undefined))
      if (!outcome) return
      await deps.bus.publish(
        'ai.flexinfer.job.completed',
        { namespace, job: name, backfill: owner?.name, outcome },
        { msgID },
      )
      return
    }
    default:
      throw new PermanentError(
        `no mapping for ${obj.apiVersion}/${obj.kind} (label ${LABEL_BACKFILL} Jobs and ai.flexinfer kinds only)`,
      )
  }
}

export function sourceFunction(): EventFunction {
  return {
    name: 'source',
    concurrency: 16,
    subscriptions: [{ stream: STREAM_EVENTS, subjects: ['flexinfer.events.k8s.>'] }],
    handle: translate,
  }
}
