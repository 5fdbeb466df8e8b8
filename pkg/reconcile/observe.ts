// observe(): reads what decide() needs about one backfill — its ModelBackfill and state, the Model and its idle
// signals, the CronJob template, the attempt's Job, the gaming sessions and GPU leases, and the live Jobs that may
// contend for the model or its node — as the role observes it (pkg/reconcile/roles.ts).
import type { V1CronJob } from '@kubernetes/client-node'
import type { KvEntry } from '@nats-io/kv'
import { readClaimsAhead } from '../admission/claims.js'
import type { AdmissionPorts } from '../admission/ports.js'
import type { ModelBackfill } from '../core/api.js'
import type { Contender, Observed } from '../core/decision.js'
import { gateProblem, gpuViolations } from '../core/job.js'
import { backfillLabelValue, claimKeys, isObjectName, LABEL_BACKFILL, modelKey } from '../core/names.js'
import type { BackfillState } from '../core/state.js'
import { gamingSessionView, gpuLeaseView, isActiveJob, type JobView, jobView, modelView } from '../core/world.js'
import { PLURALS } from '../kube/resources.js'
import { type StepTimings, timed } from '../observability/step-timings.js'
import type { Deps } from '../transport/function.js'
import { portsOf } from './deps.js'
import { readIdle } from './read-kv.js'
import { ROLES, type Role } from './roles.js'

/**
 * What a lifecycle event is about, read fresh once for every backfill it re-decides: lifecycle otherwise reads
 * watched copies, and one that has not yet seen the change the event reports would lose the cancel it carries
 * (functions/lifecycle/caches.ts).
 */
export interface EventReads {
  gamingSessions?: unknown[]
  gpuLeases?: unknown[]
  /** `<namespace>/<name>` → the Model as just read (null: it does not exist). */
  models?: Map<string, unknown | null>
}

interface Observation {
  observed: Observed
  template: V1CronJob | null
}

const ownedBy = (job: JobView, b: ModelBackfill) => !b.metadata.uid || job.ownerUid === b.metadata.uid

/**
 * What decide() is given about one backfill, read as `role` observes it, with the CronJob the attempt's Job is built
 * from. No ModelBackfill: nothing else is read.
 */
export async function observe(
  deps: Deps,
  namespace: string,
  name: string,
  state: BackfillState | null,
  backfill: ModelBackfill | null,
  role: Role = 'admit',
  fresh: EventReads = {},
  timings?: StepTimings,
  /**
   * Reads already in flight: `template` (admit on its watched copies; undefined: GET it here), `signals` (admit's
   * idle-state and newest-request reads, issued with the state read; undefined: read here).
   */
  inHand: { template?: V1CronJob | null | Promise<V1CronJob | null>; signals?: ModelSignals } = {},
): Promise<Observation> {
  const templateRead = inHand.template
  const { kube } = deps
  if (!backfill) {
    return {
      observed: {
        backfill: null,
        state,
        model: null,
        idle: null,
        gamingSessions: [],
        leases: [],
        template: { found: false },
        job: null,
        contenders: [],
      },
      template: null,
    }
  }
  const modelName = backfill.spec.modelRef
  const observes = ROLES[role].observes
  const caches = observes.watchedCopies ? deps.caches : undefined
  const freshModel = fresh.models?.get(`${namespace}/${modelName}`)
  // A ref no object can have is never read with (an invalid KV key throws; ".." in an API path reads something
  // else): it is not found, and decide() blocks on it with the reason.
  const modelOk = isObjectName(modelName)
  const templateOk = isObjectName(backfill.spec.templateRef)
  // Without a stored state, the Job the status names is the one a takeover may adopt (pkg/core/takeover.ts).
  const statusJob = state ? undefined : backfill.status?.jobName
  const attemptJob = state?.jobName ?? (isObjectName(statusJob) ? statusJob : undefined)
  const ours = backfillLabelValue(name)
  const signals = !modelOk ? undefined : (inHand.signals ?? readModelSignals(deps, namespace, modelName, timings))
  const [model, template, job, sessions, leases, jobs, idle, lastRequest] = await Promise.all([
    !modelOk
      ? null
      : freshModel !== undefined
        ? freshModel
        : caches
          ? caches.models.get(namespace, modelName)
          : kube.getModel(namespace, modelName),
    !templateOk
      ? null
      : templateRead !== undefined
        ? templateRead
        : timed(timings, 'observe.template', kube.getCronJob(namespace, backfill.spec.templateRef)),
    attemptJob ? kube.getJob(namespace, attemptJob) : Promise.resolve(null),
    fresh.gamingSessions ?? (caches ? caches.gamingSessions.list() : kube.listAll(PLURALS.gamingSessions)),
    fresh.gpuLeases ?? (caches ? caches.gpuLeases.list() : kube.listAll(PLURALS.gpuLeases)),
    // The contenders are every backfill Job in the cluster; a role that never admits lists this declaration's own.
    !observes.contenders
      ? caches
        ? caches.jobs
            .list()
            .filter((j) => j.metadata?.namespace === namespace && j.metadata.labels?.[LABEL_BACKFILL] === ours)
        : kube.listOwnJobs(namespace, name)
      : caches
        ? null // from the live-Jobs index below, once the model's node is known
        : kube.listBackfillJobs(deps.namespaces),
    signals?.idle ?? null,
    signals?.lastRequest ?? null,
  ])
  const modelV = model ? modelView(model) : null
  const contenders: Contender[] = []
  const strays: JobView[] = []
  // The contenders on watched copies: only the live Jobs on this model, on its node or with this backfill's label (an
  // index, not a walk of every backfill Job: pkg/kube/active-jobs.ts); the tests below pick from them as from the list.
  // (A ref that names no model matches the Jobs without one: that rare case walks every watched Job.)
  const candidates =
    jobs ??
    (caches && modelOk ? caches.activeJobs.near(namespace, modelName, modelV?.node, ours) : (caches?.jobs.list() ?? []))
  for (const j of candidates.map(jobView)) {
    if (!isActiveJob(j)) continue
    // Only a Job this very ModelBackfill controls is a stray of ours to delete: one that merely carries our label
    // (made by someone else, or left by a predecessor of the same name) is never ours — it counts as a contender.
    if (j.backfillLabel === ours && j.namespace === namespace && ownedBy(j, backfill)) {
      if (j.name !== state?.jobName) strays.push(j)
      continue
    }
    const on =
      j.namespace === namespace && j.model === modelName
        ? 'model'
        : modelV?.node && j.node === modelV.node
          ? 'node'
          : null
    if (on) contenders.push({ namespace: j.namespace, jobName: j.name, on })
  }
  return {
    observed: {
      backfill,
      state,
      model: modelV,
      idle: readIdle(deps.log, idle),
      lastRequestAt: lastRequest ?? undefined,
      gamingSessions: sessions.map(gamingSessionView),
      leases: leases.map(gpuLeaseView),
      template: template
        ? { found: true, gpu: gpuViolations(template), gate: gateProblem(backfill, template, deps.gate) }
        : { found: false },
      // A Job of that name is the attempt's only when this ModelBackfill (by UID) controls it: a predecessor of the
      // same name left one behind (orphaned, or not yet collected), and its outcome is not ours to report.
      job: job && ownedBy(jobView(job), backfill) ? jobView(job) : null,
      contenders,
      strays,
    },
    template,
  }
}

/** The claims an admission for `model` would take, read ahead when the watched copy of the model names its node. */
export function readClaimsOfCachedModel(deps: Deps, ports: AdmissionPorts, namespace: string, model: string) {
  const cached = deps.caches?.models.get(namespace, model)
  const node = cached ? modelView(cached).node : undefined
  return node ? readClaimsAhead(ports, claimKeys(namespace, model, node)) : undefined
}

/** The model's idle state and the store time of its newest request, as observe() reads them. */
export interface ModelSignals {
  idle: Promise<KvEntry | null>
  lastRequest: Promise<string | null>
}

export function readModelSignals(deps: Deps, namespace: string, model: string, timings?: StepTimings): ModelSignals {
  const signals: ModelSignals = {
    idle: Promise.resolve(timed(timings, 'observe.idle', deps.bus.kv.idle.get(modelKey(namespace, model)))),
    lastRequest: Promise.resolve(
      timed(
        timings,
        'observe.lastRequest',
        portsOf(deps)
          .requests.newest(namespace, model)
          .then((r) => r.at),
      ),
    ),
  }
  // Awaited later, maybe not at all (the state read failed first): a failure must not be an unhandled rejection.
  signals.idle.catch(() => {})
  signals.lastRequest.catch(() => {})
  return signals
}
