// lifecycle's watched copies: without them every reconcile would LIST sessions, leases and its own Jobs and GET the
// Model, and every sweep and every model event LIST the ModelBackfills — apiserver load that grows with the number of
// backfills and bounds how many events lifecycle handles. With these it reads the same kinds from memory, kept
// current by one watch each (the process's SharedCaches, built where its Deps are opened: pkg/transport/deps.ts), with
// the ModelBackfills for the sweep and the cluster-wide re-decides.
//
// What stays a fresh read, and why: the ModelBackfill a reconcile decides on (its generation and resourceVersion
// must be the newest, pkg/reconcile/reconcile.ts), the attempt's Job (its "gone" is a decision input), the CronJob (not
// cached: pkg/kube/shared-caches.ts), and — once per event, not per backfill — whatever the event is about
// (the GamingSessions and GPULeases of a session/lease event, the Model of a model event; ./index.ts): a watch lags,
// and an event handled against a copy that has not seen it yet would lose the cancel it carries. Lifecycle never
// creates a Job: admission is admit's, behind its fence.
import type { KubernetesObject } from '@kubernetes/client-node'
import type { ModelBackfill } from '../../pkg/core/api.js'
import type { ObjectCache } from '../../pkg/kube/cache.js'
import type { SharedCaches } from '../../pkg/kube/shared-caches.js'
import type { Deps } from '../../pkg/transport/function.js'

export class LifecycleCaches {
  private constructor(
    readonly admission: SharedCaches,
    readonly backfills: ObjectCache<ModelBackfill & KubernetesObject>,
  ) {}

  /**
   * The process's copies, once the ModelBackfills' holds its initial list (the sweep lists it whole: an empty list
   * there would be a lost cancel). Undefined when the Deps were opened without them (functions not naming
   * lifecycle): lifecycle then reads the apiserver.
   */
  static async start(deps: Deps): Promise<LifecycleCaches | undefined> {
    const caches = deps.caches
    if (!caches?.backfills) {
      deps.log.warn({}, "lifecycle's Deps hold no watched copies (opened without 'lifecycle'): it reads the apiserver")
      return undefined
    }
    await caches.copiesSynced
    return new LifecycleCaches(caches, caches.backfills)
  }

  /** The deps a lifecycle reconcile runs with: these copies in place of admit's (the same ones when shared). */
  deps(deps: Deps): Deps {
    return deps.caches === this.admission ? deps : { ...deps, caches: this.admission }
  }
}
