// What the deterministic simulation's world is made of (support/dst.ts): its backfills and Models, and the
// apiserver's objects for them, sessions and leases, as the handlers read them.

export interface BackfillSpec {
  name: string
  model: string
  idleForMs: number
  /** 0 or absent: one-shot. */
  repeatAfterMs?: number
}

export interface ModelSpec {
  name: string
  node: string
  /** spec.gpu.shared; absent: no GPU group. */
  group?: string
  ready: boolean
  lastActiveTime?: string
}

export interface WorldSpec {
  backfills: BackfillSpec[]
  models: ModelSpec[]
}

export interface SessionSpec {
  nodeName: string
  expiresAt: string
  deleting: boolean
}

export interface LeaseSpec {
  node?: string
  group?: string
  expiresAt: string
}

/** A Model as the apiserver returns it. */
export const rawModel = (namespace: string, m: ModelSpec) => ({
  metadata: { namespace, name: m.name },
  ...(m.group ? { spec: { gpu: { shared: m.group } } } : {}),
  status: {
    phase: m.ready ? 'Ready' : 'Loading',
    gpu: { node: m.node },
    ...(m.lastActiveTime ? { lastActiveTime: m.lastActiveTime } : {}),
  },
})

export const SESSION = { namespace: 'gaming', name: 'session-1' }
export const LEASE = { namespace: 'leases', name: 'lease-1' }

/** A GamingSession as the apiserver returns it (deleting: its deletionTimestamp set). */
export const rawSession = (s: SessionSpec) => ({
  metadata: { ...SESSION, ...(s.deleting ? { deletionTimestamp: s.expiresAt } : {}) },
  spec: { nodeName: s.nodeName, mode: 'gaming', expiresAt: s.expiresAt },
})

export const rawLease = (l: LeaseSpec) => ({
  metadata: { ...LEASE },
  spec: { node: l.node, group: l.group, expiresAt: l.expiresAt },
})

export function* pairs<T>(xs: readonly T[]): Generator<[T, T]> {
  for (let i = 0; i < xs.length; i++) for (let j = i + 1; j < xs.length; j++) yield [xs[i] as T, xs[j] as T]
}
