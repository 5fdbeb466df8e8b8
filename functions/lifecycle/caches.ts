// lifecycle's watched copies: without them every reconcile would LIST sessions, leases and its own Jobs and GET the
// Model, and every sweep and every model event LIST the ModelBackfills — apiserver load that grows with the number of
// backfills and bounds how many events lifecycle handles. With these it reads the same kinds from memory, kept
// current by one watch each (admit's SharedCaches, shared when admit runs in the same process), plus the
// ModelBackfills for the sweep and the cluster-wide re-decides.
//
// What stays a fresh read, and why: the ModelBackfill a reconcile decides on (its generation and resourceVersion
// must be the newest, pkg/reconcile/reconcile.ts), the attempt's Job (its "gone" is a decision input), the CronJob (not
// cached: pkg/kube/shared-caches.ts), and — once per event, not per backfill — whatever the event is about
// (the GamingSessions and GPULeases of a session/lease event, the Model of a model event; ./index.ts): a watch lags,
// and an event handled against a copy that has not seen it yet would lose the cancel it carries. Lifecycle never
// creates a Job: admission is admit's, behind its fence.
import type { KubernetesObject } from '@kubernetes/client-node'
import type { ModelBackfill } from '../../pkg/core/api.js'
import { customObjectsCache, type ObjectCache } from '../../pkg/kube/cache.js'
import type { KubeClients } from '../../pkg/kube/port.js'
import { PLURALS } from '../../pkg/kube/resources.js'
import { SharedCaches } from '../../pkg/kube/shared-caches.js'
import type { Deps } from '../../pkg/transport/function.js'

export class LifecycleCaches {
  readonly backfills: ObjectCache<ModelBackfill & KubernetesObject>
  private readonly ownBackfills: boolean
  private constructor(
    readonly admission: SharedCaches,
    private readonly ownAdmission: boolean,
    kube: KubeClients,
    namespaces?: readonly string[],
  ) {
    // admit's copy when shared (one watch per process), else one of lifecycle's own.
    this.ownBackfills = !admission.backfills
    this.backfills =
      admission.backfills ?? customObjectsCache<ModelBackfill & KubernetesObject>(kube, PLURALS.backfills, namespaces)
  }

  /** Shares admit's copies when the process has them; resolves once every initial list is in. */
  static async start(deps: Deps): Promise<LifecycleCaches> {
    const own = !deps.caches
    const c = new LifecycleCaches(
      deps.caches ?? new SharedCaches(deps.kube, deps.namespaces),
      own,
      deps.kube,
      deps.namespaces,
    )
    try {
      await Promise.all([
        own ? c.admission.start() : undefined,
        // Shared: admit's copy may still be syncing (SharedCaches.startDeciding); the sweep lists it whole.
        c.ownBackfills ? c.backfills.start() : c.admission.copiesSynced,
      ])
    } catch (err) {
      await c.stop()
      throw err
    }
    return c
  }

  async stop() {
    await Promise.all([
      this.ownAdmission ? this.admission.stop() : undefined,
      this.ownBackfills ? this.backfills.stop() : undefined,
    ])
  }

  /** The deps a lifecycle reconcile runs with: these copies in place of admit's (the same ones when shared). */
  deps(deps: Deps): Deps {
    return deps.caches === this.admission ? deps : { ...deps, caches: this.admission }
  }
}
