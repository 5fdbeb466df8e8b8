// What an attempt's workload reports of its run: a short JSON summary it leaves as its container's termination
// message ({"runId":..,"done":N,"total":M}, optionally "inFlight": items it was doing when it stopped), and what the
// controller makes of it (items completed, items discarded by a preemption). Pure; the one schema of the summary.
import { z } from 'zod'
import { RUN_ID_RE } from './run.js'

/** Kubernetes keeps at most 4096 bytes of a termination message; a longer text is no summary of ours. */
export const MAX_PROGRESS_BYTES = 4096
/** Items per run the summary may count: bounds the counters one report can move. */
export const MAX_ITEMS = 1_000_000

const items = z.number().int().nonnegative().max(MAX_ITEMS)

export const WorkloadProgress = z
  .object({
    runId: z.string().regex(RUN_ID_RE, 'not a run identity (16 lower-case hex, FLEXINFER_RUN_ID)'),
    /** Items of the run done so far, by every attempt of it (the workload finds what its run already did). */
    done: items,
    total: items,
    /** Items this attempt had started and not finished when it stopped: thrown away by a preemption. */
    inFlight: items.optional(),
  })
  .refine((p) => p.done <= p.total, { message: 'done exceeds total', path: ['done'] })
export type WorkloadProgress = z.infer<typeof WorkloadProgress>

export type ParsedProgress = { ok: true; value: WorkloadProgress } | { ok: false; error: string }

/** A termination message read as a summary; anything else is a clear refusal, never a throw. */
export function parseProgress(text: string): ParsedProgress {
  if (Buffer.byteLength(text, 'utf8') > MAX_PROGRESS_BYTES) {
    return { ok: false, error: `longer than ${MAX_PROGRESS_BYTES} bytes` }
  }
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (err) {
    return { ok: false, error: `not JSON: ${(err as Error).message}` }
  }
  const r = WorkloadProgress.safeParse(raw)
  if (r.success) return { ok: true, value: r.data }
  const why = r.error.issues
    .slice(0, 3)
    .map((i) => `${i.path.join('.') || '(value)'}: ${i.message}`)
    .join('; ')
  return { ok: false, error: why }
}

/** The part of the backfill state the progress rules read and write. */
export interface ProgressFields {
  runId?: string
  /** Items of the run reported done so far (the highest report: attempts report the run's total, not their own). */
  runDone?: number
  runTotal?: number
  /** Items the run's preempted attempts had in flight, thrown away. */
  runDiscarded?: number
  /** The last attempt Job whose report was counted: a report read again (redelivered, re-observed) counts once. */
  progressJob?: string
  counters: { itemsDone?: number; itemsDiscarded?: number }
}

export interface Counted {
  /** Items the report completed beyond what the run had reported before. */
  completed: number
  discarded: number
}

/**
 * An ended attempt's report (its Job `jobName`; `preempted`: the attempt did not complete): counted once per Job, and
 * only for the run it names — a report of an earlier run (read late) moves nothing. Undefined: nothing counted.
 */
export function countProgress(
  s: ProgressFields,
  jobName: string,
  p: WorkloadProgress,
  preempted: boolean,
): Counted | undefined {
  if (p.runId !== s.runId || s.progressJob === jobName) return undefined
  const before = s.runDone ?? 0
  const completed = Math.max(0, p.done - before)
  const discarded = preempted ? (p.inFlight ?? 0) : 0
  s.progressJob = jobName
  s.runDone = Math.max(before, p.done)
  s.runTotal = p.total
  s.runDiscarded = (s.runDiscarded ?? 0) + discarded
  s.counters.itemsDone = (s.counters.itemsDone ?? 0) + completed
  s.counters.itemsDiscarded = (s.counters.itemsDiscarded ?? 0) + discarded
  return { completed, discarded }
}

/** The run's progress as the status message ends with it, when a report was counted for the current run. */
export const progressNote = (s: ProgressFields) =>
  s.runId && s.runDone !== undefined && s.runTotal !== undefined
    ? `run ${s.runId}: ${s.runDone}/${s.runTotal} items done`
    : undefined
