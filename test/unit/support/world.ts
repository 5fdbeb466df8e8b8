// A world factory for decide(): small builders for every object decide observes, with defaults that describe one
// quiet, admissible world (a Ready model on node-a, a template without GPUs, no sessions, leases or contenders).
// Tests state only what differs from that world.
import type { V1CronJob } from '@kubernetes/client-node'
import {
  type CancelReason,
  FINALIZER,
  type ModelBackfill,
  type ModelBackfillSpec,
  type ModelBackfillStatus,
} from '../../../pkg/core/api.js'
import { decide } from '../../../pkg/core/decide.js'
import type { Contender, Decision, Observed, TemplateObservation, Trigger } from '../../../pkg/core/decision.js'
import type { GpuViolation } from '../../../pkg/core/job.js'
import { backfillLabelValue, jobName } from '../../../pkg/core/names.js'
import type { ModelIdleState } from '../../../pkg/core/state.js'
import type { GamingSessionView, GPULeaseView, JobView, ModelView } from '../../../pkg/core/world.js'
import type { Logger } from '../../../pkg/observability/log.js'

export const NS = 'ns'
export const BACKFILL = 'bf'
export const BACKFILL_UID = 'uid-bf'
export const MODEL = 'llm'
export const TEMPLATE = 'tpl'
export const NODE = 'node-a'
export const OTHER_NODE = 'node-b'
export const GPU_GROUP = 'gpu-group-1'

export const SECOND = 1000
export const MINUTE = 60 * SECOND
export const HOUR = 60 * MINUTE
/** The epoch of every scenario; times are written as T0 + offset. */
export const T0 = Date.parse('2026-03-01T00:00:00.000Z')
export const iso = (ms: number) => new Date(ms).toISOString()

/** Job name of attempt n of the default backfill. */
export const J = (attempt: number, backfill = BACKFILL) => jobName(backfill, attempt)

export interface BackfillOptions {
  name?: string
  uid?: string
  generation?: number
  spec?: Partial<ModelBackfillSpec>
  finalizers?: string[]
  deletionTimestamp?: string
  status?: ModelBackfillStatus
}

export function aBackfill(o: BackfillOptions = {}): ModelBackfill {
  const b: ModelBackfill = {
    apiVersion: 'ai.flexinfer/v1alpha2',
    kind: 'ModelBackfill',
    metadata: {
      name: o.name ?? BACKFILL,
      namespace: NS,
      uid: o.uid ?? BACKFILL_UID,
      generation: o.generation ?? 1,
      finalizers: o.finalizers ?? [FINALIZER],
    },
    spec: { modelRef: MODEL, templateRef: TEMPLATE, idleFor: '10m', maxRunDuration: '30m', ...o.spec },
  }
  if (o.deletionTimestamp) b.metadata.deletionTimestamp = o.deletionTimestamp
  if (o.status) b.status = o.status
  return b
}

export const aModel = (o: Partial<ModelView> = {}): ModelView => ({
  namespace: NS,
  name: MODEL,
  ready: true,
  phase: 'Ready',
  node: NODE,
  group: GPU_GROUP,
  ...o,
})

export const anIdleState = (lastForegroundAt: number, model = MODEL): ModelIdleState => ({
  namespace: NS,
  model,
  lastForegroundAt: iso(lastForegroundAt),
  requests: 1,
  updatedAt: iso(lastForegroundAt),
})

export const aGamingSession = (o: Partial<GamingSessionView> = {}): GamingSessionView => ({
  namespace: 'gaming',
  name: 'session-1',
  nodeName: NODE,
  mode: 'gaming',
  deleting: false,
  ...o,
})

export const aLease = (o: Partial<GPULeaseView> = {}): GPULeaseView => ({
  namespace: 'leases',
  name: 'lease-1',
  node: NODE,
  ...o,
})

/** A backfill Job as the adapter observes it; pending (created, not started) unless told otherwise. */
export const aJob = (name: string, o: Partial<JobView> = {}): JobView => ({
  namespace: NS,
  name,
  uid: `uid-${name}`,
  backfillLabel: backfillLabelValue(BACKFILL),
  ownerUid: BACKFILL_UID,
  model: MODEL,
  node: NODE,
  deleting: false,
  started: false,
  ...o,
})

export const aContender = (o: Partial<Contender> = {}): Contender => ({
  namespace: NS,
  backfill: 'other',
  jobName: jobName('other', 1),
  on: 'model',
  ...o,
})

export const templateFound: TemplateObservation = { found: true, gpu: [] }
export const templateMissing: TemplateObservation = { found: false }
export const templateWithGpu = (
  v: GpuViolation = { container: 'main', resource: 'limits.nvidia.com/gpu', quantity: '1' },
): TemplateObservation => ({ found: true, gpu: [v] })

/**
 * What the cancel function hands decide after it has deleted the attempt's Job (the demand function asks for it
 * when a foreground request breaks the window of a claimed attempt; lifecycle forwards the other reasons).
 */
export const cancelRequest = (at: number, reason: CancelReason = 'ForegroundDemand'): Trigger => ({
  type: 'cancel',
  reason,
  at: iso(at),
})

/** The observed world: quiet and admissible unless overridden. */
export const aWorld = (o: Partial<Observed> = {}): Observed => ({
  backfill: aBackfill(),
  state: null,
  model: aModel(),
  idle: null,
  gamingSessions: [],
  leases: [],
  template: templateFound,
  job: null,
  contenders: [],
  ...o,
})

/** Bumps metadata.generation the way the apiserver does on a spec change. */
export function withSpec(b: ModelBackfill, spec: Partial<ModelBackfillSpec>): ModelBackfill {
  return {
    ...b,
    metadata: { ...b.metadata, generation: (b.metadata.generation ?? 1) + 1 },
    spec: { ...b.spec, ...spec },
  }
}

/**
 * A running story: the world as the adapter would observe it, advanced one decision at a time. `step` decides
 * and commits the resulting state and status (as the adapter writes them); the world itself changes only through
 * `change`, so each test says exactly what happened between two decisions.
 */
export class Timeline {
  last: Decision | undefined
  constructor(public world: Observed = aWorld()) {}

  change(f: (o: Observed) => Partial<Observed>): this {
    this.world = { ...this.world, ...f(this.world) }
    return this
  }

  /** What decide says now, without committing it. */
  peek(now: number, trigger: Trigger = { type: 'timer' }): Decision {
    return decide(structuredClone(this.world), trigger, now)
  }

  step(now: number, trigger: Trigger = { type: 'timer' }): Decision {
    const d = this.peek(now, trigger)
    this.last = d
    const backfill =
      this.world.backfill && d.status ? { ...this.world.backfill, status: d.status } : this.world.backfill
    this.world = { ...this.world, state: d.state, backfill }
    return d
  }

  get state() {
    const s = this.world.state
    if (!s) throw new Error('no state')
    return s
  }
}

/** A logger that says nothing (the simulations and the tests driving reconcile() over in-memory ports). */
export const silentLogger = (() => {
  const noop = () => {}
  const log = { info: noop, warn: noop, error: noop, debug: noop, trace: noop, fatal: noop }
  return { ...log, isLevelEnabled: () => false, child: () => log } as unknown as Logger
})()

/** The CronJob a backfill copies: no GPU, no gate, one container. */
export const aCronJob = (name: string, uid: string): V1CronJob => ({
  metadata: { name, namespace: NS, uid },
  spec: {
    schedule: '0 0 1 1 *',
    jobTemplate: {
      spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'eval', image: 'busybox' }] } } },
    },
  },
})
