// The admission ports in memory: the same contracts as the real ones (pkg/admission/nats-ports.ts), for the
// deterministic simulation and unit tests. Every call first waits at a gate, where a scheduler decides when it runs
// and whether it fails — before it takes effect, or after (the reply lost) — or never answers (a crash there).
//
// Nothing here copies or re-serialises what it hands out: an entry, a stored Job, is one immutable object replaced on
// change (readers that held the old one keep it, as a reply already received), so thousands of schedules a second
// spend their time in the protocol, not in the ports.
import type { V1Job } from '@kubernetes/client-node'
import type {
  AdmissionPorts,
  CasWrite,
  ClaimStore,
  Clock,
  CreateResult,
  Cursor,
  DeleteResult,
  Entry,
  FenceResult,
  JobApi,
  RequestLog,
} from '../../../pkg/admission/ports.js'
import { modelKey } from '../../../pkg/core/names.js'
import type { Logger } from '../../../pkg/observability/log.js'

export type Verdict = 'ok' | 'failBefore' | 'failAfter'
/**
 * Where a call waits for its turn. `op` names the kind of call (`claims.create`), `detail` what it is about, built only
 * when a schedule is printed.
 */
export type Gate = (op: string, detail?: () => string) => Promise<Verdict>
export const immediate: Gate = () => OK
const OK: Promise<Verdict> = Promise.resolve('ok')

/**
 * A failure the scheduler injected (a timeout before or after the call took effect): anything else is a bug. Without
 * a stack: thousands are thrown a second, and where one came from is in the schedule, not in a stack.
 */
export class SimulatedFault extends Error {
  constructor(message: string) {
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = 0
    super(message)
    Error.stackTraceLimit = limit
  }
}

/** Errors thrown on every lost compare-and-set: without a stack (capturing one cost more than the write). */
function quietError<E extends Error>(make: () => E): E {
  const limit = Error.stackTraceLimit
  Error.stackTraceLimit = 0
  try {
    return make()
  } finally {
    Error.stackTraceLimit = limit
  }
}

async function step<T>(gate: Gate, op: string, detail: (() => string) | undefined, effect: () => T): Promise<T> {
  const verdict = await gate(op, detail)
  if (verdict === 'failBefore') throw new SimulatedFault(`${op}${detail ? ` ${detail()}` : ''}: timeout (not applied)`)
  const result = effect()
  if (verdict === 'failAfter')
    throw new SimulatedFault(`${op}${detail ? ` ${detail()}` : ''}: timeout (applied, reply lost)`)
  return result
}

/** A NATS KV entry's shape, for code that reads a bucket directly. */
export interface KvEntryLike extends Entry {
  bucket: string
  key: string
  string(): string
}

export class MemoryKv implements ClaimStore {
  /** Each entry is the object every reader gets (never changed: a write stores a new one). */
  private readonly entries = new Map<string, KvEntryLike>()
  private seq = 0
  /** Counts every write: the simulation's oracle re-reads the bucket only when it moved. */
  writes = 0
  /** Told of every write as it is stored (a watch of the bucket, as KvMirror follows it on NATS). */
  onWrite?: (key: string, entry: Entry) => void

  /** `atomic` false: a bucket whose stream refuses atomic batches (made by an older release): writeTogether says so. */
  constructor(
    readonly bucket: string,
    private readonly gate: Gate = immediate,
    readonly atomic = true,
  ) {}

  /** The entry as stored now, without a gate (the simulation's oracle). */
  peek(key: string): Entry | null {
    return this.entries.get(key) ?? null
  }

  keys(): string[] {
    return [...this.entries.keys()]
  }

  private write(key: string, operation: Entry['operation'], text: string) {
    this.seq++
    this.writes++
    const bucket = this.bucket
    const entry = Object.freeze({ operation, revision: this.seq, text, bucket, key, string: () => text })
    this.entries.set(key, entry)
    this.onWrite?.(key, entry)
    return this.seq
  }

  private conflict(key: string): never {
    throw quietError(() => new Error(`wrong last sequence: ${this.bucket}/${key} (10071)`))
  }

  get(key: string) {
    return step(
      this.gate,
      `${this.bucket}.get`,
      () => key,
      () => this.entries.get(key) ?? null,
    )
  }

  /** A write's label in a schedule: the key, and the value's phase and Job when it has them. */
  private label(key: string, text: string) {
    return () => {
      const m = /"phase":"(\w+)".*?"reason":"(\w+)"/.exec(text)
      const j = /"jobName":"([^"]+)"/.exec(text)
      const at = /"claimedAt":"[^"]*T([^"Z]+)/.exec(text)
      return `${key}${m ? ` ${m[1]}/${m[2]}` : ''}${j ? ` ${j[1]}` : ''}${at ? `@${at[1]}` : ''}`
    }
  }

  create(key: string, text: string) {
    return step(this.gate, `${this.bucket}.create`, this.label(key, text), () => {
      if (this.entries.get(key)?.operation === 'PUT') this.conflict(key)
      return this.write(key, 'PUT', text)
    })
  }

  update(key: string, text: string, revision: number) {
    return step(this.gate, `${this.bucket}.update`, this.label(key, text), () => {
      if ((this.entries.get(key)?.revision ?? 0) !== revision) this.conflict(key)
      return this.write(key, 'PUT', text)
    })
  }

  /** An atomic batch of compare-and-sets (NATS allow_atomic): every write or none, one call. */
  writeTogether(writes: readonly CasWrite[]) {
    // Known refused (a process that was told so once): nothing sent, the keys written one by one.
    if (!this.atomic) return Promise.resolve(false)
    const first = writes[0]
    const label = first
      ? () =>
          `${writes.map((w) => w.key).join('+')} ${this.label(first.key, first.value)().split(' ').slice(1).join(' ')}`
      : undefined
    return step(this.gate, `${this.bucket}.writeTogether`, label, () => {
      for (const w of writes) if ((this.entries.get(w.key)?.revision ?? 0) !== w.revision) this.conflict(w.key)
      for (const w of writes) this.write(w.key, 'PUT', w.value)
      return true
    })
  }

  /** Without a revision: unconditional (a NATS KV delete without previousSeq). */
  delete(key: string, revision?: number | { previousSeq?: number }) {
    const expected = typeof revision === 'number' ? revision : revision?.previousSeq
    return step(
      this.gate,
      `${this.bucket}.delete`,
      () => key,
      () => {
        if (expected !== undefined && (this.entries.get(key)?.revision ?? 0) !== expected) this.conflict(key)
        this.write(key, 'DEL', '')
      },
    )
  }

  /** Unconditional write (the simulation's setup). */
  put(key: string, text: string) {
    return step(
      this.gate,
      `${this.bucket}.put`,
      () => key,
      () => this.write(key, 'PUT', text),
    )
  }
}

export interface StoredRequest {
  seq: number
  namespace: string
  model: string
  at: number
  subject: 'documented' | 'perModel'
  background?: boolean
}

/**
 * The two foreground streams and the idle bucket. `store` is a request's publish; demand's progress is `ackFloor`
 * (the foreground subject's requests it acknowledged), whether demand and cancel consume is `consuming`.
 */
export class MemoryRequests implements RequestLog {
  readonly stored: StoredRequest[] = []
  private readonly newestPerModel = new Map<string, number>()
  lastSeq = 0
  ackFloor = 0
  consuming = { demand: true, cancel: true }
  /** The foreground subject's requests one read may look at (pkg/admission/nats-ports.ts MAX_UNSEEN_REQUESTS). */
  maxUnseen = 256

  constructor(
    readonly idleKv: MemoryKv,
    private readonly clock: Clock,
    private readonly gate: Gate = immediate,
  ) {}

  store(r: Omit<StoredRequest, 'seq'>): StoredRequest {
    const stored = { ...r, seq: r.subject === 'documented' ? ++this.lastSeq : 0 }
    this.stored.push(stored)
    if (r.subject === 'perModel') this.newestPerModel.set(modelKey(r.namespace, r.model), r.at)
    return stored
  }

  fence(): Promise<FenceResult> {
    return step(this.gate, 'requests.fence', undefined, (): FenceResult => {
      const cursor = this.ackFloor
      if (!this.consuming.demand)
        return { ready: false, why: 'no demand instance is pulling foreground requests', cursor }
      if (!this.consuming.cancel) return { ready: false, why: 'no cancel instance is pulling cancel requests', cursor }
      // Not waited for here (the real fence polls up to FENCE_WAIT_MS): behind is not ready.
      if (this.ackFloor < this.lastSeq) {
        const why = `demand has not yet processed ${this.lastSeq - this.ackFloor} foreground requests`
        return { ready: false, why, cursor }
      }
      return { ready: true, cursor: this.lastSeq }
    })
  }

  idle(namespace: string, model: string) {
    return this.idleKv.get(modelKey(namespace, model))
  }

  newest(namespace: string, model: string, since?: Cursor) {
    return step(
      this.gate,
      'requests.newest',
      () => model,
      () => {
        const perModel = this.newestPerModel.get(modelKey(namespace, model))
        let newest = perModel ?? Number.NEGATIVE_INFINITY
        let cursor: Cursor | undefined
        if (since !== undefined) {
          cursor = this.lastSeq
          if (this.lastSeq - since > this.maxUnseen) {
            newest = this.clock.now()
            cursor = since
          } else {
            for (const r of this.stored) {
              if (r.seq <= since || r.subject !== 'documented' || r.background) continue
              if (r.namespace === namespace && r.model === model) newest = Math.max(newest, r.at)
            }
          }
        }
        return { at: Number.isFinite(newest) ? new Date(newest).toISOString() : null, cursor }
      },
    )
  }
}

export interface StoredJob {
  /** As the apiserver returns it: replaced, never changed, when the Job changes (see `update`). */
  job: V1Job
  uid: string
  createdAt: number
  deletedAt?: number
  outcome?: 'Complete' | 'Failed'
  started?: boolean
}

/** Freezes what a port hands out, so that a reader that changed it in place fails loudly instead of changing the world. */
export function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o)
    for (const v of Object.values(o)) deepFreeze(v)
  }
  return o
}

/** Jobs by `<namespace>/<name>`; `onChange` is the watch (lifecycle's wake-ups). */
export class MemoryJobs implements JobApi {
  readonly jobs = new Map<string, StoredJob>()
  private uids = 0
  /** Every create that took effect (the oracle's record, kept after the Job is gone). */
  readonly created: StoredJob[] = []
  /** Counts every change: the simulation's oracle looks again only when something moved. */
  changes = 0

  constructor(
    private readonly clock: Clock,
    private readonly gate: Gate = immediate,
    private readonly onChange: (j: StoredJob) => void = () => {},
  ) {}

  create(job: V1Job) {
    const namespace = job.metadata?.namespace ?? ''
    const name = job.metadata?.name ?? ''
    return step(
      this.gate,
      'jobs.create',
      () => name,
      (): CreateResult => {
        const key = `${namespace}/${name}`
        const existing = this.jobs.get(key)
        if (existing) return { result: 'exists', uid: existing.uid }
        const uid = `job-uid-${++this.uids}`
        const now = this.clock.now()
        const stored: StoredJob = {
          // The one copy: the caller keeps its own object.
          job: deepFreeze(
            structuredClone({
              ...job,
              metadata: { ...job.metadata, uid, creationTimestamp: new Date(now) as unknown as Date },
            }),
          ),
          uid,
          createdAt: now,
        }
        this.jobs.set(key, stored)
        this.created.push(stored)
        this.changes++
        this.onChange(stored)
        return { result: 'created', uid }
      },
    )
  }

  /** Replaces a stored Job's object by `change` of it (its status, a deletion mark): readers keep what they read. */
  update(stored: StoredJob, change: (job: V1Job) => V1Job) {
    stored.job = deepFreeze(change(stored.job))
    this.changes++
  }

  delete(namespace: string, name: string, uid?: string) {
    return step(
      this.gate,
      'jobs.delete',
      () => name,
      (): DeleteResult => {
        const stored = this.jobs.get(`${namespace}/${name}`)
        if (!stored) return 'absent'
        if (uid && stored.uid !== uid) return 'replaced'
        if (stored.deletedAt === undefined) {
          const at = this.clock.now()
          stored.deletedAt = at
          this.update(stored, (job) => ({
            ...job,
            metadata: { ...job.metadata, deletionTimestamp: new Date(at) as unknown as Date },
          }))
          this.onChange(stored)
        }
        return 'deleted'
      },
    )
  }

  /**
   * The Job is gone from the apiserver (deleted and its pods gone, or collected after it finished): the world's doing,
   * never a port call, so no gate. `created` keeps it.
   */
  remove(namespace: string, name: string) {
    if (this.jobs.delete(`${namespace}/${name}`)) this.changes++
  }

  get(namespace: string, name: string) {
    return step(
      this.gate,
      'jobs.get',
      () => name,
      () => this.jobs.get(`${namespace}/${name}`)?.job ?? null,
    )
  }

  list() {
    return step(this.gate, 'jobs.list', undefined, () => [...this.jobs.values()].map((s) => s.job))
  }
}

export function memoryPorts(o: {
  claims: MemoryKv
  states: MemoryKv
  requests: MemoryRequests
  jobs: JobApi
  clock: Clock
  log: Logger
}): AdmissionPorts {
  return { ...o }
}
