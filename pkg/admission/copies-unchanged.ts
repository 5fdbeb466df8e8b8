// admit decides on its watched copies of the ModelBackfill and the CronJob template (pkg/kube/client.ts
// SharedCaches), so the two apiserver GETs do not stand serially in front of the claims and the fence. A copy may
// lag the apiserver, so the same two GETs still run on every such decision — started with it, awaited only before
// anything is committed (the state, and so the Job's POST) — and the decision stands only if they return what it was
// decided on. Otherwise it is decided again from the objects just read (pkg/reconcile/reconcile.ts). The Job is thus
// built from a spec and template read during this very decision.
import type { V1CronJob } from '@kubernetes/client-node'
import type { ModelBackfill } from '../core/api.js'
import type { KubeApi } from '../kube/port.js'
import { type StepTimings, timed } from '../observability/step-timings.js'

/** The two GETs, in flight while admit decides on its copies; each settles to its object or null (not found). */
export interface ConfirmingReads {
  backfill: Promise<ModelBackfill | null>
  /** null: the spec names no template readable by name (observe() reads none either). */
  template: Promise<V1CronJob | null> | null
}

/**
 * Reads of one key that started after their caller asked, shared by every caller waiting at the time: at most one
 * read per key in flight and one queued behind it, which every caller arriving meanwhile joins. A caller never gets
 * an answer that was asked for before it asked: what it joins is sent after it asked. Bounded: a key is kept only
 * while a read of it is in flight.
 */
export class NextRead<T> {
  private readonly keys = new Map<string, { next?: Promise<T>; release?: () => void }>()

  read(key: string, fetch: () => Promise<T>): Promise<T> {
    const entry = this.keys.get(key)
    if (!entry) {
      const slot: { next?: Promise<T>; release?: () => void } = {}
      this.keys.set(key, slot)
      return this.send(key, slot, fetch)
    }
    if (entry.next) return entry.next
    // Sent once the read in flight is answered (it was asked for before this caller asked).
    const gate = new Promise<void>((r) => {
      entry.release = r
    })
    entry.next = gate.then(() => {
      entry.next = undefined
      entry.release = undefined
      return this.send(key, entry, fetch)
    })
    return entry.next
  }

  private send(key: string, entry: { next?: Promise<T>; release?: () => void }, fetch: () => Promise<T>) {
    const answer = fetch()
    const settled = () => {
      if (entry.release) entry.release()
      else if (this.keys.get(key) === entry) this.keys.delete(key)
    }
    answer.then(settled, settled)
    return answer
  }
}

/** One per Kube client (a process has one): admissions of backfills sharing a template share its GETs. */
const templateReads = new WeakMap<KubeApi, NextRead<V1CronJob | null>>()

/**
 * The template GET of this decision, shared with the other admissions asking for the same CronJob at the same time
 * (a fleet's backfills mostly share a few templates): when windows end together, one GET per template in flight
 * instead of one per admission, on an apiserver whose queue is what every admission's Job POST waits in.
 */
function getTemplate(kube: KubeApi, namespace: string, name: string): Promise<V1CronJob | null> {
  let reads = templateReads.get(kube)
  if (!reads) {
    reads = new NextRead()
    templateReads.set(kube, reads)
  }
  return reads.read(`${namespace}/${name}`, () => kube.getCronJob(namespace, name))
}

/**
 * Starts the GETs that confirm a decision on watched copies: the ModelBackfill, and the template when the spec names
 * one. The decision commits only if they return the copies unchanged (sameBackfill, sameTemplate).
 */
export function confirmCopies(
  kube: KubeApi,
  namespace: string,
  name: string,
  templateRef: string | null,
  timings?: StepTimings,
): ConfirmingReads {
  const reads: ConfirmingReads = {
    backfill: Promise.resolve(timed(timings, 'fresh.backfill', kube.getBackfill(namespace, name))),
    template: templateRef
      ? Promise.resolve(timed(timings, 'fresh.template', getTemplate(kube, namespace, templateRef)))
      : null,
  }
  // Awaited later, maybe not at all (a decision ended early): a failure must not be an unhandled rejection.
  reads.backfill.catch(() => {})
  reads.template?.catch(() => {})
  return reads
}

/**
 * The ModelBackfill decided on is the apiserver's: the same object at the same resourceVersion. Strict on purpose
 * — anything decide() reads (spec, generation, deletion, finalizers, status) changes it; a status-only change then
 * costs one more decision, never a wrong one.
 */
export function sameBackfill(copy: ModelBackfill, fresh: ModelBackfill | null): boolean {
  const rv = copy.metadata.resourceVersion
  return Boolean(fresh && rv && fresh.metadata.uid === copy.metadata.uid && fresh.metadata.resourceVersion === rv)
}

/**
 * The template gives the same Job: the same CronJob (uid) with the same jobTemplate, the only part buildJob() and
 * the GPU gate read (its schedule status may move on). Both absent is the same "not found".
 */
export function sameTemplate(copy: V1CronJob | null, fresh: V1CronJob | null): boolean {
  if (!copy || !fresh) return !copy && !fresh
  if (!copy.metadata?.uid || copy.metadata.uid !== fresh.metadata?.uid) return false
  if (copy.metadata.resourceVersion && copy.metadata.resourceVersion === fresh.metadata?.resourceVersion) return true
  return canonical(copy.spec?.jobTemplate) === canonical(fresh.spec?.jobTemplate)
}

/**
 * JSON with sorted keys, without null or undefined members (absent and null mean the same in a Kubernetes spec):
 * a watch event's raw object and a GET's deserialized one differ in key order. Any other difference in spelling (a
 * Date against its string) only reads as a change, which costs a re-decision, never a wrong Job.
 */
export function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return v
    const sorted: Record<string, unknown> = {}
    for (const k of Object.keys(v).sort()) {
      const member = (v as Record<string, unknown>)[k]
      if (member !== null && member !== undefined) sorted[k] = member
    }
    return sorted
  })
}
