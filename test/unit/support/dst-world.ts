// The deterministic simulation's world changed event by event (support/dst.ts with `driven`), as a driver
// (support/dst-driven.ts) changes it: a user's edits of a ModelBackfill, Models turning Ready or moving, gaming
// sessions and GPU leases coming and going, the Job controller's reports and the garbage collector, foreground
// requests, the bus's timers firing — each delivered to the handler the source (functions/source) or the bus would
// deliver it to, then run until nothing is in flight.
import type { ModelBackfill } from '../../../pkg/core/api.js'
import type { ResyncReason } from '../../../pkg/core/resync.js'
import { NS, Simulation } from './dst.js'
import type { SimOptions } from './dst-options.js'
import { type LeaseSpec, type ModelSpec, rawLease, rawModel, rawSession, type SessionSpec } from './dst-world-spec.js'
import { deepFreeze, type StoredJob } from './memory-ports.js'

/** Steps a driven event may take to run out: far more than any takes; past it, something loops. */
const QUIET_STEPS_MAX = 5_000

export class DrivenSimulation extends Simulation {
  constructor(options: Omit<SimOptions, 'driven'>) {
    super({ ...options, driven: true })
  }

  /** A ModelBackfill changed by a user (spec, suspend, deletion). */
  editBackfill(name: string, edit: (b: ModelBackfill) => ModelBackfill) {
    this.log(() => `edit ${name}`)
    this.changeBackfill(name, edit)
  }

  /** The Model `name` as the world holds it. */
  model(name: string): ModelSpec | undefined {
    return this.modelSpecs.get(name)
  }

  /** A Model changed (readiness, node, lastActiveTime): its watched copy told, lifecycle sent model.ready. */
  editModel(name: string, edit: (m: ModelSpec) => ModelSpec) {
    const cur = this.modelSpecs.get(name)
    if (!cur) return
    const m = edit(cur)
    this.modelSpecs.set(name, m)
    const raw = deepFreeze(rawModel(NS, m))
    this.models.set(name, raw)
    this.copies.models.apply(`${NS}/${name}`, raw)
    this.log(() => `model ${name} ${JSON.stringify(m)}`)
    this.deliverTo('lifecycle', `lifecycle(${name} model)`, {
      ...this.envelope(),
      type: 'ai.flexinfer.model.ready',
      data: {
        namespace: NS,
        model: name,
        ready: m.ready,
        node: m.node,
        lastActiveTime: m.lastActiveTime,
        deleted: false,
      },
    })
  }

  /** The one GamingSession of the world (null: none); `deliver` false: lifecycle is not told (yet). */
  setSession(s: SessionSpec | null, deliver = true) {
    this.sessions = s ? [deepFreeze(rawSession(s))] : []
    this.copies.gamingSessions.relist(this.sessions)
    this.log(() => `session ${JSON.stringify(s)}`)
    if (!deliver) return
    this.deliverTo('lifecycle', 'lifecycle(session)', {
      ...this.envelope(),
      type: 'ai.flexinfer.gaming.session',
      data: { namespace: 'gaming', name: 'session-1', nodeName: s?.nodeName, deleted: !s },
    })
  }

  /** The one GPULease of the world (null: none). */
  setLease(l: LeaseSpec | null, deliver = true) {
    this.leases = l ? [deepFreeze(rawLease(l))] : []
    this.copies.gpuLeases.relist(this.leases)
    this.log(() => `lease ${JSON.stringify(l)}`)
    if (!deliver) return
    this.deliverTo('lifecycle', 'lifecycle(lease)', {
      ...this.envelope(),
      type: 'ai.flexinfer.gpu.lease',
      data: { namespace: 'leases', name: 'lease-1', node: l?.node, group: l?.group, deleted: !l },
    })
  }

  /** The stored Job `name`, if the apiserver has it. */
  job(name: string): StoredJob | undefined {
    return this.jobs.jobs.get(`${NS}/${name}`)
  }

  /** The Job controller's report on `j`: its pod started, or the Job finished; the watch tells lifecycle. */
  jobReport(j: StoredJob, outcome?: 'Complete' | 'Failed') {
    j.started = true
    if (outcome) j.outcome = outcome
    this.setJobStatus(j)
    this.log(() => `job ${j.job.metadata?.name} ${j.outcome ?? 'started'}`)
    this.jobChanged(j)
  }

  /** `j` gone from the apiserver (its pods gone after a delete, or collected once finished). */
  removeJob(j: StoredJob) {
    this.jobs.remove(NS, j.job.metadata?.name ?? '')
    this.log(() => `gone ${j.job.metadata?.name}`)
    this.jobChanged(j)
  }

  /** A foreground request for `model` now, on its per-model subject, handed to demand. */
  foreground(model: string) {
    const stored = this.requests.store({ namespace: NS, model, at: this.now, subject: 'perModel' })
    this.log(() => `request ${model}`)
    this.deliverDemand(stored)
  }

  /** When the bus's timer for `name` is due (epoch ms), if one is stored. */
  timerAt(name: string): number | undefined {
    const t = this.armed.get(name)
    return t ? Date.parse(t.at) : undefined
  }

  /** The stored timer for `name` lost (its firing dead-lettered). */
  loseTimer(name: string) {
    this.armed.delete(name)
  }

  /** The earliest stored timer fires (time moved on to it if it was later); false when none is stored. */
  tick(): boolean {
    let due: [string, string] | undefined
    for (const [name, t] of this.armed) if (!due || Date.parse(t.at) < Date.parse(due[1])) due = [name, t.at]
    if (!due) return false
    const [name, at] = due
    this.armed.delete(name)
    this.now = Math.max(this.now, Date.parse(at))
    this.deliverTo('admit', `admit(${name} timer)`, {
      ...this.envelope(),
      type: 'ai.flexinfer.timer.fired',
      data: { namespace: NS, backfill: name, due: at },
    })
    return true
  }

  /** A resync of `name` (the sweep's backfill.resync, for `reason`), to lifecycle. */
  resync(name: string, reason: ResyncReason) {
    this.deliverTo('lifecycle', `lifecycle(${name} resync)`, {
      ...this.envelope(),
      type: 'ai.flexinfer.backfill.resync',
      data: { namespace: NS, backfill: name, reason },
    })
  }

  /** Every backfill as first seen, then quiet. */
  async begin() {
    await Promise.resolve()
    for (const b of this.world.backfills) this.changeBackfill(b.name, (x) => x)
    await this.quiesce()
  }

  /** Runs everything in flight, and every handler's own timer, to its end (bounded); the oracle after each step. */
  async quiesce() {
    for (let i = 0; i < QUIET_STEPS_MAX; i++) {
      await this.settle()
      this.check()
      if (!this.next()) return
    }
    this.fail(`not quiet after ${QUIET_STEPS_MAX} steps`)
  }

  /** The schedule so far, joined (driven runs record it: a failure shows it). */
  get scheduleText() {
    return this.schedule.join('\n')
  }
}
