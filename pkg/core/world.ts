// Read-only views of the objects the system observes. Parsing is lenient on purpose: these objects belong to
// FlexInfer (or to users), and a field we do not understand must never stop a backfill from being decided.
import { ANNOTATION_MODEL, ANNOTATION_NODE, LABEL_BACKFILL } from './names.js'

type Obj = Record<string, unknown>
const obj = (v: unknown): Obj => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : {})
const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined)
/** A timestamp as an ISO string: raw JSON carries strings, the typed client (e.g. readNamespacedJob) Date objects. */
const time = (v: unknown): string | undefined =>
  v instanceof Date ? (Number.isNaN(v.getTime()) ? undefined : v.toISOString()) : str(v)

/**
 * A view remembered per object: an observed object is never changed in place (a watch replaces it when it changes —
 * client-node's informer stores the new object — and a read returns a new one), and admit builds the view of every
 * backfill Job in the cluster on every admission from the same watched objects. Handed out frozen: one reader cannot
 * change what another reads.
 */
function remembered<V extends object>(view: (raw: unknown) => V): (raw: unknown) => V {
  const views = new WeakMap<object, V>()
  return (raw) => {
    if (!raw || typeof raw !== 'object') return Object.freeze(view(raw))
    let v = views.get(raw)
    if (v === undefined) {
      v = Object.freeze(view(raw))
      views.set(raw, v)
    }
    return v
  }
}

/** The parts every view reads: metadata, spec, status, and the object's identity. */
function parts(raw: unknown) {
  const o = obj(raw)
  const meta = obj(o.metadata)
  return {
    meta,
    spec: obj(o.spec),
    status: obj(o.status),
    id: { namespace: str(meta.namespace) ?? '', name: str(meta.name) ?? '' },
  }
}

export interface ModelView {
  namespace: string
  name: string
  ready: boolean
  phase?: string
  /** status.gpu.node, else spec.nodeSelector["kubernetes.io/hostname"]. */
  node?: string
  /** spec.gpu.shared: the GPU group the model lives in. */
  group?: string
  /** FlexInfer's own gateway writes this on foreground traffic; we treat it as a foreground signal. */
  lastActiveTime?: string
}

export const modelView = remembered((raw: unknown): ModelView => {
  const { spec, status, id } = parts(raw)
  const phase = str(status.phase)
  return {
    ...id,
    ready: phase === 'Ready',
    phase,
    node: str(obj(status.gpu).node) ?? str(obj(spec.nodeSelector)['kubernetes.io/hostname']),
    group: str(obj(spec.gpu).shared),
    lastActiveTime: str(status.lastActiveTime),
  }
})

export interface GamingSessionView {
  namespace: string
  name: string
  nodeName?: string
  mode: string
  expiresAt?: string
  deleting: boolean
}

export const gamingSessionView = remembered((raw: unknown): GamingSessionView => {
  const { meta, spec, id } = parts(raw)
  return {
    ...id,
    nodeName: str(spec.nodeName),
    mode: str(spec.mode) ?? 'gaming',
    expiresAt: str(spec.expiresAt),
    deleting: Boolean(meta.deletionTimestamp),
  }
})

export interface GPULeaseView {
  namespace: string
  name: string
  group?: string
  node?: string
  expiresAt?: string
}

export const gpuLeaseView = remembered((raw: unknown): GPULeaseView => {
  const { spec, id } = parts(raw)
  return {
    ...id,
    group: str(spec.group),
    node: str(spec.node),
    expiresAt: str(spec.expiresAt),
  }
})

export type JobOutcome = 'Complete' | 'Failed'

export interface JobView {
  namespace: string
  name: string
  uid?: string
  /** Value of the ai.flexinfer/model-backfill label. */
  backfillLabel?: string
  ownerUid?: string
  model?: string
  node?: string
  createdAt?: string
  deleting: boolean
  /** metadata.deletionTimestamp (whole seconds): decide tells a failure the deletion caused from one before it. */
  deletedAt?: string
  outcome?: JobOutcome
  /** Message of the terminal condition, e.g. "Job was active longer than specified deadline". */
  outcomeMessage?: string
  outcomeTime?: string
  started: boolean
  /** spec.suspend: the Job (from its template) is created suspended and does not start until resumed. */
  suspended?: boolean
}

export const jobView = remembered((raw: unknown): JobView => {
  const { meta, spec, status, id } = parts(raw)
  const labels = obj(meta.labels)
  const annotations = obj(meta.annotations)
  const owner = (Array.isArray(meta.ownerReferences) ? meta.ownerReferences : []).map(obj).find((r) => r.controller)
  const conditions = (Array.isArray(status.conditions) ? status.conditions : []).map(obj)
  const terminal = conditions.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True')
  return {
    ...id,
    uid: str(meta.uid),
    backfillLabel: str(labels[LABEL_BACKFILL]),
    ownerUid: str(owner?.uid),
    model: str(annotations[ANNOTATION_MODEL]),
    node: str(annotations[ANNOTATION_NODE]),
    createdAt: time(meta.creationTimestamp),
    deleting: Boolean(meta.deletionTimestamp),
    ...(meta.deletionTimestamp ? { deletedAt: time(meta.deletionTimestamp) } : {}),
    outcome: terminal ? (terminal.type as JobOutcome) : undefined,
    outcomeMessage: str(terminal?.message) ?? str(terminal?.reason),
    outcomeTime: time(status.completionTime) ?? time(terminal?.lastTransitionTime),
    started: Boolean(status.startTime) || Number(status.active ?? 0) > 0,
    ...(spec.suspend === true ? { suspended: true } : {}),
  }
})

/** A Job that still counts as a backfill running on its model and node. */
export const isActiveJob = (job: JobView) => !job.deleting && !job.outcome

const isoMs = (iso: string | undefined) => (iso ? Date.parse(iso) : Number.NaN)

/** Unexpired: no expiry, an unparsable one (fail safe: foreground wins), or one in the future. */
export const unexpired = (expiresAt: string | undefined, now: number) => {
  const at = isoMs(expiresAt)
  return Number.isNaN(at) || at > now
}

export function blockingGamingSession(sessions: GamingSessionView[], node: string | undefined, now: number) {
  if (!node) return undefined
  return sessions.find((s) => s.nodeName === node && s.mode === 'gaming' && unexpired(s.expiresAt, now))
}

export function blockingLease(leases: GPULeaseView[], model: ModelView, now: number) {
  return leases.find(
    (l) =>
      unexpired(l.expiresAt, now) &&
      ((model.node !== undefined && l.node === model.node) || (model.group !== undefined && l.group === model.group)),
  )
}
