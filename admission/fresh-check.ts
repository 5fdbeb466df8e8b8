// admit decides on its watched copies of the ModelBackfill and the CronJob template (kube/kube.ts
// AdmissionCaches), so the two apiserver GETs no longer stand serially in front of the claims and the fence. A copy may lag the apiserver, so the same two GETs still run on every such decision — started
// with it, awaited only before anything is committed (the state, and so the Job's POST) — and the decision stands only
// if they return what it was decided on. Otherwise it is decided again from the objects just read
// (admission/reconcile.ts). The Job is thus built from a spec and template read during this very decision, as before.
import type { V1CronJob } from '@kubernetes/client-node'
import type { ModelBackfill } from '../core/api.js'
import type { Kube } from '../kube/kube.js'
import { type StepTimings, timed } from '../observability/step-timings.js'

/** The two GETs, in flight while admit decides on its copies; each settles to its object or null (not found). */
export interface FreshReads {
  backfill: Promise<ModelBackfill | null>
  /** null: the spec names no template readable by name (observe() reads none either). */
  template: Promise<V1CronJob | null> | null
}

export function readFresh(
  kube: Kube,
  namespace: string,
  name: string,
  templateRef: string | null,
  timings?: StepTimings,
): FreshReads {
  const reads: FreshReads = {
    backfill: Promise.resolve(timed(timings, 'fresh.backfill', kube.getBackfill(namespace, name))),
    template: templateRef
      ? Promise.resolve(timed(timings, 'fresh.template', kube.getCronJob(namespace, templateRef)))
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
