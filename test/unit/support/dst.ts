// Deterministic simulation of admission against preemption. A seeded scheduler runs the real handlers of admit
// (functions/admit: its admission slots, its bookkeeping lane) and cancel (functions/cancel: the refusal checks, the
// DeleteBatcher and its lanes, whenReachable, the wait for a Job still being admitted) and lifecycle
// (functions/lifecycle: the backfill and Job events it is sent, each through the real reconcile() — the admission
// protocol of pkg/admission/, decide(), apply()), each as one process, and the real Demand
// (functions/demand: idle writes, claim reads, cancels) as two replicas sharing one consumer, over the in-memory ports
// (test/unit/support/memory-ports.ts, functions/demand/ports.ts), an in-memory apiserver behind the typed Kubernetes
// port (support/kube-fake.ts) and an in-memory bus. Every timer a handler waits on runs on the virtual clock (Deps'
// `timers`). Every call to a port waits at a gate, where the scheduler picks which waiting call runs next, how much
// virtual time it takes, whether it fails (before or after taking effect) and whether its caller crashes there (it
// never answers; the event is redelivered; a crash in admit, cancel, lifecycle or demand ends that process and
// everything it was handling, and a fresh one takes its place). Foreground requests, on either subject, come at any
// step; events are redelivered and duplicated (two tries of one attempt). Which actor (one delivery of one event)
// makes a call is the async context it runs in (AsyncLocalStorage): the handlers' own lanes and waits hand work on
// between promises.
//
// The oracle does not trust the functions' state: it reads the world (the Jobs, the requests as stored, the claims
// bucket) and checks
//   - no Job created more than LATE_MS after a foreground request for its model was stored inside its window, unless
//     deleted within RACED_MS (a request stored while its POST was in flight),
//   - one live attempt per model and per node,
//   - no live Job without its claims,
//   - no lost cancel: a Job live when a foreground request for its model was stored is deleting CANCEL_MS later,
//   - convergence: once faults and requests stop, every live Job is its backfill's current attempt, holding its claims.
// A failing seed replays exactly (nothing here reads the real clock or Math.random) and prints its schedule.
//
// Fast by construction: virtual time only (no real timer), the schedule recorded only when asked for (a search runs
// without it and replays a failing seed with it), the ports hand out immutable objects instead of copies, and the
// oracle looks again only when the world moved. Every fault it injects is counted (SimStats), so a test can show each
// kind is really generated.
//
// The same simulation runs the fault-free property tests (`driven`: support/dst-world.ts, support/dst-driven.ts):
// world events instead of random steps, each run until nothing is in flight, every decision told to a per-decision
// oracle (support/dst-decisions.ts) as well.
import { AsyncLocalStorage } from 'node:async_hooks'
import type { V1Job } from '@kubernetes/client-node'
import type { InboundEvent } from '../../../events/codec.js'
import { admitFunction } from '../../../functions/admit/index.js'
import { cancelFunction } from '../../../functions/cancel/index.js'
import { Demand } from '../../../functions/demand/index.js'
import type { DemandPorts } from '../../../functions/demand/ports.js'
import { lifecycleFunction } from '../../../functions/lifecycle/index.js'
import { claimKeys } from '../../../pkg/admission/claims.js'
import type { AdmissionPorts, Entry } from '../../../pkg/admission/ports.js'
import { checkSpec, FINALIZER, type ModelBackfill, type ModelBackfillStatus } from '../../../pkg/core/api.js'
import { ANNOTATION_MODEL, ANNOTATION_NODE, backfillKey } from '../../../pkg/core/names.js'
import { type BackfillState, type Claim, parseClaim, parseEntry } from '../../../pkg/core/state.js'
import type { Bus } from '../../../pkg/jetstream/bus.js'
import { isCasConflict } from '../../../pkg/jetstream/errors.js'
import { PLURALS } from '../../../pkg/kube/resources.js'
import type { Timers } from '../../../pkg/lib/timers.js'
import type { AdmissionDeps } from '../../../pkg/reconcile/deps.js'
import { readState } from '../../../pkg/reconcile/read-kv.js'
import type { EventFunction } from '../../../pkg/transport/function.js'
import {
  addStats,
  bump,
  DEFAULT_FAULTS,
  emptyStats,
  type Faults,
  portOf,
  type Reverts,
  rng,
  type SimOptions,
  type SimResult,
  type SimStats,
} from './dst-options.js'
import { type ModelSpec, pairs, type rawLease, rawModel, type rawSession, type WorldSpec } from './dst-world-spec.js'
import { fakeKube } from './kube-fake.js'
import {
  deepFreeze,
  type Gate,
  MemoryJobs,
  MemoryKv,
  MemoryRequests,
  memoryPorts,
  SimulatedFault,
  type StoredJob,
  type StoredRequest,
  type Verdict,
} from './memory-ports.js'
import { type SimCopy, simCaches } from './sim-caches.js'
import { aCronJob, silentLogger } from './world.js'

export const LATE_MS = 100
export const RACED_MS = 1_000
export const CANCEL_MS = 10_000
export const CLAIMLESS_MS = 2_000
const SLOW_CALL_MS = 300
export const NS = 'sim'
const ACK_WAIT_MS = 2_000
/** The annotation naming the POST that created a Job (the oracle's, read by nothing else). */
const SIM_POST = 'sim.flexinfer.ai/post'
/** A watch that lost an event restarts and lists again within one to two of these. */
const RELIST_MS = 1_000
const T0 = Date.parse('2026-06-01T00:00:00.000Z')

class Violation extends Error {}

const parsedStates = new WeakMap<object, BackfillState | null>()

/**
 * One for every simulation in the process: each AsyncLocalStorage enabled stays in a list Node walks at every promise
 * made (Node 20), so one per simulation would slow every later one down.
 */
const actorContext = new AsyncLocalStorage<Actor>()

interface Waiting {
  op: string
  detail?: () => string
  actor: Actor
  /** Which of its actor's calls this is (1-based). */
  index: number
  issuedAt: number
  /** When it is answered: its latency was drawn when it was made. */
  due: number
  seq: number
  resolve: (v: Verdict) => void
}

interface DemandProcess {
  actor: Actor
  demand: Demand
  /** Requests handed to it and not yet acknowledged: redelivered to the next process when it crashes. */
  pending: Set<StoredRequest>
}

interface Timer {
  at: number
  seq: number
  label: string
  fire: () => void
}

interface Actor {
  name: string
  crashed: boolean
  done?: boolean
  /** Port calls made so far. */
  calls: number
  /** When a fault was last injected into one of its calls (a failure or its crash). */
  faultedAt?: number
  /** The delivery to repeat when this one crashes or fails (at-least-once). */
  redeliver?: () => void
  /** The function process handling it (admit, cancel): a crash of this actor ends that process. */
  process?: FnProcess
  /** A foreground cancel, and whether it found no Job (and so waits for the one being admitted). */
  foregroundCancel?: boolean
  waited?: boolean
}

/**
 * One process of a function (admit, cancel, lifecycle): its real handler, one instance until an actor of it crashes —
 * its lanes, batches and memory go with it, every delivery it was handling is redelivered, and a fresh instance takes
 * over.
 */
type FnName = 'admit' | 'cancel' | 'lifecycle'

interface FnProcess {
  name: FnName
  make: () => EventFunction
  fn: EventFunction
  deps: AdmissionDeps
  started: Promise<void>
  /** Its deliveries not done yet. */
  actors: Set<Actor>
  dead: boolean
}

/**
 * Two Models on one node, each with its backfill: a short window, and one longer than a cancel's wait for a Job still
 * being admitted (ADMISSION_WAIT_MS).
 */
export const DEFAULT_WORLD: WorldSpec = {
  backfills: [
    { name: 'bf-a', model: 'model-a', idleForMs: 2_000 },
    { name: 'bf-b', model: 'model-b', idleForMs: 16_000 },
  ],
  models: [
    { name: 'model-a', node: 'node-0', ready: true },
    { name: 'model-b', node: 'node-0', ready: true },
  ],
}
const DEMAND_REPLICAS = 2

export class Simulation {
  readonly random: ReturnType<typeof rng>
  /** The draws of the faults aimed at one call (`aimed`): apart, so a schedule they do not hit is unchanged. */
  private readonly aim: ReturnType<typeof rng>
  /** A demand replica and an idle key whose compare-and-set it lost, until its claim read after it. */
  private readonly conflicted = new Set<string>()
  now = T0
  private readonly waiting: Waiting[] = []
  private readonly timers: Timer[] = []
  private timerSeq = 0
  /** The schedule as recorded (formatted only when read): virtual time and a line, or what builds it. */
  private readonly records: [number, string | (() => string)][] = []
  private readonly trace: boolean
  private steps = 0
  private readonly faults: Faults
  private faultsOn: boolean
  readonly world: WorldSpec
  readonly driven: boolean
  readonly stats: SimStats = emptyStats()
  private readonly reverts: Reverts
  /** Job name → the tries (actors) that wrote its claims: two alive at once are interleaved tries. */
  private readonly claimWriters = new Map<string, Set<Actor>>()
  /** What the oracle last looked at: it looks again when the world moved or time passed a bound. */
  private seenWorld = -1

  // The world.
  readonly claims: MemoryKv
  readonly states: MemoryKv
  readonly idle: MemoryKv
  readonly requests: MemoryRequests
  readonly jobs: MemoryJobs
  protected readonly backfills = new Map<string, ModelBackfill>()
  protected readonly armed = new Map<string, { at: string; timer?: Timer }>()
  /** When each Job's POST was sent, and by whom: requests before it were the admission's to see. */
  private readonly posts = new Map<number, { sent: number; by?: Actor }>()
  /** And the idleFor of its backfill when it was created: the window a request must not have been stored in. */
  private readonly postOf = new WeakMap<StoredJob, { sent: number; by?: Actor; idleForMs: number }>()
  private demandAcked = new Set<number>()
  /**
   * The demand replicas, each the real Demand, one instance until it crashes (its memory goes with it). Each delivery
   * of a request goes to either (one durable consumer shared by the replicas), so a replica writes idle times over
   * one that another replica stored and acknowledged: the newer time it finds, it knows only from that write.
   */
  private readonly demands: DemandProcess[] = []
  /** The claims as a watch of the bucket has them (KvMirror on NATS): a little behind, and now and then stale. */
  private readonly watchedClaims = new Map<string, Claim>()
  /** msgIDs JetStream stored (its duplicate window outlives any schedule here). */
  private readonly msgIds = new Set<string>()
  /** Live Jobs without their claims: since when, and how long they may be (claimlessBound). */
  private readonly claimless = new Map<string, { since: number; bound: number }>()
  private actors = 0
  readonly deps: AdmissionDeps
  /**
   * The watched copies: admit's and lifecycle's when they decide on them (SimOptions.caches); cancel's Jobs always
   * (cancel finds the Job it deletes in its copy in production, whether its own or the one it shares with admit).
   */
  protected readonly copies: ReturnType<typeof simCaches>['copies']
  /** The admit and cancel processes. */
  private readonly processes: Record<FnName, FnProcess>
  private readonly template = deepFreeze(aCronJob('eval', 'uid-eval'))

  /** The Models as the apiserver has them (frozen; a change replaces one), and the world's sessions and leases. */
  protected readonly models = new Map<string, ReturnType<typeof rawModel>>()
  protected readonly modelSpecs = new Map<string, ModelSpec>()
  protected sessions: ReturnType<typeof rawSession>[] = []
  protected leases: ReturnType<typeof rawLease>[] = []

  constructor(readonly options: SimOptions) {
    this.world = options.world ?? DEFAULT_WORLD
    this.driven = options.driven ?? false
    this.faultsOn = !this.driven
    for (const m of this.world.models) {
      this.modelSpecs.set(m.name, m)
      this.models.set(m.name, deepFreeze(rawModel(NS, m)))
    }
    this.random = rng(options.seed)
    this.aim = rng(options.seed ^ 0x5bd1e995)
    this.faults = options.faults ?? DEFAULT_FAULTS
    this.trace = options.trace ?? false
    this.reverts = options.reverts ?? {}
    const clock = { now: () => this.now }
    // Every port call of every actor passes the gate of the actor running it (see `as`).
    const gate: Gate = (op, detail) => this.wait(op, detail)
    this.claims = new MemoryKv('claims', gate, options.atomicClaims ?? options.seed % 2 === 0)
    this.claims.onWrite = (key, entry) => this.claimWritten(key, entry)
    this.states = new MemoryKv('backfills', gate)
    this.idle = new MemoryKv('idle', gate)
    this.requests = new MemoryRequests(this.idle, clock, gate)
    if (this.reverts.documentedSubjectBlind) {
      const newest = this.requests.newest.bind(this.requests)
      this.requests.newest = (namespace, model) => newest(namespace, model)
    }
    this.jobs = new MemoryJobs(clock, gate, (j) => this.jobChanged(j))
    const jobs = this.jobs
    // Each POST is marked with its own id, so the Job it creates is bound to when that very POST was sent, and by
    // whom: a POST sent while a same-named Job was still being deleted creates a Job after it is gone.
    const recordPost = (job: V1Job): V1Job => {
      const id = this.posts.size + 1
      this.posts.set(id, { sent: this.now, by: this.current })
      const annotations = { ...job.metadata?.annotations, [SIM_POST]: String(id) }
      return { ...job, metadata: { ...job.metadata, annotations } }
    }
    const ports = memoryPorts({
      claims: this.claims,
      states: this.states,
      requests: this.requests,
      jobs: {
        create: (job) => jobs.create(recordPost(job)),
        delete: (ns, name, uid) => jobs.delete(ns, name, uid),
      },
      clock,
      log: silentLogger,
    })
    for (const b of this.world.backfills) this.backfills.set(b.name, deepFreeze(this.aBackfill(b)))
    // The handlers' timers: virtual time, fired by the scheduler in order with every other timer.
    const timers: Timers = {
      set: (fire, ms) => this.at(ms, `wait ${this.current?.name ?? ''}`, fire),
      clear: (timer) => {
        if (timer) this.cancelTimer(timer as Timer)
      },
    }
    this.deps = {
      kube: this.kube(),
      bus: this.bus() as unknown as Bus,
      log: silentLogger,
      now: () => this.now,
      timers,
      admission: ports,
      decided: options.decided,
    }
    const { copies, caches } = simCaches({
      backfills: [...this.backfills.values()],
      templates: [this.template],
      models: [...this.models.values()],
      backfill: (key) => this.backfills.get(key.slice(NS.length + 1)) ?? null,
      behind: () => this.stats.staleCopyReads++,
    })
    this.copies = copies
    if (options.caches !== false) this.deps.caches = caches
    this.processes = {
      admit: this.startProcess('admit', () => admitFunction(), this.deps),
      // No fail-safe: it probes demand's consumers, which this bus does not have (its own tests run it).
      cancel: this.startProcess('cancel', () => cancelFunction({}, { failSafe: false }), { ...this.deps, caches }),
      // No resync schedule: the sweep is not modelled, and no bound of the oracle counts on it.
      lifecycle: this.startProcess('lifecycle', () => lifecycleFunction(), { ...this.deps, settings: { resyncMs: 0 } }),
    }
    for (let i = 0; i < DEMAND_REPLICAS; i++) this.startDemand(i)
  }

  /** A fresh process of a function: its handler's instance, started on `deps`. */
  private startProcess(name: FnProcess['name'], make: () => EventFunction, deps: AdmissionDeps): FnProcess {
    const fn = make()
    return { name, make, fn, deps, started: fn.start?.(deps) ?? Promise.resolve(), actors: new Set(), dead: false }
  }

  /** `actor`'s process ends (it crashed): every delivery it was handling with it, each redelivered to the next one. */
  private crashProcess(actor: Actor) {
    const proc = actor.process
    if (!proc || proc.dead) return
    proc.dead = true
    this.log(() => `crash ${proc.name} process (${proc.actors.size} deliveries in flight)`)
    for (const a of proc.actors) {
      if (a.crashed || a.done) continue
      a.crashed = true
      a.faultedAt = this.now
      a.redeliver?.()
    }
    this.processes[proc.name] = this.startProcess(proc.name, proc.make, proc.deps)
  }

  // ---- the scheduler -----------------------------------------------------------------------------------------

  /** The actor whose code is running: the async context its delivery runs in (see `spawn`). */
  private readonly actorContext = actorContext
  private get current(): Actor | undefined {
    return this.actorContext.getStore()
  }

  private wait(op: string, detail?: () => string): Promise<Verdict> {
    const actor = this.current
    if (!actor) throw new Error(`port call outside an actor: ${op}`)
    const slow = this.faultsOn && this.random.chance(op === 'jobs.create' ? this.faults.postSlow : this.faults.slow)
    const due = this.driven ? this.now : this.now + (slow ? 100 + this.random.int(900) : 1 + this.random.int(20))
    const seq = this.timerSeq++
    actor.calls++
    if (op === 'claims.create' || op === 'claims.update' || op === 'claims.writeTogether')
      this.noteClaimWrite(actor, detail)
    return new Promise<Verdict>((resolve) =>
      this.waiting.push({ op, detail, actor, index: actor.calls, resolve, issuedAt: this.now, due, seq }),
    )
  }

  private at(delayMs: number, label: string, fire: () => void) {
    const t = { at: this.now + delayMs, seq: this.timerSeq++, label, fire }
    this.timers.push(t)
    return t
  }

  private cancelTimer(t: Timer) {
    const i = this.timers.indexOf(t)
    if (i >= 0) this.timers.splice(i, 1)
  }

  /** Two live tries of one attempt writing its claims (a timer's and a redelivery's, say): counted. */
  private noteClaimWrite(actor: Actor, detail: (() => string) | undefined) {
    const job = detail?.().split(' ')[1]?.split('@')[0]
    if (!job) return
    let writers = this.claimWriters.get(job)
    if (!writers) {
      writers = new Set()
      this.claimWriters.set(job, writers)
    }
    if (!writers.has(actor) && [...writers].some((w) => !w.crashed && !w.done)) this.stats.interleavedTries++
    writers.add(actor)
  }

  protected log(line: string | (() => string)) {
    if (this.trace) this.records.push([this.now, line])
  }

  /** The schedule so far, one line per event (empty unless traced). */
  get schedule(): string[] {
    return this.records.map(([t, l]) => `${String(t - T0).padStart(7)} ${typeof l === 'string' ? l : l()}`)
  }

  /** Runs `body` as a new actor (one delivery of one event); a failure redelivers it after the ack wait. */
  private spawn(name: string, body: () => Promise<void>, redeliver: boolean, init?: (a: Actor) => void) {
    const actor: Actor = { name: `${name}#${++this.actors}`, crashed: false, calls: 0 }
    init?.(actor)
    this.stats.actors++
    const again = () => this.spawn(name, body, redeliver)
    if (redeliver)
      actor.redeliver = () => {
        this.stats.redeliveries++
        this.at(ACK_WAIT_MS, `redeliver ${name}`, again)
      }
    this.log(() => `start ${actor.name}`)
    this.actorContext.run(actor, body).then(
      () => {
        actor.done = true
        this.log(() => `done  ${actor.name}`)
      },
      (err) => {
        actor.done = true
        if (err instanceof Violation) throw err
        // Only what the scheduler injected (or a compare-and-set lost once too often) may fail a delivery: anything
        // else — a TypeError, a change to an object a port handed out — is a bug the run must not swallow.
        if (!(err instanceof SimulatedFault) && !isCasConflict(err)) {
          this.unexpected ??= `${actor.name} failed: ${(err as Error)?.stack ?? err}`
        }
        this.log(() => `fail  ${actor.name}: ${String((err as Error).message ?? err).slice(0, 120)}`)
        actor.redeliver?.()
      },
    )
  }

  /** The first error no fault explains (reported as a violation at the next check). */
  private unexpected: string | undefined

  /**
   * Lets every runnable continuation run (they are all microtasks: nothing here waits on real I/O or timers). A tick
   * queued from this microtask runs once the microtask queue is empty — everything the step made runnable, however
   * deep — and only then resumes the run: the same order as a setImmediate, without a turn of the event loop (an
   * epoll_wait system call per step, ~20 % of the simulation's time).
   */
  protected async settle() {
    await new Promise<void>((r) => process.nextTick(r))
  }

  async run(): Promise<SimResult> {
    const steps = this.options.steps ?? 400
    // From a microtask on: a tick queued from a macrotask (a worker's message handler calling this directly) runs
    // before the microtasks, one queued from a microtask after them all, so `settle` would let the first deliveries
    // run further in the main thread than in a worker, and a seed would not replay where it was found.
    await Promise.resolve()
    try {
      // Each ModelBackfill as it is first seen (an added object: no state for it yet).
      for (const b of this.world.backfills) {
        this.deliverTo('lifecycle', `lifecycle(${b.name} changed)`, {
          ...this.envelope(),
          type: 'ai.flexinfer.backfill.changed',
          data: { namespace: NS, backfill: b.name, generation: 1, deleted: false },
        })
      }
      await this.settle()
      for (; this.steps < steps; this.steps++) {
        this.externalEvents()
        if (!this.next()) break
        await this.settle()
        this.check()
      }
      // The quiet tail: no faults, no requests; everything in flight and every timer within the horizon runs out.
      this.faultsOn = false
      this.log('--- quiet ---')
      const horizon = this.now + 5 * 60_000
      for (let i = 0; i < 20_000 && this.next(horizon); i++) {
        await this.settle()
        this.check()
      }
      this.check(true)
      this.checkConverged()
      return this.result(true)
    } catch (err) {
      if (!(err instanceof Violation)) throw err
      return this.result(false, err.message)
    }
  }

  private result(ok: boolean, violation?: string): SimResult {
    this.stats.jobsCreated = this.jobs.created.length
    this.stats.racedJobsDeleted = this.jobs.created.filter(
      (j) => j.deletedAt !== undefined && j.deletedAt - j.createdAt <= RACED_MS,
    ).length
    return {
      seed: this.options.seed,
      ok,
      violation,
      steps: this.steps,
      jobs: this.jobs.created.length,
      requests: this.requests.stored.length,
      schedule: this.schedule,
      stats: this.stats,
    }
  }

  /**
   * Runs whatever comes first in virtual time, a call's answer or a timer (up to `horizon`); false when nothing is
   * left. Calls run concurrently: each took its own latency when it was made.
   */
  protected next(horizon = Number.POSITIVE_INFINITY): boolean {
    let call: Waiting | undefined
    for (const w of this.waiting) if (!call || w.due < call.due || (w.due === call.due && w.seq < call.seq)) call = w
    const timer = this.nextTimer()
    // A call in flight is answered even past the horizon: only timers wait for time to move on.
    if (call && (!timer || call.due <= timer.at || timer.at > horizon)) {
      this.waiting.splice(this.waiting.indexOf(call), 1)
      this.now = Math.max(this.now, call.due)
      this.answer(call)
      return true
    }
    if (!timer || timer.at > horizon) return false
    this.cancelTimer(timer)
    this.now = Math.max(this.now, timer.at)
    this.log(() => `timer ${timer.label}`)
    timer.fire()
    return true
  }

  /** Answers a call: its verdict drawn, or its caller crashed there (never answered; the event redelivered). */
  private answer(w: Waiting) {
    // Its process is gone: nothing it was waiting for answers it any more.
    if (w.actor.crashed) return
    const f = this.faults
    const target = this.options.crashAt
    const targeted =
      target !== undefined &&
      this.stats.crashedAt === undefined &&
      w.actor.name.startsWith(`${target.role}(`) &&
      w.index === target.call
    if (targeted) this.stats.crashedAt = w.op
    if (targeted || (this.faultsOn && this.random.chance(f.crash))) {
      w.actor.crashed = true
      w.actor.faultedAt = this.now
      bump(this.stats.crash, w.op)
      this.log(() => `crash ${w.actor.name} at ${w.op}${w.detail ? ` ${w.detail()}` : ''}`)
      // Done already (admit's bookkeeping after its event was acked): nothing to redeliver.
      if (!w.actor.done) w.actor.redeliver?.()
      this.crashProcess(w.actor)
      return
    }
    const failure = w.op === 'jobs.create' ? f.postFail : undefined
    const drawn: Verdict = !this.faultsOn
      ? 'ok'
      : this.random.chance(failure ?? f.failBefore)
        ? 'failBefore'
        : this.random.chance(failure ?? f.failAfter)
          ? 'failAfter'
          : 'ok'
    const verdict = this.aimed(w, drawn)
    const slow = this.now - w.issuedAt > SLOW_CALL_MS
    // A failure, or a slow call: the actor's own deadlines are not the oracle's to hold it to. Except a failed read of
    // the newest request: the admission must answer it by deleting the Job it has just created (it cannot rule out a
    // request), so a raced Job is still the admission's to delete within RACED_MS.
    if ((verdict !== 'ok' && w.op !== 'requests.newest') || slow) w.actor.faultedAt = this.now
    if (verdict !== 'ok') bump(this.stats[verdict], portOf(w.op))
    if (slow) bump(this.stats.slow, portOf(w.op))
    this.log(
      () =>
        `${w.actor.name} ${w.op}${w.detail ? ` ${w.detail()}` : ''}${verdict === 'ok' ? '' : ` ${verdict}`}${slow ? ' (slow)' : ''}`,
    )
    w.resolve(verdict)
  }

  /**
   * demand's claim read after a lost compare-and-set on the idle key (its only idle GET follows one): that write may
   * have found a newer time stored, and a failure of the read after it is what the stored time must survive (its
   * requests redelivered with an older time than the bucket holds). At the base rate it fails after one conflict in
   * 25, too seldom for what the race needs after it (the redelivery reaching the same replica, an admission inside
   * the window the older time leaves) to come together, so it fails more often here — drawn from a stream of its own
   * (`aim`), so that a schedule it does not hit is the one it would be without it.
   */
  private aimed(w: Waiting, drawn: Verdict): Verdict {
    if (!w.actor.name.startsWith('demand(')) return drawn
    const key = w.detail?.() ?? ''
    if (w.op === 'idle.get') {
      this.conflicted.add(`${w.actor.name} ${key}`)
      return drawn
    }
    if (w.op !== 'claims.get' || !key.startsWith('model.')) return drawn
    const idleKey = `${w.actor.name} ${key.slice('model.'.length)}`
    if (!this.conflicted.delete(idleKey) || !this.faultsOn || drawn !== 'ok') return drawn
    if (!this.aim.chance(this.faults.afterConflict)) return drawn
    this.stats.aimed++
    return this.aim.chance(0.5) ? 'failBefore' : 'failAfter'
  }

  private nextTimer(): Timer | undefined {
    let first: Timer | undefined
    for (const t of this.timers) if (!first || t.at < first.at || (t.at === first.at && t.seq < first.seq)) first = t
    return first
  }

  // ---- the outside world: foreground requests, Jobs running and finishing ---------------------------------------

  private externalEvents() {
    const r = this.random
    // A foreground request now and then, on either subject (the documented one reaches admission only through
    // demand, unless the protocol reads it itself).
    if (this.faultsOn && r.chance(0.04)) {
      const b = this.world.backfills[r.int(this.world.backfills.length)] as WorldSpec['backfills'][number]
      const subject = r.chance(0.5) ? 'documented' : 'perModel'
      const stored = this.requests.store({ namespace: NS, model: b.model, at: this.now, subject })
      this.stats.requests[subject]++
      if (this.waiting.some((w) => w.op === 'jobs.create')) this.stats.requestsDuringPost++
      this.log(() => `request ${b.model} on ${subject}${stored.seq ? ` seq ${stored.seq}` : ''}`)
      // Demand handles it a little later. It may lag (the fence then holds admission back), now and then by seconds:
      // a backlog after NATS or demand came back, its requests handled after an admission on the window they opened.
      const lag = r.chance(0.2) ? (r.chance(0.25) ? 2000 + r.int(4000) : 1500) : 150
      this.at(r.int(lag), `demand ${b.model}`, () => this.deliverDemand(stored))
    }
    // Quiet stretches, when nothing is in flight: time moves on.
    if (this.waiting.length === 0 && r.chance(0.2)) this.now += r.int(r.chance(0.3) ? 3000 : 300)
    // A live Job's pod starts, or the Job finishes.
    if (r.chance(0.03)) {
      const live = [...this.jobs.jobs.values()].filter((j) => j.deletedAt === undefined && !j.outcome)
      const j = live[r.int(live.length)]
      if (j) {
        if (!j.started) j.started = true
        else j.outcome = r.chance(0.8) ? 'Complete' : 'Failed'
        this.setJobStatus(j)
        this.log(() => `job ${j.job.metadata?.name} ${j.outcome ?? 'started'}`)
        this.jobChanged(j)
      }
    }
  }

  protected setJobStatus(j: StoredJob) {
    const t = new Date(this.now).toISOString()
    const status = {
      ...(j.started ? { startTime: t as unknown as Date, active: j.outcome ? 0 : 1 } : {}),
      ...(j.outcome
        ? {
            completionTime: t as unknown as Date,
            conditions: [{ type: j.outcome, status: 'True', lastTransitionTime: t as unknown as Date }],
          }
        : {}),
    }
    this.jobs.update(j, (job) => ({ ...job, status }))
  }

  /** Deleted Jobs whose removal (their pods gone) is scheduled. */
  private readonly removing = new Set<StoredJob>()

  /** The watch: the copies hear of the change, and lifecycle of what the source makes of it (unless it is lost). */
  protected jobChanged(j: StoredJob) {
    // Bound to the Job at its creation, by the POST that created it: a name is used again once a deleted Job is gone
    // (a later attempt's retry).
    if (!this.postOf.has(j)) {
      const post = this.posts.get(Number(j.job.metadata?.annotations?.[SIM_POST]))
      const owner = this.backfills.get(j.job.metadata?.ownerReferences?.[0]?.name ?? '')
      const spec = owner ? checkSpec(owner.spec) : undefined
      const idleForMs = spec && 'resolved' in spec ? spec.resolved.idleForMs : 0
      this.postOf.set(j, { sent: post?.sent ?? j.createdAt, by: post?.by, idleForMs })
    }
    const backfill = j.job.metadata?.ownerReferences?.[0]?.name
    if (!backfill) return
    if (j.deletedAt !== undefined && !this.removing.has(j) && !this.driven) {
      // A deleted Job is gone once its pods are (their grace period): the apiserver removes it, the watch says so.
      this.removing.add(j)
      const name = j.job.metadata?.name ?? ''
      this.at(this.random.int(3000), `gone ${name}`, () => {
        this.jobs.remove(NS, name)
        this.jobChanged(j)
      })
    }
    const delay = this.driven ? 0 : this.random.int(50)
    const key = `${NS}/${j.job.metadata?.name}`
    if (this.faultsOn && this.random.chance(this.faults.lostWatch)) {
      this.stats.lostWatch++
      this.log(() => `lost  watch ${j.job.metadata?.name}`)
      // admit's copy misses it too, until its watch restarts and lists again.
      const copy = this.copies.jobs
      if (copy) this.at(RELIST_MS + this.random.int(RELIST_MS), 'relist jobs', () => this.relist(copy, this.allJobs()))
      return
    }
    this.at(delay, `watch ${j.job.metadata?.name}`, () => {
      // The copy first: the lifecycle this event wakes reads it (one watch feeds both here).
      const now = this.jobs.jobs.get(key)
      this.copies.jobs.apply(key, now?.job ?? null)
      this.jobEvent(backfill, j, now === undefined)
    })
  }

  /**
   * The job.completed event the source makes of a Job's watch event (functions/source: Deleted once it is gone, its
   * outcome once it has one, Started once its pod runs), handed to lifecycle. A change the source maps to nothing (a
   * Job created, a deletion begun) reaches lifecycle through nothing here either.
   */
  private jobEvent(backfill: string, j: StoredJob, gone: boolean) {
    const outcome = gone ? 'Deleted' : (j.outcome ?? (j.started ? 'Started' : undefined))
    if (!outcome) return
    const job = j.job.metadata?.name ?? ''
    this.deliverTo('lifecycle', `lifecycle(${backfill} ${outcome})`, {
      ...this.envelope(),
      type: 'ai.flexinfer.job.completed',
      data: { namespace: NS, job, backfill, outcome },
    })
  }

  private relist<T extends V1Job | ModelBackfill>(copy: SimCopy<T>, all: T[]) {
    this.stats.relists++
    copy.relist(all)
  }

  private allJobs() {
    return [...this.jobs.jobs.values()].map((s) => s.job)
  }

  /** admit's copy of a ModelBackfill hears of its change a moment later, or — the event lost — at the next relist. */
  private watchBackfill(name: string) {
    const copy = this.copies.backfills
    if (!copy) return
    if (this.faultsOn && this.random.chance(this.faults.lostWatch)) {
      this.stats.lostWatch++
      this.at(RELIST_MS + this.random.int(RELIST_MS), 'relist backfills', () =>
        this.relist(copy, [...this.backfills.values()]),
      )
      return
    }
    this.at(this.driven ? 0 : this.random.int(50), `watch backfill ${name}`, () =>
      copy.apply(`${NS}/${name}`, this.backfills.get(name) ?? null),
    )
  }

  // ---- deliveries ---------------------------------------------------------------------------------------------

  /** An event's envelope as the transport decodes it (its id and store time are nothing the handlers here read). */
  protected envelope() {
    return { id: `sim-${this.timerSeq}`, source: 'sim', time: new Date(this.now).toISOString(), storedAt: this.now }
  }

  /**
   * An event for admit, cancel or lifecycle, handed to that function's process as its consumer delivers it (now and
   * then twice): the real handler, on the process's instance; acknowledged when handle() resolves, redelivered after
   * the ack wait when it fails or its process crashes.
   */
  protected deliverTo(which: FnName, name: string, event: InboundEvent) {
    const foregroundCancel =
      event.type === 'ai.flexinfer.backfill.cancel' && event.data.reason === 'ForegroundDemand' ? true : undefined
    const once = () =>
      this.spawn(
        name,
        async () => {
          const actor = this.current as Actor
          const proc = this.processes[which]
          actor.process = proc
          proc.actors.add(actor)
          try {
            await proc.started
            await proc.fn.handle(event, proc.deps)
          } finally {
            proc.actors.delete(actor)
          }
        },
        true,
        (a) => {
          a.foregroundCancel = foregroundCancel
        },
      )
    once()
    if (this.faultsOn && this.random.chance(this.faults.duplicate)) {
      this.stats.duplicates++
      once()
    }
  }

  /**
   * Starts demand replica `replica`: the real Demand (functions/demand) over this world's ports, its every call made
   * as the process's actor. A crash at any of them ends the process — its memory (coalescing, cancels sent, what it
   * last wrote) with it — and what it had not acknowledged is redelivered after the ack wait, to either replica.
   */
  private startDemand(replica: number) {
    const actor: Actor = { name: `demand(process)#${++this.actors}`, crashed: false, calls: 0 }
    const as = <T>(body: () => T): T => this.actorContext.run(actor, body)
    const ports: DemandPorts = {
      now: () => this.now,
      idle: {
        get: (key) => as(() => this.idle.get(key)),
        create: (key, text) => as(() => this.idle.create(key, text)),
        update: (key, text, revision) => as(() => this.idle.update(key, text, revision)),
      },
      readClaim: (key) => as(() => this.claims.get(key)),
      watchedClaim: (key) => this.watchedClaims.get(key),
      publishCancel: (cancel, msgID) => as(() => this.publish('ai.flexinfer.backfill.cancel', { ...cancel }, msgID)),
      publishPreempt: () => {},
      timers: {
        set: (fire, ms) =>
          this.at(ms, `${actor.name} flush`, () => {
            if (!actor.crashed) as(fire)
          }),
        clear: (timer) => {
          if (timer) this.cancelTimer(timer as Timer)
        },
      },
      start: async () => {},
      stop: async () => {},
    }
    const proc: DemandProcess = { actor, demand: new Demand(ports, silentLogger), pending: new Set() }
    actor.redeliver = () => {
      // The restart reads the bucket anew (KvMirror's start), then follows its changes.
      this.watchedClaims.clear()
      for (const key of this.claims.keys()) this.claimWritten(key, this.claims.peek(key), 0)
      const pending = [...proc.pending]
      this.stats.redeliveries += pending.length
      this.stats.demandRestarts++
      this.startDemand(replica)
      this.at(ACK_WAIT_MS, 'redeliver to demand', () => {
        for (const r of pending) this.deliverDemand(r)
      })
    }
    this.demands[replica] = proc
    this.stats.actors++
  }

  /** A claims write reaches the watched copy a moment later, unless that watch event is lost. */
  private claimWritten(key: string, entry: Entry | null, delay?: number) {
    if (!key.startsWith('model.')) return
    if (delay === undefined && this.faultsOn && this.random.chance(this.faults.lostWatch)) {
      this.stats.lostWatch++
      return
    }
    const apply = () => {
      const parsed = entry?.operation === 'PUT' ? parseEntry(entry.text, parseClaim) : null
      if (parsed?.ok) this.watchedClaims.set(key, parsed.value)
      else this.watchedClaims.delete(key)
    }
    if (delay === 0) apply()
    else this.at(delay ?? (this.driven ? 0 : this.random.int(50)), `watch ${key}`, apply)
  }

  /**
   * Hands a stored request to a demand replica, as their consumer delivers it (now and then twice): acknowledged
   * when handle() is done with it, redelivered after the ack wait when it failed. Its store time carries JetStream's
   * sub-millisecond part.
   */
  protected deliverDemand(r: StoredRequest) {
    const event = {
      type: 'ai.flexinfer.foreground.request',
      data: { namespace: NS, model: r.model },
      time: new Date(r.at).toISOString(),
      storedAt: r.at + 0.25 + (r.seq % 3) * 0.25,
    } as unknown as InboundEvent
    const once = () => {
      const proc = this.demands[this.random.int(this.demands.length)] as DemandProcess
      proc.pending.add(r)
      this.log(() => `${proc.actor.name} handles ${r.model}${r.seq ? ` seq ${r.seq}` : ''}`)
      const handled = this.actorContext.run(proc.actor, () => proc.demand.handle(event))
      const acked = () => {
        if (proc.actor.crashed) return
        proc.pending.delete(r)
        if (r.seq) {
          this.demandAcked.add(r.seq)
          while (this.demandAcked.has(this.requests.ackFloor + 1)) this.requests.ackFloor++
        }
      }
      if (!handled) return acked()
      handled.then(acked, (err) => {
        if (proc.actor.crashed) return
        if (!(err instanceof SimulatedFault) && !isCasConflict(err))
          this.unexpected ??= `${proc.actor.name} failed: ${(err as Error)?.stack ?? err}`
        this.log(() => `fail  ${proc.actor.name} ${r.model}: ${String((err as Error).message ?? err).slice(0, 120)}`)
        proc.pending.delete(r)
        this.stats.redeliveries++
        this.at(ACK_WAIT_MS, `redeliver ${r.model}`, () => this.deliverDemand(r))
      })
    }
    once()
    if (this.faultsOn && this.random.chance(this.faults.duplicate)) {
      this.stats.duplicates++
      once()
    }
  }

  // ---- the in-memory apiserver and bus that reconcile() reads and writes through Deps ---------------------------

  private aBackfill(b: WorldSpec['backfills'][number]): ModelBackfill {
    return {
      apiVersion: 'ai.flexinfer/v1alpha2',
      kind: 'ModelBackfill',
      metadata: {
        name: b.name,
        namespace: NS,
        uid: `uid-${b.name}`,
        generation: 1,
        resourceVersion: '1',
        finalizers: [],
      },
      spec: {
        modelRef: b.model,
        templateRef: 'eval',
        idleFor: `${b.idleForMs / 1000}s`,
        maxRunDuration: '30m',
        ...(b.repeatAfterMs ? { repeatAfter: `${b.repeatAfterMs / 1000}s` } : {}),
      },
    }
  }

  private kube() {
    const { template, models } = this
    // Objects are handed out as stored, frozen: a change replaces the stored one (a reader keeps what it read).
    // Objects are handed out as stored, frozen: a change replaces the stored one (a reader keeps what it read).
    const change = (name: string, edit: (b: ModelBackfill) => ModelBackfill) => {
      this.changeBackfill(name, edit)
    }
    const ownJobs = (name: string) =>
      this.jobs.list().then((l) => l.filter((j) => j.metadata?.ownerReferences?.[0]?.name === name))
    return fakeKube({
      getBackfill: (_ns: string, name: string) =>
        this.gated('kube.getBackfill', name, () => this.backfills.get(name) ?? null),
      getModel: async (_ns: string, name: string) => models.get(name) ?? null,
      getCronJob: async () => template,
      getJob: (ns: string, name: string) => this.jobs.get(ns, name).then((j) => this.noteAbsent(j === null, j)),
      listAll: async (plural: string) => (plural === PLURALS.gamingSessions ? this.sessions : this.leases),
      listOwnJobs: (_ns: string, name: string) => ownJobs(name),
      listBackfillJobs: () => this.jobs.list(),
      setFinalizer: (b: ModelBackfill, present: boolean) =>
        this.gated('kube.setFinalizer', b.metadata.name, () =>
          change(b.metadata.name, (cur) => ({
            ...cur,
            metadata: { ...cur.metadata, finalizers: present ? [FINALIZER] : [] },
          })),
        ),
      recordEvent: async () => {},
      writeStatus: (b: ModelBackfill, status: ModelBackfillStatus) =>
        this.gated('kube.writeStatus', b.metadata.name, () => {
          const cur = this.backfills.get(b.metadata.name)
          if (!cur || cur.metadata.resourceVersion !== b.metadata.resourceVersion) return false
          change(b.metadata.name, (c) => ({ ...c, status: structuredClone(status) }))
          return true
        }),
      // The admission's Job port (set in the constructor) answers as the apiserver would.
      createJob: (job: V1Job) => (this.deps.admission as AdmissionPorts).jobs.create(job),
      deleteJob: (ns: string, name: string, uid?: string) =>
        this.jobs.delete(ns, name, uid).then((r) => this.noteAbsent(r === 'absent', r)),
      // The pods are not modelled (a Job's deletion is what the oracle watches): the DELETE is a call that can be slow,
      // fail or crash its caller. One DELETE of several Jobs' pods only follows a collection DELETE of their Jobs, which
      // takes more cancels of a namespace in flight at once than the DELETE lane's per-namespace places: never here,
      // so deleteAttemptJobs stays unmodelled and fails loudly if ever reached.
      deleteJobPods: (_ns: string, uid: string) => this.gated('kube.deleteJobPods', uid, () => {}),
      deleteJobsPods: (_ns: string, uids: string[]) => this.gated('kube.deleteJobsPods', uids.join(','), () => {}),
      // Every call is answered or failed here (a failure is the scheduler's fault, redelivered): none waits for an
      // apiserver to come back.
      whenReachable: <T>(call: () => Promise<T>) => call(),
    })
  }

  /** A change of ModelBackfill `name` as the apiserver makes it (a new resourceVersion); null from `edit`: deleted. */
  protected changeBackfill(name: string, edit: (b: ModelBackfill) => ModelBackfill | null) {
    const cur = this.backfills.get(name)
    if (!cur) return
    const next = edit(cur)
    const resourceVersion = String(Number(cur.metadata.resourceVersion) + 1)
    // Its last finalizer gone while it is being deleted: the apiserver removes it.
    const gone = !next || (next.metadata.deletionTimestamp !== undefined && !next.metadata.finalizers?.length)
    if (!next || gone) this.backfills.delete(name)
    else this.backfills.set(name, deepFreeze({ ...next, metadata: { ...next.metadata, resourceVersion } }))
    this.watchBackfill(name)
    // The source's event for it (functions/source): driven only (a random schedule starts lifecycle once per backfill).
    if (!this.driven) return
    const now = this.backfills.get(name)
    this.deliverTo('lifecycle', `lifecycle(${name} changed)`, {
      ...this.envelope(),
      type: 'ai.flexinfer.backfill.changed',
      data: {
        namespace: NS,
        backfill: name,
        generation: (now ?? cur).metadata.generation,
        deleting: Boolean((now ?? next ?? cur).metadata.deletionTimestamp),
        deleted: gone,
      },
    })
  }

  // ---- the world as it stands, read without a port call (the drivers' and the oracles' view) ------------------

  /** The apiserver's ModelBackfill `name` now (frozen), or null once it is gone. */
  backfill(name: string): ModelBackfill | null {
    return this.backfills.get(name) ?? null
  }

  /** Its state as stored in KV (null: none, or deleted). */
  state(name: string): BackfillState | null {
    const entry = this.states.peek(backfillKey(NS, name))
    if (!entry) return null
    // Entries are immutable (a write stores a new one): each is parsed once, and what is parsed is frozen (shared).
    let state = parsedStates.get(entry)
    if (state === undefined) {
      state = deepFreeze(readState(silentLogger, entry as unknown as Parameters<typeof readState>[1]))
      parsedStates.set(entry, state)
    }
    return state
  }

  /** A foreground cancel that found no Job (the GET's answer, or the DELETE's) waits for the one being admitted. */
  private noteAbsent<T>(absent: boolean, answer: T): T {
    const actor = this.current
    if (absent && actor?.foregroundCancel && !actor.waited) {
      actor.waited = true
      this.stats.cancelWaits++
    }
    return answer
  }

  private gated<T>(op: string, detail: string, effect: () => T): Promise<T> {
    return this.wait(op, () => detail).then((v) => {
      if (v === 'failBefore') throw new SimulatedFault(`${op} ${detail}: timeout (not applied)`)
      const r = effect()
      if (v === 'failAfter') throw new SimulatedFault(`${op} ${detail}: timeout (applied, reply lost)`)
      return r
    })
  }

  private publish(type: string, data: Record<string, string>, msgID?: string) {
    return this.gated(`publish ${type.replace('ai.flexinfer.', '')}`, `${data.jobName ?? data.backfill}`, () => {
      // JetStream stores one message per msgID (its duplicate window outlives any schedule here).
      if (msgID !== undefined) {
        if (this.msgIds.has(msgID)) return { seq: 0, duplicate: true }
        this.msgIds.add(msgID)
      }
      // Stored: delivered a moment later (at least once).
      this.at(this.driven ? 0 : this.random.int(20), `deliver ${type}`, () => {
        const backfill = data.backfill as string
        if (type === 'ai.flexinfer.backfill.admit') {
          this.deliverTo('admit', `admit(${backfill} admit)`, {
            ...this.envelope(),
            type: 'ai.flexinfer.backfill.admit',
            data: { namespace: NS, backfill },
          })
        } else if (type === 'ai.flexinfer.backfill.cancel') {
          const { jobName, reason, at } = data as { jobName: string; reason: string; at: string }
          this.deliverTo('cancel', `cancel(${jobName})`, {
            ...this.envelope(),
            type: 'ai.flexinfer.backfill.cancel',
            data: { namespace: NS, backfill, jobName, reason, at },
          })
        }
      })
      return { seq: 0 }
    })
  }

  private bus() {
    const notFound = () => Promise.reject(new Error('no message found'))
    return {
      kv: { backfills: this.states, idle: this.idle, claims: this.claims },
      publish: (type: string, data: Record<string, string>) => this.publish(type, data),
      armTimer: (_ns: string, name: string, at: string) =>
        this.gated('armTimer', `${name} ${at.slice(11, 23)}`, () => {
          const prior = this.armed.get(name)
          if (prior?.timer) this.cancelTimer(prior.timer)
          // Driven: fired when the driver ticks (support/dst-driven.ts).
          if (this.driven) {
            this.armed.set(name, { at })
            return
          }
          // A message schedule fires up to a tick early; admit waits that out (functions/admit), modelled as on time.
          const timer = this.at(Math.max(0, Date.parse(at) - this.now), `fire ${name}`, () => {
            this.armed.delete(name)
            this.deliverTo('admit', `admit(${name} timer)`, {
              ...this.envelope(),
              type: 'ai.flexinfer.timer.fired',
              data: { namespace: NS, backfill: name, due: at },
            })
          })
          this.armed.set(name, { at, timer })
        }),
      cancelTimer: (_ns: string, name: string) =>
        this.gated('cancelTimer', name, () => {
          const prior = this.armed.get(name)
          if (prior?.timer) this.cancelTimer(prior.timer)
          this.armed.delete(name)
        }),
      timerArmed: async (_ns: string, name: string) => this.armed.has(name),
      jsm: { streams: { getMessage: notFound } },
    }
  }

  // ---- the oracle ----------------------------------------------------------------------------------------------

  protected fail(message: string): never {
    this.log(`VIOLATION ${message}`)
    throw new Violation(message)
  }

  private readonly claimCache = new Map<string, { entry: unknown; claim: Claim | null }>()

  /** The claim stored at `key` (parsed once per stored entry: entries are immutable). */
  private claimOf(key: string): Claim | null {
    const e = this.claims.peek(key)
    const cached = this.claimCache.get(key)
    if (cached && cached.entry === e) return cached.claim
    let claim: Claim | null = null
    if (e?.operation === 'PUT') {
      const r = parseEntry(e.text, parseClaim)
      claim = r.ok ? r.value : null
    }
    this.claimCache.set(key, { entry: e, claim })
    return claim
  }

  private modelOf(j: StoredJob) {
    return j.job.metadata?.annotations?.[ANNOTATION_MODEL] ?? ''
  }
  private nodeOf(j: StoredJob) {
    return j.job.metadata?.annotations?.[ANNOTATION_NODE] ?? ''
  }

  /**
   * The invariants. Looked at again only when the world moved (a claim written, a Job changed, a request stored):
   * every bound is checked against when things happened (a Job's deletion time, when its claims went), so a check
   * skipped while nothing moved finds what it would have found, at the next change or at the end.
   */
  protected check(force = false) {
    if (this.unexpected) this.fail(`an error no fault explains: ${this.unexpected}`)
    const world = this.claims.writes + this.jobs.changes + this.requests.stored.length
    if (world === this.seenWorld && !force) return
    this.seenWorld = world
    const live = [...this.jobs.jobs.values()].filter((j) => j.deletedAt === undefined && !j.outcome)
    // One live attempt per model and per node (both models share the node).
    for (const [x, y] of pairs(live)) {
      const names = `${x.job.metadata?.name}, ${y.job.metadata?.name}`
      if (this.nodeOf(x) === this.nodeOf(y)) this.fail(`two live attempts on ${this.nodeOf(x)}: ${names}`)
      if (this.modelOf(x) === this.modelOf(y)) this.fail(`two live attempts of ${this.modelOf(x)}: ${names}`)
    }
    for (const j of this.jobs.created) {
      const name = j.job.metadata?.name ?? ''
      const model = this.modelOf(j)
      const post = this.postOf.get(j)
      const sent = post?.sent ?? j.createdAt
      for (const r of this.requests.stored) {
        if (r.model !== model || r.background) continue
        // A request stored inside the Job's window before its POST was sent (give or take LATE_MS).
        const idleForMs = post?.idleForMs ?? 0
        if (r.at > j.createdAt - idleForMs && r.at < sent - LATE_MS) {
          this.fail(`Job ${name} created at ${j.createdAt - T0} over a request for ${model} stored at ${r.at - T0}`)
        }
        // Stored while the POST was in flight: the Job deleted within RACED_MS by the admission itself — unless a
        // fault or a slow call hit the admission after its POST (then it is demand → cancel's, within CANCEL_MS).
        const faulted = this.faultedSince(post?.by, sent)
        const bound = faulted ? CANCEL_MS : RACED_MS
        if (r.at >= sent - LATE_MS && r.at <= j.createdAt && (j.deletedAt ?? this.now) - j.createdAt > bound) {
          if (!j.outcome)
            this.fail(`Job ${name} raced by a request at ${r.at - T0} still live ${this.now - j.createdAt} ms later`)
        }
        // No lost cancel: live when the request was stored, deleting (or done) CANCEL_MS later.
        const end = j.deletedAt ?? this.now
        if (r.at > j.createdAt && end > r.at && end - r.at > CANCEL_MS && !j.outcome) {
          this.fail(`lost cancel: Job ${name} live ${end - r.at} ms after a request for ${model} at ${r.at - T0}`)
        }
      }
    }
    // No live Job without its claims (taken before its POST, released only after its DELETE) for longer than
    // CLAIMLESS_MS: a Job whose attempt a decision ended while its POST was in flight is a stray until its admission
    // (the read after its POST) or lifecycle deletes it. CANCEL_MS when a fault hit its admission after the POST (the
    // POST's own reply lost): then only lifecycle or a redelivery can tell, as for a raced Job above.
    const unclaimed = new Set<string>()
    for (const j of live) {
      const name = j.job.metadata?.name ?? ''
      const keys = claimKeys(NS, this.modelOf(j), this.nodeOf(j))
      const m = this.claimOf(keys.model)
      const n = this.claimOf(keys.node)
      if (m?.jobName === name && n?.jobName === name) continue
      unclaimed.add(name)
      const since = this.claimless.get(name)?.since ?? this.now
      this.claimless.set(name, { since, bound: this.claimlessBound(j) })
      if (this.now - since > this.claimlessBound(j)) {
        this.fail(
          `live Job ${name} without its claims for ${this.now - since} ms (model: ${m?.jobName ?? '-'}, node: ${n?.jobName ?? '-'})`,
        )
      }
    }
    for (const [name, { since, bound }] of this.claimless) {
      if (unclaimed.has(name)) continue
      // Its claims came back, or the Job went: how long it was without them is known only now.
      if (this.now - since > bound) this.fail(`live Job ${name} was without its claims for ${this.now - since} ms`)
      this.claimless.delete(name)
    }
  }

  /** CLAIMLESS_MS, or CANCEL_MS when a fault hit the Job's admission at or after its POST. */
  private claimlessBound(j: StoredJob) {
    const post = this.postOf.get(j)
    const faulted = this.faultedSince(post?.by, post?.sent ?? j.createdAt)
    return faulted ? CANCEL_MS : CLAIMLESS_MS
  }

  /**
   * A fault or a slow call hit `actor` at or after `since` — a call of its still waiting longer than SLOW_CALL_MS
   * too: slow already, whenever it is answered (judged only once answered, a raced Job whose DELETE was slow was held
   * to RACED_MS while the DELETE was in flight, and to CANCEL_MS once it returned).
   */
  private faultedSince(actor: Actor | undefined, since: number) {
    if (!actor) return false
    if ((actor.faultedAt ?? Number.NEGATIVE_INFINITY) >= since) return true
    return this.waiting.some((w) => w.actor === actor && w.issuedAt >= since && this.now - w.issuedAt > SLOW_CALL_MS)
  }

  private checkConverged() {
    if (this.waiting.length) this.fail(`not quiet: ${this.waiting.length} calls still waiting`)
    // Every request handed to demand is answered or failed (and redelivered): one left waiting is never acked, holds
    // its place in max_ack_pending for good, and on an AckAll consumer holds the ack floor of every request after it.
    const unanswered = this.demands.flatMap((d) => [...d.pending]).map((r) => `${r.model}@${r.at - T0}`)
    if (unanswered.length)
      this.fail(`not converged: ${unanswered.length} requests never answered by demand (${unanswered.slice(0, 5)})`)
    for (const j of this.jobs.jobs.values()) {
      if (j.deletedAt !== undefined || j.outcome) continue
      const owner = j.job.metadata?.ownerReferences?.[0]?.name ?? ''
      const e = this.states.peek(backfillKey(NS, owner))
      const s = e?.operation === 'PUT' ? JSON.parse(e.text) : null
      if (s?.jobName !== j.job.metadata?.name || !['Starting', 'Running'].includes(s?.phase)) {
        this.fail(`not converged: live Job ${j.job.metadata?.name}, state ${s?.phase}/${s?.jobName}`)
      }
    }
  }
}

export function simulate(options: SimOptions): Promise<SimResult> {
  return new Simulation(options).run()
}

/**
 * Runs seeds from `first` until one fails, `count` passed or `maxMs` went by; how long it took and what was generated.
 * Untraced (faster); a failing seed is run again traced, for its schedule — and must fail the same way (a replay).
 */
export async function searchSeeds(
  first: number,
  count: number,
  options: Omit<SimOptions, 'seed'> & { maxMs?: number } = {},
) {
  const started = performance.now()
  const stats = emptyStats()
  let steps = 0
  let runs = 0
  for (let seed = first; seed < first + count; seed++) {
    const r = await simulate({ ...options, seed, trace: false })
    runs++
    steps += r.steps
    addStats(stats, r.stats)
    if (!r.ok) {
      const ms = performance.now() - started
      const traced = await simulate({ ...options, seed, trace: true })
      if (traced.ok || traced.violation !== r.violation) {
        throw new Error(`seed ${seed} did not replay: ${r.violation} untraced, ${traced.violation ?? 'ok'} traced`)
      }
      return { failed: traced, runs, ms, steps, stats }
    }
    if (options.maxMs !== undefined && performance.now() - started > options.maxMs) break
  }
  return { failed: undefined, runs, ms: performance.now() - started, steps, stats }
}
