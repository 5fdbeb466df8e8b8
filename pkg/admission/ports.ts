// The admission protocol's view of the world: four small ports. The protocol (pkg/admission/protocol.ts,
// pkg/admission/claims.ts) is written against these only, so the same code runs on NATS and Kubernetes
// (pkg/admission/nats-ports.ts) and on in-memory ones (test/unit/support/memory-ports.ts) under the deterministic simulation.
import type { V1Job } from '@kubernetes/client-node'
import type { KvWrite } from '../jetstream/js-requests.js'
import type { Logger } from '../observability/log.js'

/** One key-value entry as admission reads it. A delete leaves a marker (operation DEL or PURGE), not nothing. */
export interface Entry {
  operation: 'PUT' | 'DEL' | 'PURGE'
  revision: number
  text: string
}

/**
 * A key-value bucket written only by compare-and-set. A write against a revision that is no longer the newest (or
 * a create of a key that holds a value) throws an error that isCasConflict() recognises; anything else it throws is
 * a failure of the store.
 */
export interface CasStore {
  get(key: string): Promise<Entry | null>
  create(key: string, text: string): Promise<number>
  update(key: string, text: string, revision: number): Promise<number>
  delete(key: string, revision: number): Promise<void>
}

/** One compare-and-set of `writeTogether`: `revision` as read, 0 for a key never written. */
export type CasWrite = KvWrite

/** The claims bucket: who holds which model and node (`model.<ns>.<model>`, `node.<node>`). */
export interface ClaimStore extends CasStore {
  /**
   * Compare-and-sets of several keys as one: every write applied or none, a conflict on any key thrown as one
   * (isCasConflict). False when the store cannot (nothing written): the caller writes them one by one.
   */
  writeTogether?(writes: readonly CasWrite[]): Promise<boolean>
}

/** The backfill states, read only here: whether a claim's holder has moved on is judged by its state. */
export interface StateReader {
  get(key: string): Promise<Entry | null>
}

/**
 * Where the foreground subject's stream stood when a read of it ended: every request stored at or before it has
 * been looked at (stream sequence). The next read only looks past it.
 */
export type Cursor = number

/**
 * `cursor`: every request on the foreground subject at or before it is in the idle state read after the fence
 * (demand acknowledged it); ready, it is where the stream ended when the fence began. Not ready, demand's
 * acknowledgement floor (0 when no demand consumer exists).
 */
export type FenceResult = { ready: true; cursor: Cursor } | { ready: false; why: string; cursor?: Cursor }

/** The foreground requests as stored, whatever subject they came on. */
export interface RequestLog {
  /**
   * The preemption path's readiness (pkg/admission/fence.ts): demand and cancel consuming, and demand caught up with every
   * request the foreground subject held when the check began.
   */
  fence(): Promise<FenceResult>
  /** The model's idle state as demand stored it (everything demand acknowledged is in it). */
  idle(namespace: string, model: string): Promise<Entry | null>
  /**
   * The store time of the model's newest request: its per-model subject's newest, and, given a cursor, every
   * foreground request stored on the foreground subject after it. `cursor` in the answer is where this read ended.
   * More requests past the cursor than one read may look at answer with the read's own time: demand that cannot be
   * observed holds the admission back.
   */
  newest(namespace: string, model: string, since?: Cursor): Promise<{ at: string | null; cursor?: Cursor }>
}

export type CreateResult = { result: 'created' | 'exists' | 'predecessor'; uid?: string }
export type DeleteResult = 'deleted' | 'absent' | 'replaced'

/** The Job API: a refusal no retry can fix throws JobRejectedError (pkg/kube/errors.ts). */
export interface JobApi {
  create(job: V1Job): Promise<CreateResult>
  /** With `uid`, only that Job (a same-named replacement answers 'replaced'). */
  delete(namespace: string, name: string, uid?: string): Promise<DeleteResult>
}

export interface Clock {
  now(): number
}

export interface AdmissionPorts {
  claims: ClaimStore
  states: StateReader
  requests: RequestLog
  jobs: JobApi
  clock: Clock
  log: Logger
}

/** A compare-and-set that lost: NATS's wrong-last-sequence and key-exists answers (the memory ports throw the same). */
export { isCasConflict } from '../jetstream/errors.js'
