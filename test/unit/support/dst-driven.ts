// The deterministic simulation (support/dst.ts) driven by world events, faults off: the real admit, cancel,
// lifecycle and demand handlers over the same in-memory ports, apiserver and bus, each event run until nothing is in
// flight before the next (support/dst.ts `driven`). What a property test of decide() or of the resync sweep needs: a
// history of world changes (sessions, leases, Models turning Ready or moving, suspends, spec changes, deletions
// with their finalizer, Jobs starting, finishing and being reaped, foreground requests, timers firing), each
// decision checked by the per-decision oracle (support/dst-decisions.ts) and the world by the simulation's own.
import type { ModelBackfill } from '../../../pkg/core/api.js'
import type { Observed } from '../../../pkg/core/decision.js'
import type { ResyncReason } from '../../../pkg/core/resync.js'
import { jobView, modelView } from '../../../pkg/core/world.js'
import { DecisionOracle } from './dst-decisions.js'
import { DrivenSimulation } from './dst-world.js'
import { rawModel, type WorldSpec } from './dst-world-spec.js'
import type { StoredJob } from './memory-ports.js'
import { iso, MINUTE } from './world.js'

export type Coincident = 'none' | 'foreground' | 'gaming' | 'lease' | 'suspend' | 'notReady' | 'specChange'

/** World changes and triggers, each followed by what the functions do about them. */
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

const NS = 'sim'
const NODES = ['node-0', 'node-1']
const MODELS = ['model-0', 'model-1']

export class DrivenSim {
  readonly sim: DrivenSimulation
  readonly oracle: DecisionOracle
  readonly names: readonly string[]

  constructor(
    readonly config: SimConfig,
    seed = 1,
  ) {
    this.names = config.names
    const world: WorldSpec = {
      models: MODELS.map((name, i) => ({ name, node: NODES[0] as string, group: `group-${i}`, ready: true })),
      backfills: config.names.map((name, i) => ({
        name,
        model: this.modelOf(i),
        idleForMs: (config.idleForMin[i] ?? 1) * MINUTE,
        repeatAfterMs: (config.repeatAfterMin[i] ?? 0) * MINUTE,
      })),
    }
    this.oracle = new DecisionOracle(() => this.sim, NS)
    this.sim = new DrivenSimulation({
      seed,
      world,
      trace: true,
      decided: (o, trigger, d) => this.oracle.decided(o, trigger, d),
    })
  }

  get now() {
    return this.sim.now
  }
  set now(ms: number) {
    this.sim.now = ms
  }

  get decisions() {
    return this.oracle.decisions
  }
  get seen() {
    return this.oracle.seen
  }
  /** The schedule so far. */
  get trace() {
    return this.sim.scheduleText
  }

  private modelOf(bf: number) {
    return this.config.share === 'model' ? (MODELS[0] as string) : (MODELS[bf] as string)
  }

  /** Every backfill created, then each event in turn. */
  async run(events: SimEvent[]) {
    await this.settled(() => this.sim.begin())
    for (const ev of events) await this.apply(ev)
  }

  /** Backfill i's object, state, attempt Job and Model as they stand. */
  view(i: number): Pick<Observed, 'backfill' | 'state' | 'job' | 'model'> {
    const name = this.names[i] as string
    const backfill = this.sim.backfill(name)
    const state = this.sim.state(name)
    const stored = state?.jobName ? this.sim.job(state.jobName) : undefined
    const model = this.sim.model(backfill?.spec.modelRef ?? this.modelOf(i))
    return {
      backfill,
      state,
      job: stored ? jobView(stored.job) : null,
      model: model ? modelView(rawModel(NS, model)) : null,
    }
  }

  state(i: number) {
    return this.sim.state(this.names[i] as string)
  }

  /** Distinct Job names backfill i's admissions POSTed. */
  created(i: number) {
    return this.oracle.created(this.names[i] as string)
  }

  /** When the bus's stored timer for backfill i is due, if one is stored. */
  timerAt(i: number) {
    return this.sim.timerAt(this.names[i] as string)
  }

  loseTimer(i: number) {
    this.sim.loseTimer(this.names[i] as string)
  }

  /** The sweep picked backfill i: lifecycle re-decides it. */
  resync(i: number, reason: ResyncReason) {
    return this.settled(async () => {
      this.sim.resync(this.names[i] as string, reason)
      await this.sim.quiesce()
    })
  }

  /** Runs `body`, then checks the settled world; a violation a handler swallowed is thrown here. */
  private async settled(body: () => Promise<void>) {
    await body()
    if (this.oracle.violation) throw this.oracle.violation
    this.oracle.checkSettled(this.names)
  }

  apply(ev: SimEvent) {
    return this.settled(async () => {
      if (this.change(ev)) await this.sim.quiesce()
    })
  }

  /** The world change of `ev` and what it delivers; false: nothing to run. */
  private change(ev: SimEvent): boolean {
    const sim = this.sim
    switch (ev.k) {
      case 'advance':
        sim.now += ev.ms
        return false
      case 'tick':
        return sim.tick()
      case 'foreground':
        this.foreground(ev.model)
        return true
      case 'lastActive':
        this.oracle.noteForeground(MODELS[ev.model] as string, sim.now)
        sim.editModel(MODELS[ev.model] as string, (m) => ({ ...m, lastActiveTime: iso(sim.now) }))
        return true
      case 'jobStart':
      case 'jobFinish': {
        const job = this.activeJobOf(ev.bf)
        if (!job) return false
        // A cancel condition in the world at the very moment of the outcome: the decision on it sees both.
        if (ev.k === 'jobFinish') this.coincident(ev.bf, ev.with)
        sim.jobReport(job, ev.k === 'jobFinish' ? ev.outcome : undefined)
        return true
      }
      case 'reap': {
        for (const stored of [...sim.jobs.jobs.values()]) {
          const view = jobView(stored.job)
          if (!view.deleting && !(ev.finished && view.outcome)) continue
          sim.removeJob(stored)
          this.oracle.jobGone(stored)
        }
        return true
      }
      case 'gaming':
        sim.setSession(
          ev.on
            ? { nodeName: NODES[ev.node] as string, expiresAt: iso(sim.now + ev.ttlMs), deleting: ev.deleting }
            : null,
        )
        return true
      case 'lease': {
        const node = sim.model(MODELS[0] as string)?.node
        sim.setLease(
          ev.on
            ? {
                node: ev.by === 'node' ? node : undefined,
                group: ev.by === 'group' ? 'group-0' : undefined,
                expiresAt: iso(sim.now + ev.ttlMs),
              }
            : null,
        )
        return true
      }
      case 'suspend':
        return this.respec(ev.bf, (b) => ({ suspend: !b.spec.suspend }))
      case 'specChange':
        return this.respec(ev.bf, () => ({ idleFor: `${ev.idleForMin}m` }))
      case 'ready':
        sim.editModel(MODELS[ev.model] as string, (m) => ({ ...m, ready: ev.ready }))
        return true
      case 'move':
        sim.editModel(
          MODELS[ev.model] as string,
          (m) => ({ ...m, node: m.node === NODES[0] ? NODES[1] : NODES[0] }) as typeof m,
        )
        return true
      case 'delete': {
        const name = this.names[ev.bf] as string
        const b = sim.backfill(name)
        if (!b || b.metadata.deletionTimestamp) return false
        sim.editBackfill(name, (cur) => ({ ...cur, metadata: { ...cur.metadata, deletionTimestamp: iso(sim.now) } }))
        return true
      }
    }
  }

  private foreground(m: number) {
    const model = MODELS[m] as string
    this.oracle.noteForeground(model, this.sim.now)
    this.sim.foreground(model)
  }

  private coincident(i: number, what: Coincident) {
    const sim = this.sim
    const model = this.modelOf(i)
    const node = sim.model(model)?.node as string
    switch (what) {
      case 'none':
        return
      case 'foreground':
        return this.foreground(MODELS.indexOf(model))
      case 'gaming':
        return sim.setSession({ nodeName: node, expiresAt: iso(sim.now + 30 * MINUTE), deleting: false })
      case 'lease':
        return sim.setLease({ node, expiresAt: iso(sim.now + 30 * MINUTE) })
      case 'suspend':
        return void this.respec(i, () => ({ suspend: true }))
      case 'specChange':
        return void this.respec(i, () => ({ env: { RUN: String(sim.now) } }))
      case 'notReady':
        return sim.editModel(model, (m) => ({ ...m, ready: false }))
    }
  }

  /** A spec change by the user: a new generation. Not once the object is being deleted or gone. */
  private respec(i: number, spec: (b: ModelBackfill) => Partial<ModelBackfill['spec']>): boolean {
    const name = this.names[i] as string
    const b = this.sim.backfill(name)
    if (!b || b.metadata.deletionTimestamp) return false
    this.sim.editBackfill(name, (cur) => ({
      ...cur,
      spec: { ...cur.spec, ...spec(cur) },
      metadata: { ...cur.metadata, generation: (cur.metadata.generation ?? 1) + 1 },
    }))
    return true
  }

  /** The attempt's Job of backfill i while it runs (not deleting, no outcome). */
  private activeJobOf(i: number): StoredJob | undefined {
    const name = this.state(i)?.jobName
    const stored = name ? this.sim.job(name) : undefined
    return stored && stored.deletedAt === undefined && !stored.outcome ? stored : undefined
  }
}
