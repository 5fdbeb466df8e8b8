// lifecycle: Kubernetes-side changes — a ModelBackfill added/changed/deleted (spec, suspend, finalizer), a Model
// turning Ready or not or moving, gaming sessions, GPU leases, Jobs starting/finishing/disappearing — each
// re-decides the backfills it can affect. Job creation is forwarded to admit and Job deletion to cancel.
// It also runs the resync sweep (./resync.ts): every RESYNC_MS it re-decides whatever backfill may be stuck, so
// a lost event (a timer dead-lettered during an apiserver outage, a lost gaming session) is caught within a period.
// It reads watched copies (./caches.ts) rather than asking the apiserver on every reconcile, and a sweep never
// re-publishes a backfill whose earlier resync is still queued (./pending.ts): both what 10,000 backfills need.
// And it reads the attempts' termination messages from their pods as they end (./pod-reports.ts).

import { STREAM_EVENTS, STREAM_TIMERS } from '../../events/catalog.js'
import { backfillKey } from '../../pkg/core/names.js'
import { PLURALS } from '../../pkg/kube/resources.js'
import type { EventReads } from '../../pkg/reconcile/observe.js'
import { readState } from '../../pkg/reconcile/read-kv.js'
import { reconcile } from '../../pkg/reconcile/reconcile.js'
import type { Deps, EventFunction } from '../../pkg/transport/function.js'
import { LifecycleCaches } from './caches.js'
import { PendingResyncs } from './pending.js'
import { PodReports, reportThroughReconcile } from './pod-reports.js'
import { ensureResyncSchedule, sweep } from './resync.js'

async function currentState(deps: Deps, namespace: string, backfill: string) {
  return readState(deps.log, await deps.bus.kv.backfills.get(backfillKey(namespace, backfill)))
}

/** Re-decides at most this many backfills at once when a cluster-wide change (session, lease, model) arrives. */
const RECONCILE_ALL_CONCURRENCY = 16

type BackfillRef = { namespace: string; model: string }

/**
 * Re-decides every backfill the change may affect, with `fresh` (what the event is about, read once) over the
 * watched copies. Failures are isolated per object: one that throws (a malformed declaration, say) is logged and
 * handed to its own `backfill.resync` event, with its own retries and dead letter, and never stops the
 * gaming/lease cancels of the others. Only when every one failed (the apiserver is down) is the whole event retried.
 */
async function reconcileAll(
  deps: Deps,
  caches: LifecycleCaches | undefined,
  filter: (b: BackfillRef) => boolean,
  fresh: EventReads,
  ns?: string,
) {
  const scopes = ns ? [ns] : (deps.namespaces ?? [undefined])
  const all = caches
    ? caches.backfills.list().filter((b) => !ns || b.metadata.namespace === ns)
    : (await Promise.all(scopes.map((n) => deps.kube.listBackfills(n)))).flat()
  const backfills = all.filter((b) => filter({ namespace: b.metadata.namespace, model: b.spec?.modelRef }))
  const failed: { namespace: string; backfill: string; err: unknown }[] = []
  let next = 0
  const worker = async () => {
    while (next < backfills.length) {
      const { namespace, name } = (backfills[next++] as (typeof backfills)[number]).metadata
      try {
        await reconcile(deps, 'lifecycle', namespace, name, { type: 'resource' }, { fresh })
      } catch (err) {
        deps.log.warn({ namespace, backfill: name, err }, 'reconcile failed; retrying this backfill on its own')
        failed.push({ namespace, backfill: name, err })
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(RECONCILE_ALL_CONCURRENCY, backfills.length) }, worker))
  if (!failed.length) return
  if (failed.length === backfills.length) throw failed[0]?.err
  for (const { namespace, backfill } of failed) {
    await deps.bus.publish('ai.flexinfer.backfill.resync', { namespace, backfill, reason: 'ReconcileFailed' })
  }
}

/** One lifecycle instance: its watched copies (started with it) and the sweep's pending set. */
export function lifecycleFunction(): EventFunction {
  let caches: LifecycleCaches | undefined
  let pending: PendingResyncs | undefined
  let reports: PodReports | undefined
  return {
    name: 'lifecycle',
    concurrency: 8,
    subscriptions: [
      {
        stream: STREAM_EVENTS,
        subjects: [
          'flexinfer.events.backfill.changed',
          'flexinfer.events.backfill.resync',
          'flexinfer.events.model.>',
          'flexinfer.events.gaming.>',
          'flexinfer.events.gpu.>',
          'flexinfer.events.job.>',
        ],
      },
      // The repeating resync schedule fires into FLEXINFER_TIMERS (durable lifecycle-timers).
      { stream: STREAM_TIMERS, subjects: ['flexinfer.events.resync.>'] },
    ],
    async start(deps) {
      pending = new PendingResyncs(deps.now)
      caches = await LifecycleCaches.start(deps)
      const pods = caches?.admission.pods
      if (pods?.onChange) {
        const r = new PodReports(deps, reportThroughReconcile(caches ? caches.deps(deps) : deps))
        reports = r
        pods.onChange((pod, removed) => r.observe(pod, removed))
        // Not awaited: events are served meanwhile, and a watch that cannot start (no RBAC on pods) costs only the
        // reports; its informer retries.
        pods
          .start()
          .catch((err: unknown) =>
            deps.log.warn({ err: String(err) }, "the attempts' pods cannot be watched: no progress is read from them"),
          )
      }
      // Armed here too (not only by the provision step), so a local run or an upgrade without the provision Job
      // still gets its sweeps. A failure here must not keep lifecycle from serving events.
      try {
        await ensureResyncSchedule(deps, deps.settings?.resyncMs)
      } catch (err) {
        deps.log.warn({ err }, 'could not check or arm the resync schedule; the provision step arms it too')
      }
    },
    async stop() {
      // The copies are the process's (closed with its Deps): only this instance lets go of them.
      reports?.stop()
      reports = undefined
      caches = undefined
    },
    async handle(event, outer) {
      const deps = caches ? caches.deps(outer) : outer
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
        case 'ai.flexinfer.resync.due':
          await sweep(deps, { caches, pending })
          return
        case 'ai.flexinfer.backfill.resync':
          // A sweep (or a failed cluster-wide re-decide) found this backfill possibly wrong: decide it, whatever
          // its state says. Handled (or failing into its retries): the next sweep may pick it again.
          pending?.done(backfillKey(event.data.namespace, event.data.backfill))
          await reconcile(deps, 'lifecycle', event.data.namespace, event.data.backfill, resource)
          return
        case 'ai.flexinfer.model.ready': {
          const { namespace, model } = event.data
          // The Model read once, fresh, for all of its backfills: the watched copy may not have this change yet.
          const models = new Map([[`${namespace}/${model}`, await deps.kube.getModel(namespace, model)]])
          await reconcileAll(deps, caches, (b) => b.model === model, { models }, namespace)
          return
        }
        case 'ai.flexinfer.gaming.session':
        case 'ai.flexinfer.gpu.lease': {
          // Sessions and leases target nodes and GPU groups: any backfill in the cluster may be affected. Both lists
          // read once, fresh (two requests per event, not per backfill).
          const [gamingSessions, gpuLeases] = await Promise.all([
            deps.kube.listAll(PLURALS.gamingSessions),
            deps.kube.listAll(PLURALS.gpuLeases),
          ])
          await reconcileAll(deps, caches, () => true, { gamingSessions, gpuLeases })
          return
        }
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
}
