// The watched copies admit, cancel and lifecycle share in one process. Built once, where the process is composed
// (pkg/transport/deps.ts openKube, for admit and lifecycle); the functions take them from their Deps.
import type { KubernetesObject, V1CronJob, V1Job, V1Pod } from '@kubernetes/client-node'
import type { ModelBackfill } from '../core/api.js'
import { ActiveJobs } from './active-jobs.js'
import {
  backfillJobsCache,
  backfillPodsCache,
  collection,
  customObjectsCache,
  type ObjectCache,
  ScopedWatchCache,
} from './cache.js'
import type { KubeClients } from './port.js'
import { PLURALS } from './resources.js'

/**
 * The watched objects the functions of one process share: what admit reads on every admission (cancel reads the
 * Jobs, lifecycle all of it), kept current by watches, so the gates cost no apiserver round trip (a burst of
 * admissions would make the apiserver the bottleneck). A watch lags by milliseconds; whatever changes in
 * that time arrives as an event of its own and is decided again (a Model turning not Ready cancels at once). The
 * claims in KV, not these caches, make two admissions exclusive.
 *
 * Jobs and Models are watched in scope (per managed namespace when scoped); GamingSessions and GPULeases across the
 * cluster always: they target nodes, and a session outside the scope must still block (and cancel) a backfill on
 * its node.
 *
 * With `backfills` and `templates` (the process serves admit): the ModelBackfills and the CronJobs too, in scope, so
 * an admission decides without the two apiserver GETs in front of it. admit still GETs both on
 * every decision, alongside its NATS steps, and commits nothing — creates no Job — unless they are what it decided
 * on (pkg/admission/copies-unchanged.ts): a copy only saves the wait, never decides on its own. The CronJob watch holds
 * every CronJob in scope (most are no template of ours): a scoped deployment bounds that to its namespaces.
 * A process serving lifecycle without admit watches the ModelBackfills (its sweep lists them) but not the CronJobs:
 * lifecycle's Role has no watch on CronJobs.
 */
export class SharedCaches {
  readonly jobs: ObjectCache<V1Job>
  /** The live ones among `jobs`, by model, node and backfill label: admit's contender gate (pkg/kube/active-jobs.ts). */
  readonly activeJobs = new ActiveJobs<V1Job>()
  readonly models: ObjectCache<KubernetesObject>
  readonly gamingSessions: ObjectCache<KubernetesObject>
  readonly gpuLeases: ObjectCache<KubernetesObject>
  /** admit's only: the ModelBackfills (lifecycle's sweep shares them) and the CronJobs (templates), in scope. */
  readonly backfills?: ObjectCache<ModelBackfill & KubernetesObject>
  readonly templates?: ObjectCache<V1CronJob>
  /**
   * lifecycle's only: the attempts' pods, in scope. Not started here: lifecycle subscribes to its changes first and
   * starts it (functions/lifecycle/pod-reports.ts), so the initial list's pods are read too.
   */
  readonly pods?: ObjectCache<V1Pod>

  constructor(
    kube: KubeClients,
    namespaces?: readonly string[],
    opts: { backfills?: boolean; templates?: boolean; pods?: boolean } = {},
  ) {
    const custom = <T extends KubernetesObject>(plural: string, scope: readonly string[] | undefined) =>
      customObjectsCache<T>(kube, plural, scope)
    this.jobs = backfillJobsCache(kube, namespaces)
    this.jobs.onChange?.(this.activeJobs.change)
    this.models = custom(PLURALS.models, namespaces)
    this.gamingSessions = custom(PLURALS.gamingSessions, undefined)
    this.gpuLeases = custom(PLURALS.gpuLeases, undefined)
    if (opts.backfills) this.backfills = custom<ModelBackfill & KubernetesObject>(PLURALS.backfills, namespaces)
    if (opts.pods) this.pods = backfillPodsCache(kube, namespaces)
    if (opts.templates) {
      this.templates = new ScopedWatchCache<V1CronJob>(
        kube.kc,
        namespaces,
        (ns) => collection('/apis/batch/v1', 'cronjobs', ns),
        (ns) => (ns ? kube.batch.listNamespacedCronJob({ namespace: ns }) : kube.batch.listCronJobForAllNamespaces()),
      )
    }
  }

  private get all() {
    return [
      this.jobs,
      this.models,
      this.gamingSessions,
      this.gpuLeases,
      this.backfills,
      this.templates,
      this.pods,
    ].filter((c) => c !== undefined) as ObjectCache<KubernetesObject>[]
  }

  /** Every copy but the pods' (lifecycle starts that one once it listens). */
  async start() {
    await Promise.all(this.all.filter((c) => c !== this.pods).map((c) => c.start()))
  }

  /**
   * Resolves once the copies admission decides on (Jobs, Models, GamingSessions, GPULeases) hold their initial
   * lists; admit's copies of the ModelBackfills and CronJobs go on syncing after. Those only save a GET: until one
   * holds an object, admit GETs it (pkg/reconcile/observe.ts), so a process may serve events before they are in —
   * a start's first admission need not wait for two more lists (cold start). One that fails is logged and stays
   * empty: every admission then GETs, as without copies.
   */
  async startDeciding(log: { warn(obj: object, msg: string): void }) {
    this.copiesSynced = Promise.all([this.backfills?.start(), this.templates?.start()]).then(() => {})
    this.copiesSynced.catch((err: unknown) =>
      log.warn({ err: String(err) }, 'a watched copy admit only saves GETs with did not start; admit GETs instead'),
    )
    await Promise.all([this.jobs, this.models, this.gamingSessions, this.gpuLeases].map((c) => c.start()))
  }

  /**
   * Settles once the ModelBackfills' and CronJobs' copies hold their initial lists (set by startDeciding). Whoever
   * reads a copy as the whole set — lifecycle's sweep, sharing admit's ModelBackfills — waits for it: an empty list
   * there would be a lost cancel, not a GET.
   */
  copiesSynced?: Promise<void>

  async stop() {
    await Promise.all(this.all.map((c) => c.stop()))
  }
}
