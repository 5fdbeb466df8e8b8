// The resync sweep: convergence that does not rely on any single event being delivered. A repeating JetStream
// schedule fires `ai.flexinfer.resync.due` every RESYNC_MS; lifecycle then looks at the world once — ModelBackfills,
// backfill Jobs and Models from its watched copies (./caches.ts; no apiserver request), their states and the stored
// timer schedules from NATS — asks the pure needsResync() (pkg/core/resync.ts) about each, and publishes one
// `ai.flexinfer.backfill.resync` per backfill that may be wrong and has none queued yet (./pending.ts). Each of those
// is reconciled on its own (its own retries, its own dead letter), so one odd object never holds up the others.

import { BACKFILL_SCHEDULES_FILTER, STREAM_EVENTS, STREAM_TIMERS } from '../../events/catalog.js'
import { timerHeld } from '../../pkg/admission/timer-held.js'
import { backfillKey } from '../../pkg/core/names.js'
import { needsResync, RESYNC_MS, type ResyncReason } from '../../pkg/core/resync.js'
import type { BackfillState } from '../../pkg/core/state.js'
import { type JobView, jobView, type ModelView, modelView } from '../../pkg/core/world.js'
import { kvSnapshot } from '../../pkg/jetstream/kv-mirror.js'
import { consumerName, instanceName } from '../../pkg/jetstream/names.js'
import { PLURALS } from '../../pkg/kube/resources.js'
import { readState } from '../../pkg/reconcile/read-kv.js'
import type { Deps } from '../../pkg/transport/function.js'
import type { LifecycleCaches } from './caches.js'
import type { PendingResyncs } from './pending.js'

/**
 * Arms the repeating resync schedule unless it is stored already with this period (lifecycle start, provision). The
 * period is RESYNC_MS (cmd/manager/config.ts: milliseconds, at least 1000; 0 turns the schedule off, not recommended).
 */
export async function ensureResyncSchedule(deps: Pick<Deps, 'bus'> & { log?: Deps['log'] }, intervalMs = RESYNC_MS) {
  if (intervalMs === 0) return false
  const armed = await deps.bus.armResync(intervalMs)
  if (armed) deps.log?.info({ intervalMs }, 'resync schedule armed')
  return armed
}

export interface SweepResult {
  backfills: number
  picked: { namespace: string; backfill: string; reason: ResyncReason }[]
  /** Would have been picked, but an earlier resync of theirs is still queued (or the pending set is full). */
  held: number
  /** Listed TimerNotStored, but held after all when checked on their own (pkg/admission/timer-held.ts). */
  timersHeld: number
  failed: number
  /** Where the states came from: the process's mirror or the bucket itself (readStates). */
  statesFrom: 'mirror' | 'bucket'
}

/** Publishes at most this many resync events at once (each waits for its JetStream ack). */
const PUBLISH_CONCURRENCY = 64
/** Reading every state must end well inside the consumer's ack wait (30 s). */
const STATE_READ_TIMEOUT_MS = 20_000

export interface SweepOptions {
  /** lifecycle's watched copies: the sweep then sends the apiserver nothing (without them: three lists). */
  caches?: LifecycleCaches
  /** Backfills whose earlier resync is still queued: not published again (./pending.ts). */
  pending?: PendingResyncs
}

export async function sweep(deps: Deps, opts: SweepOptions = {}): Promise<SweepResult> {
  const startedMs = performance.now()
  const now = deps.now()
  const scopes = deps.namespaces ?? [undefined]
  const { caches, pending } = opts
  // The states and schedules are read after the objects: a backfill created meanwhile is picked (NoState) once
  // more rather than missed, and a state committed meanwhile is seen with its newer timer.
  const [backfills, jobs, models] = caches
    ? [
        caches.backfills.list(),
        caches.admission.jobs.list().map(jobView),
        caches.admission.models.list().map(modelView),
      ]
    : await Promise.all([
        Promise.all(scopes.map((ns) => deps.kube.listBackfills(ns))).then((l) => l.flat()),
        Promise.all(scopes.map((ns) => listBackfillJobs(deps, ns))).then((l) => l.flat()),
        Promise.all(scopes.map((ns) => listModels(deps, ns))).then((l) => l.flat()),
      ])
  const [{ states, from: statesFrom }, stored] = await Promise.all([
    readStates(deps, scopes),
    storedTimers(deps, scopes),
  ])
  const jobByName = new Map(jobs.map((j) => [`${j.namespace}/${j.name}`, j]))
  const modelByName = new Map(models.map((m) => [`${m.namespace}/${m.name}`, m]))

  // What lifecycle's consumer has acknowledged so far: published resyncs above it are still queued (./pending.ts).
  if (pending) {
    const floor = await ackFloor(deps)
    if (floor !== undefined) pending.floor(floor)
  }
  const picked: SweepResult['picked'] = []
  /** TimerNotStored by the listing: confirmed one by one below before anything is published. */
  const unsure: (SweepResult['picked'][number] & { timerAt: string })[] = []
  let held = 0
  const pick = (p: SweepResult['picked'][number]) => {
    const key = backfillKey(p.namespace, p.backfill)
    if (pending?.has(key) || (pending && !pending.add(key))) held++
    else picked.push(p)
  }
  for (const b of backfills) {
    const namespace = b.metadata?.namespace
    const name = b.metadata?.name
    try {
      const key = backfillKey(namespace, name)
      const state = states.get(key) ?? null
      const reason = needsResync(
        {
          backfill: b,
          state,
          job: state?.jobName ? (jobByName.get(`${namespace}/${state.jobName}`) ?? null) : null,
          model: modelByName.get(`${namespace}/${b.spec?.modelRef}`) ?? null,
          timerStored: stored.has(key),
        },
        now,
      )
      if (reason === 'TimerNotStored' && state?.timerAt)
        unsure.push({ namespace, backfill: name, reason, timerAt: state.timerAt })
      else if (reason) pick({ namespace, backfill: name, reason })
    } catch (err) {
      // An object the sweep cannot even look at (a malformed one): it is re-decided anyway, and never stops it.
      deps.log.warn({ namespace, backfill: name, err }, 'resync: cannot assess this backfill; re-deciding it')
      pick({ namespace, backfill: name, reason: 'NoState' })
    }
  }

  const timersHeld = await confirmNotStored(deps, unsure, pick)

  let failed = 0
  let next = 0
  const publishOne = async () => {
    while (next < picked.length) {
      const p = picked[next++] as SweepResult['picked'][number]
      try {
        const ack = await deps.bus.publish('ai.flexinfer.backfill.resync', p)
        pending?.published(backfillKey(p.namespace, p.backfill), ack.seq)
      } catch (err) {
        failed++
        pending?.done(backfillKey(p.namespace, p.backfill))
        deps.log.warn({ namespace: p.namespace, backfill: p.backfill, err }, 'resync: publish failed; next sweep')
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(PUBLISH_CONCURRENCY, picked.length) }, publishOne))
  const byReason: Partial<Record<ResyncReason, number>> = {}
  for (const p of picked) byReason[p.reason] = (byReason[p.reason] ?? 0) + 1
  // Every sweep, even one that picks nothing: `ms` (lists, reads and publishes) is what dev/bench/scale measures.
  const ms = Math.round(performance.now() - startedMs)
  deps.log.info(
    {
      backfills: backfills.length,
      picked: picked.length,
      held,
      timersHeld,
      byReason,
      failed,
      ms,
      cached: Boolean(caches),
      statesFrom,
    },
    'resync sweep',
  )
  // Nothing published at all while there was something to publish: NATS is in trouble, let the sweep be retried.
  if (failed && failed === picked.length) throw new Error(`resync: none of ${failed} resync events could be published`)
  return { backfills: backfills.length, picked, held, timersHeld, failed, statesFrom }
}

/**
 * The stream sequence below which lifecycle's consumer on FLEXINFER_EVENTS has acknowledged everything, or
 * undefined when it cannot be read (the pending set then falls back to its ttl).
 */
async function ackFloor(deps: Deps): Promise<number | undefined> {
  try {
    const durable = consumerName(instanceName('lifecycle', deps.instance), STREAM_EVENTS)
    return (await deps.bus.jsm.consumers.info(STREAM_EVENTS, durable)).ack_floor.stream_seq
  } catch (err) {
    deps.log.debug({ err }, "resync: lifecycle's consumer info unreadable; pending resyncs expire by their ttl")
    return undefined
  }
}

/** Timer checks at once when confirming TimerNotStored (one stream message read each, two when it fired). */
const CONFIRM_CONCURRENCY = 16

/**
 * The listing of stored schedules is one instant, the states are read over seconds after it (2–8 s at 10,000), and
 * admit arms a re-armed window's timer just after committing its state: 90–229 windows per sweep were listed
 * TimerNotStored at 1,000 windows while their schedules were stored, or their timers had fired
 * and waited for admit (pkg/admission/timer-held.ts). Each is checked once more now; only those still not held are picked.
 * A check that fails picks it (a spare resync costs one reconcile; a missed one a lost timer). Returns how many
 * were held after all.
 */
async function confirmNotStored(
  deps: Deps,
  unsure: (SweepResult['picked'][number] & { timerAt: string })[],
  pick: (p: SweepResult['picked'][number]) => void,
): Promise<number> {
  let heldAfterAll = 0
  let next = 0
  const worker = async () => {
    while (next < unsure.length) {
      const { timerAt, ...p } = unsure[next++] as (typeof unsure)[number]
      let isHeld = false
      try {
        isHeld = await timerHeld(deps.bus, p.namespace, p.backfill, timerAt)
      } catch (err) {
        deps.log.warn({ namespace: p.namespace, backfill: p.backfill, err }, 'resync: timer check failed; re-deciding')
      }
      if (isHeld) heldAfterAll++
      else pick(p)
    }
  }
  await Promise.all(Array.from({ length: Math.min(CONFIRM_CONCURRENCY, unsure.length) }, worker))
  return heldAfterAll
}

/** Backfill Jobs (by label) in one list per scope. */
async function listBackfillJobs(deps: Deps, namespace?: string): Promise<JobView[]> {
  return (await deps.kube.listBackfillJobs(namespace ? [namespace] : undefined)).map(jobView)
}

async function listModels(deps: Deps, namespace?: string): Promise<ModelView[]> {
  return (await deps.kube.listCustom(PLURALS.models, namespace)).map(modelView)
}

/**
 * A sweep reads the bucket itself every this many sweeps (5 min at the default period) even with the process's
 * mirror: a republished change the mirror missed without a reconnect (which reloads it) is then seen within that,
 * so convergence never rests on one republished message.
 */
export const FULL_STATE_READ_EVERY = 10
const sweepsSinceFullRead = new WeakMap<object, number>()

/**
 * The backfill states in scope. From the process's mirror of the bucket when it has one (cmd/manager/runner.ts lends
 * the metrics exporter's: with many backfills, the direct gets below would make every sweep cost CPU in proportion to
 * them, at rest); otherwise, and every FULL_STATE_READ_EVERY sweeps, read without a consumer
 * (functions may create none: deploy/nats/README.md): one stream info per scope lists the keys, then bounded direct gets
 * (pkg/jetstream/kv-mirror.ts kvSnapshot).
 */
async function readStates(
  deps: Deps,
  scopes: (string | undefined)[],
): Promise<{ states: Map<string, BackfillState>; from: 'mirror' | 'bucket' }> {
  const states = new Map<string, BackfillState>()
  const mirror = deps.backfillStates
  if (mirror) {
    const since = (sweepsSinceFullRead.get(mirror) ?? 0) + 1
    if (since < FULL_STATE_READ_EVERY) {
      sweepsSinceFullRead.set(mirror, since)
      const prefixes = scopes.map((ns) => (ns ? `${ns}.` : ''))
      for (const [key, state] of mirror) if (prefixes.some((p) => key.startsWith(p))) states.set(key, state)
      return { states, from: 'mirror' }
    }
    sweepsSinceFullRead.set(mirror, 0)
  }
  const filters = scopes.map((ns) => (ns ? `${ns}.>` : '>'))
  const read = kvSnapshot(deps.bus.kv.backfills, filters)
  let timer: NodeJS.Timeout | undefined
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`resync: reading the backfill states took longer than ${STATE_READ_TIMEOUT_MS} ms`)),
      STATE_READ_TIMEOUT_MS,
    )
  })
  try {
    const { entries } = await Promise.race([read, deadline])
    // An unreadable state is left out: the sweep then sees no state (NoState) and the decision takes it over.
    for (const e of entries) {
      const state = readState(deps.log, e)
      if (state) states.set(e.key, state)
    }
  } finally {
    clearTimeout(timer)
  }
  return { states, from: 'bucket' }
}

/**
 * Keys (`<namespace>.<backfill>`) of the backfills whose timer schedule is stored: one stream info per scope. A
 * disarmed timer's tombstone is listed too until its 1 s TTL ends; only backfills whose state was deleted with it
 * (or that re-armed, replacing it) have one, so it never hides a timer that should be stored.
 */
async function storedTimers(deps: Deps, scopes: (string | undefined)[]): Promise<Set<string>> {
  const prefix = 'flexinfer.schedules.'
  const stored = new Set<string>()
  for (const ns of scopes) {
    const filter = ns ? `${prefix}${ns}.*` : BACKFILL_SCHEDULES_FILTER
    const info = await deps.bus.jsm.streams.info(STREAM_TIMERS, { subjects_filter: filter })
    for (const subject of Object.keys(info.state.subjects ?? {})) stored.add(subject.slice(prefix.length))
  }
  return stored
}
