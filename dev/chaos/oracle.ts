// The oracle: judges the run from its own watch on Jobs (admin credentials, every namespace) and the log of the
// foreground requests the workload published — never from the functions' KV state. Its rules (dev/chaos/README.md):
//
// - created in an idle window: a Job of backfill b (model m, window w) whose creation time c has a non-background
//   request for m accepted by NATS at s with c - w + tol < s < c - tol. c is the time the watch delivered ADDED
//   (creationTimestamp has 1 s resolution); when the watch lagged more than 1 s behind creationTimestamp (a relist
//   after an outage), c is only known to lie in [ct, ct + 1 s) and the rule uses the bounds that cannot
//   over-count: ct + 1 s - w + tol < s < ct - tol. s is the PubAck time (store time ≤ PubAck). When the apiserver
//   audits Job writes (dev/chaos/audit.ts), c is when it received the Job's POST and a deletion is when its DELETE
//   completed, both to the microsecond: the watch's delay under load no longer moves either.
//   Except a raced Job: the watch saw it deleted by s + raceDeleteBound (1 s) for the earliest such s — the request
//   may have been stored after admit's last read, while the POST was in flight, and foreground waited no longer
//   than the bound. Reported apart (jobs_raced_and_deleted), not counted; never for a watch that lagged.
// - two live attempts: two Jobs of the workload on one model or one node whose live intervals overlap in the
//   watch's order of events (live: from ADDED until deletionTimestamp, deletion or a finished condition).
// - foreign Job deleted: a Job the harness created outside any ModelBackfill got a deletionTimestamp or vanished.
// - lost cancel: a Job already live when a non-background request for its model was sent, still live at the
//   request's deadline: acked + bound, extended to (fault end + bound) for every fault on the preemption path
//   that overlaps it (demand/cancel killed until the restart allowance ends, demand paused, NATS or apiserver down).
//   Counted once per Job (its first such request has the earliest deadline).
// - running while blind: a Job live (seen ADDED before, not ended) at t + failSafeBound + failSafeSlack, where t is
//   the start of a NATS outage that lasted at least that long: nothing could see a foreground request, so the
//   fail-safe must have deleted it through Kubernetes (functions/cancel/fail-safe.ts).
// - settled: see settledProblems().
import {
  BatchV1Api,
  CustomObjectsApi,
  type Informer,
  type KubeConfig,
  makeInformer,
  type V1Job,
} from '@kubernetes/client-node'
import { GROUP, type ModelBackfill, VERSION } from '../../pkg/core/api.js'
import { createOf, deleteAfter, type JobAudit } from './audit.js'
import type { ChaosConfig } from './config.js'
import { type DeclaredBackfill, type ForegroundRequest, modelKey, type Workload } from './workload.js'

/**
 * How long before the apiserver received a Job's POST its admit may have been killed with the POST still in flight
 * (written to the socket, not yet read by the apiserver: a loaded machine).
 */
const ADMIT_KILLED_BEFORE_POST_MS = 500

export interface FaultWindow {
  /** nats-leader-kill: kill -9 of the nats-server leading a stream or bucket (dev/chaos/failover.ts), `fn` names it. */
  kind: 'kill' | 'demand-pause' | 'quota' | 'nats-restart' | 'apiserver-stop' | 'hostile-events' | 'nats-leader-kill'
  fn?: string
  start: number
  end: number
}

interface SeenJob {
  uid: string
  namespace: string
  name: string
  owner?: string
  createdSecond: number
  addedAt: number
  addedSeq: number
  endAt?: number
  endSeq?: number
  endHow?: string
  /** The object itself is gone (a deletion the watch reported), not only marked for deletion. */
  gone?: boolean
}

export interface Counts {
  jobs_created_in_idle_window: number
  two_live_attempts_same_model_or_node: number
  foreign_jobs_deleted: number
  lost_cancels: number
  jobs_running_while_blind: number
  backfills_not_settled: number
  processes_crashed: number
  rss_over_limit: number
}

const finished = (job: V1Job) =>
  job.status?.conditions?.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True')?.type

export class Oracle {
  readonly faults: FaultWindow[] = []
  readonly jobs = new Map<string, SeenJob>()
  readonly foreign = new Set<string>()
  private seq = 0
  private informer?: Informer<V1Job>
  private stopped = false
  private lastInterruptLog = 0

  constructor(
    private readonly kc: KubeConfig,
    private readonly workload: Workload,
    private readonly config: ChaosConfig,
    private readonly log: (line: string) => void,
  ) {}

  async start(): Promise<void> {
    const batch = this.kc.makeApiClient(BatchV1Api)
    const informer = makeInformer(this.kc, '/apis/batch/v1/jobs', () => batch.listJobForAllNamespaces())
    const seen = (job: V1Job) => {
      const meta = job.metadata
      if (!meta?.uid || !meta.name || !meta.namespace) return
      let entry = this.jobs.get(meta.uid)
      if (!entry) {
        const owner = meta.ownerReferences?.find((o) => o.kind === 'ModelBackfill' && o.controller)
        entry = {
          uid: meta.uid,
          namespace: meta.namespace,
          name: meta.name,
          owner: owner ? `${meta.namespace}/${owner.name}` : undefined,
          createdSecond: Date.parse(String(meta.creationTimestamp)),
          addedAt: Date.now(),
          addedSeq: ++this.seq,
        }
        this.jobs.set(meta.uid, entry)
      }
      const how = meta.deletionTimestamp ? 'deleting' : finished(job)
      if (how) this.end(entry, how)
    }
    informer.on('add', seen)
    informer.on('update', seen)
    informer.on('delete', (job) => {
      seen(job)
      const entry = job.metadata?.uid ? this.jobs.get(job.metadata.uid) : undefined
      if (entry) {
        this.end(entry, 'deleted')
        entry.gone = true
      }
    })
    // The apiserver goes away on purpose: start again (bounded by the run) until the watch is back.
    informer.on('error', () => this.restart())
    this.informer = informer
    await informer.start()
  }

  private restart() {
    if (this.stopped) return
    if (Date.now() - this.lastInterruptLog > 30_000) {
      this.log('oracle: the Job watch was interrupted; listing and watching again (every second until it is back)')
      this.lastInterruptLog = Date.now()
    }
    setTimeout(() => {
      if (this.stopped) return
      this.informer?.start().catch(() => this.restart())
    }, 1000)
  }

  private end(entry: SeenJob, how: string) {
    if (entry.endAt !== undefined) return
    entry.endAt = Date.now()
    entry.endSeq = ++this.seq
    entry.endHow = how
  }

  async stop(): Promise<void> {
    this.stopped = true
    await this.informer?.stop()
  }

  fault(window: FaultWindow) {
    this.faults.push(window)
  }

  /** Jobs of declared (non-hostile) backfills. */
  private workloadJobs() {
    const byBackfill = new Map(this.workload.backfills.map((b) => [`${b.namespace}/${b.name}`, b]))
    const out: { job: SeenJob; backfill: DeclaredBackfill; model: string; node: string }[] = []
    for (const job of this.jobs.values()) {
      const b = job.owner ? byBackfill.get(job.owner) : undefined
      if (!b || b.hostile) continue
      out.push({ job, backfill: b, model: modelKey(b.namespace, b.model), node: b.node })
    }
    return out
  }

  liveJobsOf(namespace: string, backfill: string) {
    return [...this.jobs.values()].filter((j) => j.owner === `${namespace}/${backfill}` && j.endAt === undefined)
  }

  /** Deadline of a request's cancel: acked + bound, extended by every fault on the preemption path it overlaps. */
  private deadline(ackAt: number): number {
    const bound = this.config.cancelBoundMs
    const relevant = this.faults.filter(
      (f) =>
        f.kind === 'demand-pause' ||
        f.kind === 'nats-restart' ||
        f.kind === 'apiserver-stop' ||
        // A leader kill, only while the target or the preemption path it led has no leader (dev/chaos/failover.ts).
        f.kind === 'nats-leader-kill' ||
        (f.kind === 'kill' && (f.fn === 'demand' || f.fn === 'cancel')),
    )
    let deadline = ackAt + bound
    for (let changed = true; changed; ) {
      changed = false
      for (const f of relevant) {
        if (f.start <= deadline && f.end >= ackAt && f.end + bound > deadline) {
          deadline = f.end + bound
          changed = true
        }
      }
    }
    return deadline
  }

  /**
   * The verdict on the first four invariants. `storeTime` reads a request's JetStream store time back by its
   * PubAck sequence: requests that look inside a window by their PubAck time are judged by their store time.
   */
  async evaluate(
    requests: ForegroundRequest[],
    now: number,
    storeTime: (seq: number) => Promise<number | undefined> = async () => undefined,
    audit?: JobAudit,
  ) {
    const tol = this.config.windowToleranceMs
    const byModel = new Map<string, ForegroundRequest[]>()
    for (const r of requests) {
      if (r.background) continue
      const list = byModel.get(r.model) ?? []
      list.push(r)
      byModel.set(r.model, list)
    }
    for (const list of byModel.values()) list.sort((a, b) => a.ackAt - b.ackAt)
    const jobs = this.workloadJobs()

    const inWindow: Record<string, unknown>[] = []
    const raced: Record<string, unknown>[] = []
    let timedByAudit = 0
    /** How late the watch delivered a Job's ADDED after the apiserver completed its POST, at most. */
    let watchLagMsMax = 0
    for (const { job, backfill, model } of jobs) {
      const w = backfill.idleForMs
      const key = `${job.namespace}/${job.name}`
      // The apiserver's record when there is one: the POST's arrival, before the write (a bound that cannot
      // over-count), whatever the watch's delay. Otherwise the watch's ADDED, or the second when it lagged.
      const audited = audit ? createOf(audit, key, job.createdSecond) : undefined
      if (audited) {
        timedByAudit++
        watchLagMsMax = Math.max(watchLagMsMax, Math.round(job.addedAt - audited.completedAt))
      }
      const lagged = !audited && job.addedAt - job.createdSecond > 1000 + tol
      const created = audited ? audited.receivedAt : lagged ? job.createdSecond : job.addedAt
      const edge = audited ? this.config.auditedWindowToleranceMs : tol
      const [from, to] = lagged
        ? [job.createdSecond + 1000 - w + tol, job.createdSecond - tol]
        : [created - w + edge, created - edge]
      // Store time ≤ PubAck time: a request acked up to 1 s after `to` may still have been stored before it.
      const candidates = (byModel.get(model) ?? []).filter((r) => r.ackAt > from && r.ackAt < to + 1000)
      const hits: { sentAt: number; ackAt: number; storedAt?: number }[] = []
      for (const r of candidates) {
        const storedAt = await storeTime(r.seq).catch(() => undefined)
        const s = storedAt ?? r.ackAt
        if (s > from && s < to) hits.push({ sentAt: r.sentAt, ackAt: r.ackAt, storedAt })
      }
      // Raced, not ignored: deleted (as admit's re-check after the create does) within the bound of the earliest
      // request — which also bounds how long before the Job it can have been stored (the Job ends after it is seen).
      // Only when the creation is known to the moment: from the apiserver's audit, or a watch that did not lag.
      const deletion = audited && audit ? deleteAfter(audit, key, audited) : undefined
      const end = deletion
        ? deletion.completedAt
        : job.endHow === 'deleting' || job.endHow === 'deleted'
          ? job.endAt
          : undefined
      const first = hits[0]
      // The admit that POSTed it killed before it could read the newest request after the POST (the POST in flight
      // when its sender died, or answered just before): deleting the Job is then demand → cancel's, within a lost
      // cancel's deadline, as the simulation bounds a crash after the POST — not the second admit's own re-check has.
      const admitKilled =
        audited !== undefined &&
        this.faults.some(
          (f) =>
            f.kind === 'kill' &&
            f.fn === 'admit' &&
            f.start >= audited.receivedAt - ADMIT_KILLED_BEFORE_POST_MS &&
            f.start <= audited.completedAt + this.config.raceDeleteBoundMs,
        )
      const timing = audited
        ? {
            timedBy: 'apiserver audit',
            postMs: Math.round(audited.completedAt - audited.receivedAt),
            watchLagMs: Math.round(job.addedAt - audited.completedAt),
            createdBy: audited.user,
            deletedBy: deletion?.user,
          }
        : { timedBy: lagged ? 'creationTimestamp (watch lagged)' : 'watch' }
      const firstAt = first ? (first.storedAt ?? first.ackAt) : 0
      const raceBound = admitKilled ? this.deadline(firstAt) - firstAt : this.config.raceDeleteBoundMs
      if (first && !lagged && end !== undefined && end - firstAt <= raceBound) {
        raced.push({
          job: `${job.namespace}/${job.name}`,
          model,
          createdAt: new Date(created).toISOString(),
          requestsInWindow: hits.length,
          firstRequestStoredMsBeforeCreation: Math.round(created - firstAt),
          deletedMsAfterRequest: Math.round(end - firstAt),
          liveMs: Math.round(end - created),
          ...(admitKilled ? { admitKilledAfterPost: true } : {}),
          ...timing,
        })
        continue
      }
      if (hits.length > 0) {
        const last = hits.at(-1) as (typeof hits)[number]
        inWindow.push({
          job: `${job.namespace}/${job.name}`,
          model,
          idleForMs: w,
          createdAt: new Date(created).toISOString(),
          watchLagged: lagged,
          requestsInWindow: hits.length,
          lastRequestStoredMsBeforeCreation: Math.round(created - (last.storedAt ?? last.ackAt)),
          byStoreTime: last.storedAt !== undefined,
          // ≥ idleFor: inside the window only by the store time, not by the event's own time (the "clocks" item).
          lastRequestSentMsBeforeCreation: Math.round(created - last.sentAt),
          // Stored before the creation's second began: inside the window whatever the watch's delay was.
          certain: audited ? true : (last.storedAt ?? last.ackAt) < job.createdSecond,
          deletedMsAfterRequest: end === undefined ? null : Math.round(end - (last.storedAt ?? last.ackAt)),
          // The processes killed from 2 s before the creation until the Job ended: which function, ms after creation.
          killsAround: this.faults
            .filter((f) => f.kind === 'kill' && f.start >= created - 2_000 && f.start <= (end ?? now))
            .map((f) => `${f.fn} ${Math.round(f.start - created)} ms`),
          ...timing,
        })
      }
    }

    const twoLive: Record<string, unknown>[] = []
    for (let i = 0; i < jobs.length; i++) {
      for (let k = i + 1; k < jobs.length; k++) {
        const a = jobs[i] as (typeof jobs)[number]
        const b = jobs[k] as (typeof jobs)[number]
        const sameModel = a.model === b.model
        if (!sameModel && a.node !== b.node) continue
        const overlap =
          a.job.addedSeq < (b.job.endSeq ?? Number.POSITIVE_INFINITY) &&
          b.job.addedSeq < (a.job.endSeq ?? Number.POSITIVE_INFINITY)
        if (overlap)
          twoLive.push({
            on: sameModel ? `model ${a.model}` : `node ${a.node}`,
            jobs: [`${a.job.namespace}/${a.job.name}`, `${b.job.namespace}/${b.job.name}`],
            at: new Date(Math.max(a.job.addedAt, b.job.addedAt)).toISOString(),
          })
      }
    }

    const foreignDeleted = [...this.jobs.values()]
      .filter((j) => this.foreign.has(`${j.namespace}/${j.name}`) && j.endHow && j.endHow !== 'Complete')
      .map((j) => ({ job: `${j.namespace}/${j.name}`, how: j.endHow, at: new Date(j.endAt ?? 0).toISOString() }))

    const lost: Record<string, unknown>[] = []
    for (const { job, model } of jobs) {
      const first = (byModel.get(model) ?? []).find(
        (r) => r.sentAt > job.addedAt && r.ackAt < (job.endAt ?? Number.POSITIVE_INFINITY),
      )
      if (!first) continue
      const deadline = this.deadline(first.ackAt)
      const end = job.endAt ?? now
      if (end > deadline && (job.endAt !== undefined || now > deadline)) {
        lost.push({
          job: `${job.namespace}/${job.name}`,
          model,
          requestAckedAt: new Date(first.ackAt).toISOString(),
          deadline: new Date(deadline).toISOString(),
          endedMsAfterRequest: job.endAt === undefined ? null : job.endAt - first.ackAt,
          endedHow: job.endHow ?? 'still live',
        })
      }
    }
    return {
      inWindow,
      raced,
      twoLive,
      foreignDeleted,
      lost,
      blind: this.runningWhileBlind(now),
      timedByAudit,
      watchLagMsMax,
    }
  }

  /** Jobs still live past the fail-safe's bound into a NATS outage (the rule above). */
  runningWhileBlind(now: number): Record<string, unknown>[] {
    const out: Record<string, unknown>[] = []
    for (const f of this.faults) {
      if (f.kind !== 'nats-restart') continue
      // A cancel process killed during the outage cannot know, once restarted, how long NATS has been away: its
      // bound runs from its own start (the latest such kill's restart window) when that is later than the outage's.
      const from = this.faults
        .filter((k) => k.kind === 'kill' && k.fn === 'cancel' && k.start < f.end && k.end > f.start)
        .reduce((latest, k) => Math.max(latest, k.end), f.start)
      const by = from + this.config.failSafeBoundMs + this.config.failSafeSlackMs
      if (f.end < by) continue
      for (const { job } of this.workloadJobs()) {
        if (job.addedAt >= by || (job.endAt ?? now) <= by) continue
        out.push({
          job: `${job.namespace}/${job.name}`,
          outageStartedAt: new Date(f.start).toISOString(),
          endedMsAfterOutageStart: job.endAt === undefined ? null : Math.round(job.endAt - f.start),
          endedHow: job.endHow ?? 'still live',
        })
      }
    }
    return out
  }

  /**
   * Preemptions: for each workload Job, the first non-background request for its model sent while it was live, and
   * how long after that request's PubAck the Job stopped being live (undefined: it never did).
   */
  preemptions(requests: ForegroundRequest[]): { job: string; ackAt: number; latencyMs?: number }[] {
    const byModel = new Map<string, ForegroundRequest[]>()
    for (const r of requests) {
      if (r.background) continue
      const list = byModel.get(r.model) ?? []
      list.push(r)
      byModel.set(r.model, list)
    }
    for (const list of byModel.values()) list.sort((a, b) => a.ackAt - b.ackAt)
    const out: { job: string; ackAt: number; latencyMs?: number }[] = []
    for (const { job, model } of this.workloadJobs()) {
      const first = (byModel.get(model) ?? []).find(
        (r) => r.sentAt > job.addedAt && r.ackAt < (job.endAt ?? Number.POSITIVE_INFINITY),
      )
      if (!first) continue
      out.push({
        job: `${job.namespace}/${job.name}`,
        ackAt: first.ackAt,
        latencyMs: job.endAt === undefined ? undefined : Math.max(0, job.endAt - first.ackAt),
      })
    }
    return out
  }

  /**
   * Settled: the status is consistent with the world. A declared backfill: Starting/Running with a live Job of its
   * own; WaitingForIdle while its window (last request + idleFor + 3 s) still runs or another live attempt holds
   * its model or node; Blocked/ConcurrentBackfill while another live attempt holds its model or node; Cancelling
   * while its Job is marked for deletion but not yet gone (a Job being deleted also holds its model and node for the
   * others); nothing else (no status, other Blocked reasons, Succeeded/Failed — no Job of this workload ever
   * finishes).
   * A hostile-ref backfill: Blocked with a reason. Returns the backfills that are not settled, with why.
   */
  async settledProblems(requests: ForegroundRequest[], now: number): Promise<Record<string, string>> {
    const custom = this.kc.makeApiClient(CustomObjectsApi)
    const statuses = new Map<string, ModelBackfill>()
    for (const namespace of new Set(this.workload.backfills.map((b) => b.namespace))) {
      const list = (await custom.listNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: 'modelbackfills',
      })) as { items: ModelBackfill[] }
      for (const item of list.items) statuses.set(`${namespace}/${item.metadata.name}`, item)
    }
    const lastRequest = new Map<string, number>()
    for (const r of requests)
      if (!r.background) lastRequest.set(r.model, Math.max(lastRequest.get(r.model) ?? 0, r.ackAt))
    const live = this.workloadJobs().filter((j) => j.job.endAt === undefined)
    // Jobs marked for deletion but still there: with foreground propagation the garbage collector removes them
    // once their pods are gone (after an apiserver outage it first has to catch up). Their pods may still run, so
    // a Cancelling status and claims held on their model and node are still right until they are gone.
    const going = this.workloadJobs().filter((j) => j.job.endHow === 'deleting' && !j.job.gone)
    const problems: Record<string, string> = {}
    for (const b of this.workload.backfills) {
      const key = `${b.namespace}/${b.name}`
      const status = statuses.get(key)?.status
      const phase = status?.phase ? `${status.phase}/${status.reason ?? ''}` : undefined
      if (!phase) {
        problems[key] = 'no status'
        continue
      }
      if (b.hostile) {
        if (status?.phase !== 'Blocked') problems[key] = `hostile ref ${JSON.stringify(b.model)} is ${phase}`
        continue
      }
      const model = modelKey(b.namespace, b.model)
      const own = live.filter((j) => j.job.owner === key)
      const onSame = (j: (typeof live)[number]) => j.job.owner !== key && (j.model === model || j.node === b.node)
      const others = [...live, ...going].filter(onSame)
      const ownGoing = going.filter((j) => j.job.owner === key)
      const windowRuns = (lastRequest.get(model) ?? 0) + b.idleForMs + 3000 > now
      const ok =
        status?.phase === 'Starting' || status?.phase === 'Running'
          ? own.length > 0
          : status?.phase === 'WaitingForIdle'
            ? own.length === 0 && (windowRuns || others.length > 0)
            : status?.phase === 'Blocked' && status.reason === 'ConcurrentBackfill'
              ? own.length === 0 && others.length > 0
              : status?.phase === 'Cancelling'
                ? own.length === 0 && ownGoing.length > 0
                : false
      if (!ok)
        problems[key] =
          `${phase} with ${own.length} live Job(s) of its own, ${others.length} other live attempt(s) on its model/node, ` +
          `last request ${lastRequest.has(model) ? `${Math.round((now - (lastRequest.get(model) ?? 0)) / 1000)} s ago` : 'never'}`
    }
    return problems
  }
}
