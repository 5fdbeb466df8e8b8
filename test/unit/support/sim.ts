// A simulated cluster for property tests of decide(): two backfills sharing a model or a node, driven the way
// the functions drive them (who is woken by which event, what each action does to the world), with invariant
// checks on every single decision. No I/O: the "cluster" is a few maps.
import { checkSpec, type ModelBackfill, type ModelBackfillSpec, REASONS } from '../../../core/api.js'
import { type Contender, type Decision, decide, type Observed, sameState, type Trigger } from '../../../core/decide.js'
import type { BackfillState } from '../../../core/state.js'
import type { GamingSessionView, GPULeaseView, JobView, ModelView } from '../../../core/world.js'
import {
  aBackfill,
  aGamingSession,
  aJob,
  aLease,
  aModel,
  anIdleState,
  iso,
  MINUTE,
  NODE,
  OTHER_NODE,
  T0,
} from './world.js'

export type Coincident = 'none' | 'foreground' | 'gaming' | 'lease' | 'suspend' | 'notReady' | 'specChange'

/** World changes and triggers, each followed by the decisions the functions would make. */
export type SimEvent =
  | { k: 'advance'; ms: number }
  | { k: 'tick' }
  | { k: 'foreground'; model: number }
  | { k: 'lastActive'; model: number }
  | { k: 'jobStart'; bf: number }
  | { k: 'jobFinish'; bf: number; outcome: 'Complete' | 'Failed'; with: Coincident }
  | { k: 'reap'; finished: boolean }
  | { k: 'gaming'; on: boolean; node: number; ttlMs: number; deleting: boolean }
  | { k: 'lease'; on: boolean; by: 'node' | 'group'; ttlMs: number }
  | { k: 'suspend'; bf: number }
  | { k: 'specChange'; bf: number; idleForMin: number }
  | { k: 'ready'; model: number; ready: boolean }
  | { k: 'move'; model: number }
  | { k: 'delete'; bf: number }

export interface SimConfig {
  /** 'model': both backfills declare the same Model; 'node': two Models on the same node. */
  share: 'model' | 'node'
  names: [string, string]
  idleForMin: [number, number]
  /** Minutes; 0 = one-shot. */
  repeatAfterMin: [number, number]
}

interface SimBackfill {
  name: string
  object: ModelBackfill | null
  state: BackfillState | null
  /** Every distinct Job name this backfill ever asked to create. */
  created: Set<string>
  timerAt?: number
  /** When the last Job of this backfill deleted for a cancel reason was observed gone. */
  cancelledJobGoneAt?: number
}

interface SimJob {
  owner: number
  view: JobView
  cancelled: boolean
}

interface Claim {
  bf: number
  jobName: string
  idleSince?: string
}

const CANCEL_REASONS = REASONS.Cancelling as readonly string[]
const NODES = [NODE, OTHER_NODE]
const WAKES_ITSELF_MAX = 4

export class InvariantViolation extends Error {}

export class Sim {
  now = T0
  readonly models: ModelView[]
  readonly idle: (number | undefined)[] = [undefined, undefined]
  /** Newest foreground signal per model, whoever carried it (idle state, lastActiveTime, cancel request). */
  readonly lastForeground: number[] = [Number.NEGATIVE_INFINITY, Number.NEGATIVE_INFINITY]
  sessions: GamingSessionView[] = []
  leases: GPULeaseView[] = []
  readonly jobs = new Map<string, SimJob>()
  readonly claims = new Map<string, Claim>()
  readonly bfs: SimBackfill[]
  readonly trace: string[] = []
  decisions = 0
  /** How often each phase/reason was decided, and each action issued: shows what the histories exercised. */
  readonly seen = new Map<string, number>()

  constructor(readonly config: SimConfig) {
    this.models = [0, 1].map((i) => aModel({ name: `model-${i}`, node: NODE, group: `group-${i}` }))
    this.bfs = config.names.map((name, i) => ({
      name,
      object: aBackfill({
        name,
        uid: `uid-${i}`,
        finalizers: [],
        spec: {
          modelRef: this.modelOf(i),
          idleFor: `${config.idleForMin[i]}m`,
          repeatAfter: config.repeatAfterMin[i] ? `${config.repeatAfterMin[i]}m` : undefined,
        },
      }),
      state: null,
      created: new Set<string>(),
    }))
  }

  private modelOf(bf: number) {
    return this.config.share === 'model' ? 'model-0' : `model-${bf}`
  }
  private modelIndex(name: string) {
    return this.models.findIndex((m) => m.name === name)
  }

  // ---- the world as the adapter observes it for one backfill -------------------------------------------------

  observe(i: number): Observed {
    const bf = this.bfs[i] as SimBackfill
    const modelName = bf.object?.spec.modelRef ?? this.modelOf(i)
    const m = this.modelIndex(modelName)
    const model = m >= 0 ? (this.models[m] as ModelView) : null
    const idle = this.idle[m]
    const contenders: Contender[] = []
    for (const job of this.jobs.values()) {
      if (job.owner === i || job.view.deleting || job.view.outcome) continue
      const on = job.view.model === modelName ? 'model' : model?.node && job.view.node === model.node ? 'node' : null
      if (on) contenders.push({ namespace: job.view.namespace, jobName: job.view.name, on })
    }
    const jobName = bf.state?.jobName
    return structuredClone({
      backfill: bf.object,
      state: bf.state,
      model,
      idle: idle === undefined ? null : anIdleState(idle, modelName),
      gamingSessions: this.sessions,
      leases: this.leases,
      template: { found: true, gpu: [] },
      job: jobName ? (this.jobs.get(jobName)?.view ?? null) : null,
      contenders,
    })
  }

  // ---- events ----------------------------------------------------------------------------------------------------

  run(events: SimEvent[]) {
    // Creation: every backfill is decided once when it appears.
    for (const i of [0, 1]) this.wake(i, { type: 'resource' })
    for (const ev of events) this.apply(ev)
  }

  apply(ev: SimEvent) {
    this.trace.push(`${iso(this.now)} ${JSON.stringify(ev)}`)
    switch (ev.k) {
      case 'advance':
        this.now += ev.ms
        return
      case 'tick': {
        const due = this.bfs
          .map((b, i) => [b.timerAt, i] as const)
          .filter((x): x is readonly [number, number] => x[0] !== undefined)
          .sort((a, b) => a[0] - b[0])[0]
        if (!due) return
        const [at, i] = due
        this.now = Math.max(this.now, at)
        ;(this.bfs[i] as SimBackfill).timerAt = undefined
        this.wake(i, { type: 'timer' })
        return
      }
      case 'foreground':
        return this.foreground(ev.model)
      case 'lastActive': {
        const model = this.models[ev.model] as ModelView
        model.lastActiveTime = iso(this.now)
        this.noteForeground(ev.model, this.now)
        return this.wakeModel(ev.model)
      }
      case 'jobStart':
      case 'jobFinish': {
        const job = this.activeJobOf(ev.bf)
        if (!job) return
        if (ev.k === 'jobStart') job.view.started = true
        else {
          job.view.started = true
          job.view.outcome = ev.outcome
          job.view.outcomeTime = iso(this.now)
          // A cancel condition observed in the very same decision as the outcome.
          this.coincident(ev.bf, ev.with)
        }
        return this.wake(ev.bf, { type: 'resource' })
      }
      case 'reap': {
        const owners = new Set<number>()
        for (const [name, job] of this.jobs) {
          if (job.view.deleting || (ev.finished && job.view.outcome)) {
            this.jobs.delete(name)
            owners.add(job.owner)
            if (job.cancelled) (this.bfs[job.owner] as SimBackfill).cancelledJobGoneAt = this.now
          }
        }
        for (const i of owners) this.wake(i, { type: 'resource' })
        return
      }
      case 'gaming':
        this.sessions = ev.on
          ? [aGamingSession({ nodeName: NODES[ev.node], expiresAt: iso(this.now + ev.ttlMs), deleting: ev.deleting })]
          : []
        return this.wakeAll()
      case 'lease':
        this.leases = ev.on
          ? [
              aLease({
                node: ev.by === 'node' ? this.models[0]?.node : undefined,
                group: ev.by === 'group' ? 'group-0' : undefined,
                expiresAt: iso(this.now + ev.ttlMs),
              }),
            ]
          : []
        return this.wakeAll()
      case 'suspend':
        this.respec(ev.bf, { suspend: !this.bfs[ev.bf]?.object?.spec.suspend })
        return this.wake(ev.bf, { type: 'resource' })
      case 'specChange':
        this.respec(ev.bf, { idleFor: `${ev.idleForMin}m` })
        return this.wake(ev.bf, { type: 'resource' })
      case 'ready':
        ;(this.models[ev.model] as ModelView).ready = ev.ready
        ;(this.models[ev.model] as ModelView).phase = ev.ready ? 'Ready' : 'Loading'
        return this.wakeModel(ev.model)
      case 'move': {
        const model = this.models[ev.model] as ModelView
        model.node = model.node === NODE ? OTHER_NODE : NODE
        return this.wakeModel(ev.model)
      }
      case 'delete': {
        const b = this.bfs[ev.bf] as SimBackfill
        if (!b.object || b.object.metadata.deletionTimestamp) return
        b.object.metadata.deletionTimestamp = iso(this.now)
        if (!b.object.metadata.finalizers?.length) b.object = null // nothing holds it: gone at once
        return this.wake(ev.bf, { type: 'resource' })
      }
    }
  }

  /** The demand function: idle state first, then a cancel for a claimed attempt whose window this breaks. */
  private foreground(m: number) {
    this.idle[m] = this.now
    this.noteForeground(m, this.now)
    const claim = this.claims.get(`model.${this.models[m]?.name}`)
    if (!claim || !(this.now > Date.parse(claim.idleSince ?? ''))) return
    // The cancel function deletes the Job first, then decides with the request.
    this.deleteJob(claim.jobName, 'ForegroundDemand')
    this.wake(claim.bf, { type: 'cancel', reason: 'ForegroundDemand', at: iso(this.now) })
  }

  private coincident(i: number, what: Coincident) {
    const model = this.models[this.modelIndex(this.modelOf(i))] as ModelView
    switch (what) {
      case 'none':
        return
      case 'foreground':
        this.idle[this.modelIndex(model.name)] = this.now
        this.noteForeground(this.modelIndex(model.name), this.now)
        return
      case 'gaming':
        this.sessions = [aGamingSession({ nodeName: model.node, expiresAt: iso(this.now + 30 * MINUTE) })]
        return
      case 'lease':
        this.leases = [aLease({ node: model.node, expiresAt: iso(this.now + 30 * MINUTE) })]
        return
      case 'suspend':
        return this.respec(i, { suspend: true })
      case 'specChange':
        return this.respec(i, { env: { RUN: String(this.now) } })
      case 'notReady':
        model.ready = false
        model.phase = 'Loading'
        return
    }
  }

  private noteForeground(m: number, at: number) {
    this.lastForeground[m] = Math.max(this.lastForeground[m] as number, at)
  }

  private respec(i: number, spec: Partial<ModelBackfillSpec>) {
    const b = this.bfs[i] as SimBackfill
    if (!b.object || b.object.metadata.deletionTimestamp) return
    b.object.spec = { ...b.object.spec, ...spec }
    b.object.metadata.generation = (b.object.metadata.generation ?? 1) + 1
  }

  private activeJobOf(i: number): SimJob | undefined {
    const name = this.bfs[i]?.state?.jobName
    const job = name ? this.jobs.get(name) : undefined
    return job && !job.view.deleting && !job.view.outcome ? job : undefined
  }

  private deleteJob(name: string, why: string) {
    const job = this.jobs.get(name)
    if (!job) return
    job.view.deleting = true
    if (CANCEL_REASONS.includes(why)) job.cancelled = true
  }

  private wakeAll() {
    for (const i of [0, 1]) this.wake(i, { type: 'resource' })
  }
  private wakeModel(m: number) {
    const name = this.models[m]?.name
    for (const i of [0, 1]) if (this.bfs[i]?.object?.spec.modelRef === name) this.wake(i, { type: 'resource' })
  }

  /** Decides one backfill; its own status write wakes it again until it settles (as the watch would). */
  wake(i: number, trigger: Trigger) {
    for (let round = 0; round < WAKES_ITSELF_MAX; round++) {
      const b = this.bfs[i] as SimBackfill
      if (!b.object && !b.state) return
      const before = b.state
      this.decideOnce(i, round === 0 ? trigger : { type: 'resource' })
      if (sameState(before, b.state)) return
    }
  }

  // ---- one decision, its invariants, its actions ----------------------------------------------------------------

  private decideOnce(i: number, trigger: Trigger) {
    const b = this.bfs[i] as SimBackfill
    const o = this.observe(i)
    const d = decide(structuredClone(o), trigger, this.now)
    this.decisions++
    for (const key of [
      d.state ? `${d.state.phase}/${d.state.reason}` : 'gone',
      ...d.actions.map((a) => `action:${a.type}${'why' in a ? `:${a.why}` : ''}`),
    ]) {
      this.seen.set(key, (this.seen.get(key) ?? 0) + 1)
    }
    this.trace.push(
      `  decide ${b.name} ${trigger.type} → ${d.state ? `${d.state.phase}/${d.state.reason}` : 'gone'} ${d.actions
        .map((a) => a.type + ('jobName' in a ? `(${a.jobName}${'why' in a ? ` ${a.why}` : ''})` : ''))
        .join(' ')}`,
    )
    this.checkDecision(i, o, trigger, d)
    this.applyActions(i, o, d)
    b.state = d.state
    if (b.object && d.status) b.object.status = d.status
    this.checkWorld()
  }

  private fail(message: string): never {
    throw new InvariantViolation(`${message}\n--- trace ---\n${this.trace.join('\n')}`)
  }

  private checkDecision(i: number, o: Observed, trigger: Trigger, d: Decision) {
    const b = this.bfs[i] as SimBackfill
    const prior = o.state
    const out = d.state
    const generation = o.backfill?.metadata.generation ?? 1
    const deleting = Boolean(o.backfill?.metadata.deletionTimestamp)

    // Every status.reason belongs to its phase's list.
    if (
      d.status &&
      !(REASONS[d.status.phase ?? 'WaitingForIdle'] as readonly string[]).includes(d.status.reason ?? '')
    ) {
      this.fail(`reason ${d.status.reason} is not one of phase ${d.status.phase}`)
    }

    const creates = d.actions.filter((a) => a.type === 'createJob')
    for (const create of creates) {
      if (b.created.has(create.jobName)) continue // the same attempt's Job, re-asked for: not an admission
      // Never admit inside an idle window.
      const spec = o.backfill ? checkSpec(o.backfill.spec) : null
      const idleForMs = spec && 'resolved' in spec ? spec.resolved.idleForMs : Number.NaN
      const m = this.modelIndex(o.backfill?.spec.modelRef ?? '')
      const windowFrom = Math.max(
        Date.parse(out?.windowStart ?? '') || Number.NEGATIVE_INFINITY,
        Date.parse(prior?.windowStart ?? '') || Number.NEGATIVE_INFINITY,
        this.lastForeground[m] as number,
      )
      if (!(this.now >= windowFrom + idleForMs)) {
        this.fail(`admitted ${create.jobName} at ${iso(this.now)} inside the idle window from ${iso(windowFrom)}`)
      }
      // After a cancel, a fresh full window counted from when the cancelled Job was gone.
      if (b.cancelledJobGoneAt !== undefined && this.now < b.cancelledJobGoneAt + idleForMs) {
        this.fail(`admitted ${create.jobName} less than idleFor after the cancelled Job was gone`)
      }
      // Failed never repeats without a spec change.
      if (prior?.phase === 'Failed' && prior.generation === generation) this.fail('admitted from Failed')
    }

    // Failed is left only through a generation bump (or the object going away).
    if (prior?.phase === 'Failed' && out && out.phase !== 'Failed' && prior.generation === generation && !deleting) {
      this.fail(`left Failed for ${out.phase} without a spec change`)
    }

    // A completed Job wins over a coincident cancel signal: Succeeded, no preemption counted for it.
    const inFlight = prior && ['Starting', 'Running', 'Cancelling'].includes(prior.phase)
    if (inFlight && o.job?.outcome === 'Complete' && !deleting && out) {
      if (out.phase !== 'Succeeded') this.fail(`a completed Job yielded ${out.phase}/${out.reason}`)
      if (total(out.counters.preemptions) > total(prior.counters.preemptions)) {
        this.fail('a completed Job was counted as a preemption')
      }
    }

    // Attempts equals the number of distinct Job names ever asked for.
    if (out) {
      const names = new Set([...b.created, ...creates.map((c) => c.jobName)])
      if (out.attempts !== names.size) this.fail(`attempts ${out.attempts} but ${names.size} distinct Job names`)
    }

    // Deleting the ModelBackfill: the Job goes before the finalizer.
    if (d.actions.some((a) => a.type === 'removeFinalizer')) {
      const active = [...this.jobs.values()].some((j) => j.owner === i && !j.view.deleting && !j.view.outcome)
      if (active) this.fail('finalizer removed while the Job is still active')
    }

    // Idempotent: deciding again on the result, same world, same trigger, converges and admits nothing new.
    if (out && !knownNonIdempotent(o, out)) {
      // Same world: only the Job decide looks at follows the state's jobName (actions are not applied yet).
      const job = out.jobName === prior?.jobName ? o.job : (this.jobs.get(out.jobName ?? '')?.view ?? null)
      const again = decide(
        { ...structuredClone(o), state: structuredClone(out), job: structuredClone(job) },
        trigger,
        this.now,
      )
      if (!sameState(out, again.state)) {
        this.fail(
          `not idempotent:\n first  ${JSON.stringify(out)}\n second ${JSON.stringify(again.state)}\n actions ${JSON.stringify(again.actions)}`,
        )
      }
      const newCreate = again.actions.find((a) => a.type === 'createJob' && a.jobName !== out.jobName)
      if (newCreate) this.fail(`deciding again creates another Job: ${JSON.stringify(newCreate)}`)
    }
  }

  private applyActions(i: number, o: Observed, d: Decision) {
    const b = this.bfs[i] as SimBackfill
    for (const a of d.actions) {
      switch (a.type) {
        case 'addFinalizer':
          if (b.object)
            b.object.metadata.finalizers = [...(b.object.metadata.finalizers ?? []), 'ai.flexinfer/modelbackfill']
          break
        case 'removeFinalizer':
          if (b.object) {
            b.object.metadata.finalizers = []
            if (b.object.metadata.deletionTimestamp) b.object = null
          }
          break
        case 'createJob': {
          b.created.add(a.jobName)
          if (this.jobs.has(a.jobName)) break // AlreadyExists: the same attempt
          const model = o.backfill?.spec.modelRef ?? ''
          this.jobs.set(a.jobName, {
            owner: i,
            cancelled: false,
            view: aJob(a.jobName, {
              model,
              node: a.node,
              ownerUid: o.backfill?.metadata.uid,
              createdAt: iso(this.now),
            }),
          })
          const claim = { bf: i, jobName: a.jobName, idleSince: d.state?.idleSince }
          this.claims.set(`model.${model}`, claim)
          this.claims.set(`node.${a.node}`, claim)
          break
        }
        case 'deleteJob':
          this.deleteJob(a.jobName, a.why)
          break
        case 'releaseClaims':
          for (const [key, claim] of this.claims) if (claim.jobName === a.jobName) this.claims.delete(key)
          break
        case 'armTimer':
          b.timerAt = Date.parse(a.at)
          break
        case 'cancelTimer':
          b.timerAt = undefined
          break
        case 'deleteState':
        case 'recordEvent':
          break
      }
    }
  }

  /** Never two active Jobs per model or per node. */
  private checkWorld() {
    const active = [...this.jobs.values()].filter((j) => !j.view.deleting && !j.view.outcome)
    for (const [x, y] of pairs(active)) {
      if (x.view.model === y.view.model)
        this.fail(`two active Jobs on model ${x.view.model}: ${x.view.name}, ${y.view.name}`)
      if (x.view.node === y.view.node)
        this.fail(`two active Jobs on node ${x.view.node}: ${x.view.name}, ${y.view.name}`)
    }
  }
}

const total = (p: Partial<Record<string, number>>) => Object.values(p).reduce<number>((s, n) => s + (n ?? 0), 0)

function* pairs<T>(xs: T[]): Generator<[T, T]> {
  for (let i = 0; i < xs.length; i++) for (let j = i + 1; j < xs.length; j++) yield [xs[i] as T, xs[j] as T]
}

/**
 * Two places where deciding twice on the same world is known not to converge in one step (see the report that
 * came with these tests); everything else must be idempotent.
 */
function knownNonIdempotent(o: Observed, out: BackfillState): boolean {
  const b = o.backfill
  // 1. Deletion while the Job is active and not yet seen deleting: the "other" preemption is counted per decision.
  if (b?.metadata.deletionTimestamp && o.job && !o.job.outcome && !o.job.deleting) return true
  // 2. A terminal outcome concluded for an older generation: the next decision clears it and starts over.
  if ((out.phase === 'Succeeded' || out.phase === 'Failed') && out.generation !== (b?.metadata.generation ?? 1)) {
    return true
  }
  return false
}
