// The fail-safe: foreground always wins, so background does not run while foreground demand cannot be observed.
// Every cancel process probes, once a second, whether the preemption path can see foreground requests — NATS answers
// and a demand instance pulls each of demand's two consumers (the admission fence's own test, pkg/admission/fence.ts),
// and the gateway ingress, where gateways POST their requests, can publish them (its /readyz, INGRESS_READY_URL; pkg/admission/ingress.ts).
// When it has not seen that for longer than FAILSAFE_BLIND_MS (pkg/core/fail-safe.ts failSafe), it cancels every running
// backfill Job in scope through Kubernetes alone: the Cancelling/ForegroundUnobservable status first (decide reads it
// back once NATS is back and counts the preemption under `other`), then the Job's DELETE and its pods', a Warning
// Event, a log line and the metrics of observability/ops-metrics.ts. It keeps doing so for any Job that appears while it is
// engaged; admission itself is closed by the fence (and by NATS being gone). One probe that sees the path again
// lets go: the attempts come back through the normal gates, each with a fresh idle window.
//
// Why cancel holds this duty: it is the process that owns the preemption DELETE, it never scales to zero in either
// overlay (a PodDisruptionBudget keeps one), it already watches the backfill Jobs and its ServiceAccount already has
// every verb this needs (list/watch/delete jobs, deletecollection pods, get modelbackfills, update their status,
// create events) — nothing is granted for it. The Kubernetes watcher (pkg/transport/watcher.ts) runs only where there is no
// ApiServerSource and may delete nothing; a process of its own would be one more always-on Deployment with the same
// rights. Each cancel replica decides alone (no coordination, which would need NATS): deletes are idempotent.
import type { KubeConfig, V1Job } from '@kubernetes/client-node'
import { STREAM_FOREGROUND, STREAM_FOREGROUND_LAST } from '../../events/catalog.js'
import { consumers, pullingInfo } from '../../pkg/admission/fence.js'
import { probeIngress } from '../../pkg/admission/ingress.js'
import {
  type Blindness,
  blindStatus,
  blindTargets,
  FAILSAFE_BLIND_MS,
  failSafe,
  type Visibility,
} from '../../pkg/core/fail-safe.js'
import { jobView } from '../../pkg/core/world.js'
import type { ObjectCache } from '../../pkg/kube/cache.js'
import { withDeadline } from '../../pkg/lib/deadline.js'
import { Lane } from '../../pkg/lib/lane.js'
import { describeError, type Logger } from '../../pkg/observability/log.js'
import { failSafeCancellations, failSafeEngaged, foregroundUnobservable } from '../../pkg/observability/ops-metrics.js'
import type { Deps, Settings } from '../../pkg/transport/function.js'
import { deleteAttemptPods } from './deletes.js'

/** How often the path is probed. */
export const PROBE_EVERY_MS = 1_000
/** A probe NATS has not answered within this is a blind one (a request buffered while disconnected waits 5 s). */
const PROBE_DEADLINE_MS = 1_000
/** Jobs cancelled at once while engaged (each: a GET, a status write, two DELETEs, an Event). */
const WIDTH = 16

/**
 * Whether the preemption path can see foreground requests now: NATS answers and demand pulls both consumers, and
 * the gateway ingress (when one is watched) can publish.
 */
export async function probeVisibility(deps: Deps, ingressUrl?: string): Promise<Visibility> {
  const [path, ingress] = await Promise.all([
    probePath(deps),
    ingressUrl ? probeIngress(ingressUrl) : ({ visible: true } as const),
  ])
  const why = [path, ingress].flatMap((v) => (v.visible ? [] : [v.why]))
  return why.length ? { visible: false, why: why.join('; ') } : { visible: true }
}

async function probePath(deps: Deps): Promise<Visibility> {
  const names = consumers(deps)
  const jsm = deps.bus.jsm
  try {
    const [foreground, last] = await withDeadline(
      Promise.all([
        pullingInfo(jsm, STREAM_FOREGROUND, names.demandForeground),
        pullingInfo(jsm, STREAM_FOREGROUND_LAST, names.demandLast),
      ]),
      PROBE_DEADLINE_MS,
      'consumer info',
    )
    if (!foreground?.num_waiting || !last?.num_waiting) {
      return { visible: false, why: 'no demand instance is pulling foreground requests' }
    }
    return { visible: true }
  } catch (err) {
    return { visible: false, why: `NATS unreachable (${describeError(err)})` }
  }
}

export interface FailSafe {
  /** The latest decision (tests, logs). */
  readonly state: Blindness
  stop(): Promise<void>
}

export interface FailSafeOptions {
  boundMs?: number
  probeEveryMs?: number
  /** Why this Job may not be deleted on behalf of that backfill (cancel's own ownership check), or undefined. */
  refusal: (job: V1Job, backfill: string) => string | undefined
  /** The probe (tests replace it to simulate what only a real outage shows otherwise). */
  probe?: (deps: Deps) => Promise<Visibility>
  /** The gateway ingress's /readyz; default Deps.settings.ingressReadyUrl (INGRESS_READY_URL). */
  ingressUrl?: string
}

export function startFailSafe(deps: Deps, jobs: ObjectCache<V1Job>, opts: FailSafeOptions): FailSafe {
  const boundMs = opts.boundMs ?? deps.settings?.failSafeBlindMs ?? FAILSAFE_BLIND_MS
  const every = opts.probeEveryMs ?? PROBE_EVERY_MS
  const ingressUrl = opts.ingressUrl ?? deps.settings?.ingressReadyUrl
  const probe = opts.probe ?? ((d: Deps) => probeVisibility(d, ingressUrl))
  const lane = new Lane(WIDTH)
  let state: Blindness = { lastSeenAt: deps.now(), engaged: false }
  // Jobs this engagement already cancelled, by UID: pruned to those still in the watched copy, so bounded by it.
  const done = new Set<string>()
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  let running: Promise<void> = Promise.resolve()

  async function cancelOne(job: V1Job, blindForMs: number, why: string) {
    const meta = job.metadata ?? {}
    const namespace = meta.namespace as string
    const name = meta.name as string
    const backfill = meta.ownerReferences?.find((r) => r.controller)?.name ?? ''
    const refused = opts.refusal(job, backfill)
    if (refused) {
      deps.log.warn(
        { namespace, job: name, why: refused },
        'fail-safe: not deleting a Job that is not a backfill attempt',
      )
      if (meta.uid) done.add(meta.uid)
      return
    }
    const message =
      `foreground demand unobservable for ${Math.round(blindForMs / 1000)}s (${why}); fail-safe deleted Job ${name}; ` +
      'no attempt starts until foreground demand is observable again'
    // The status first: once NATS is back, decide reads it and counts the preemption rather than re-creating the Job.
    const b = await deps.kube.getBackfill(namespace, backfill)
    if (b) {
      for (let tries = 0; tries < 3; tries++) {
        const current = tries === 0 ? b : await deps.kube.getBackfill(namespace, backfill)
        if (!current || (await deps.kube.writeStatus(current, blindStatus(current, name, message, deps.now())))) break
      }
    }
    const result = await deps.kube.deleteJob(namespace, name, meta.uid)
    if (meta.uid) {
      await deleteAttemptPods(deps.kube, namespace, meta.uid).catch((err) =>
        deps.log.warn(
          { namespace, job: name, error: describeError(err) },
          'fail-safe: deleting the pods failed; the GC will',
        ),
      )
      done.add(meta.uid)
    }
    if (result === 'deleted') failSafeCancellations.inc()
    if (b) await deps.kube.recordEvent(b, 'Warning', 'ForegroundUnobservable', message)
    deps.log.warn({ namespace, backfill, job: name, result, blindForMs, why }, 'fail-safe: backfill Job deleted')
  }

  async function tick() {
    const sent = deps.now()
    const seen = await probe(deps)
    // Observable: it was at least when the probe was sent. Not: judged now, after the probe's deadline ran out.
    const at = seen.visible ? sent : deps.now()
    const next = failSafe(state, seen, at, boundMs)
    if (next.engaged !== state.engaged) {
      if (next.engaged) {
        deps.log.error(
          { why: next.why, blindForMs: at - next.lastSeenAt, boundMs },
          'fail-safe engaged: foreground demand unobservable; cancelling every running backfill through Kubernetes',
        )
      } else {
        deps.log.warn({ blindForMs: at - state.lastSeenAt }, 'fail-safe released: foreground demand observable again')
        done.clear()
      }
    }
    state = next
    failSafeEngaged.set(state.engaged ? 1 : 0)
    foregroundUnobservable.set(state.why ? Math.max(0, at - state.lastSeenAt) / 1000 : 0)
    if (!state.engaged) return
    const all = jobs.list()
    const present = new Set(all.map((j) => j.metadata?.uid))
    for (const uid of done) if (!present.has(uid)) done.delete(uid)
    const targets = new Set(blindTargets(all.map(jobView)).map((j) => j.uid))
    const why = state.why ?? 'unknown'
    await Promise.all(
      all
        .filter((j) => targets.has(j.metadata?.uid) && !done.has(j.metadata?.uid as string))
        .map((j) =>
          lane.run(() =>
            cancelOne(j, at - state.lastSeenAt, why).catch((err) =>
              deps.log.error(
                { namespace: j.metadata?.namespace, job: j.metadata?.name, error: describeError(err) },
                'fail-safe: cancelling a backfill Job failed; retried at the next probe',
              ),
            ),
          ),
        ),
    )
  }

  // One probe a second, back to back while they time out: a blind probe costs its whole deadline.
  const loop = () => {
    if (stopped) return
    const started = deps.now()
    running = tick()
      .catch((err) => deps.log.error({ error: describeError(err) }, 'fail-safe: probe failed'))
      .finally(() => {
        if (!stopped) timer = setTimeout(loop, Math.max(0, every - (deps.now() - started)))
      })
  }
  timer = setTimeout(loop, every)

  return {
    get state() {
      return state
    },
    async stop() {
      stopped = true
      clearTimeout(timer)
      await running
      failSafeEngaged.set(0)
      foregroundUnobservable.set(0)
    },
  }
}

/**
 * The fail-safe of a cancel process that has not reached NATS yet: one started during an outage waits for NATS
 * (NATS_CONNECT_WAIT_MS) before its function runs, and without this nothing would cancel the running Jobs meanwhile.
 * Blind from the process's start, so it engages after the bound unless NATS answers first; the runner stops it once
 * the cancel function (and its own fail-safe) runs.
 */
export async function startBeforeNats(
  opts: {
    kubeconfig?: KubeConfig
    namespaces?: string[]
    log: Logger
    now?: () => number
    settings?: Settings
    /** KUBE_REQUEST_TIMEOUT_MS and HOSTNAME, as the process's own client gets them. */
    kubeRequestTimeoutMs?: number
    hostname?: string
  },
  refusal: FailSafeOptions['refusal'],
): Promise<{ stop(): Promise<void> }> {
  const [{ Kube }, { loadKubeConfig }, { backfillJobsCache }] = await Promise.all([
    import('../../pkg/kube/client.js'),
    import('../../pkg/kube/http.js'),
    import('../../pkg/kube/cache.js'),
  ])
  const kube = new Kube(opts.kubeconfig ?? loadKubeConfig(), {
    requestTimeoutMs: opts.kubeRequestTimeoutMs,
    reportingInstance: opts.hostname,
  })
  const jobs = backfillJobsCache(kube, opts.namespaces)
  // The watch starts in the background: an apiserver that is down too must not hold the process's start.
  const started = jobs.start().catch((err) => opts.log.warn({ error: describeError(err) }, 'fail-safe: no Job watch'))
  const deps = {
    kube,
    log: opts.log,
    now: opts.now ?? Date.now,
    namespaces: opts.namespaces,
    settings: opts.settings,
  } as unknown as Deps
  const failSafe = startFailSafe(deps, jobs, {
    refusal,
    probe: async () => ({ visible: false, why: 'NATS unreachable (not connected since this process started)' }),
  })
  return {
    async stop() {
      await failSafe.stop()
      await started
      await jobs.stop()
      kube.close()
    },
  }
}
