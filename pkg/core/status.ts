// The status subresource: a projection of the backfill's state (the state in KV is the truth; the status is what
// `kubectl get` and `kubectl wait` read).
import type { Condition, ModelBackfill, ModelBackfillStatus } from './api.js'
import { progressNote } from './progress.js'
import type { BackfillState } from './state.js'

const iso = (ms: number) => new Date(ms).toISOString()

/** The status subresource is a projection of the state; the Ready condition is True only while Running/Succeeded. */
export function projectStatus(s: BackfillState, b: ModelBackfill, now: number): ModelBackfillStatus {
  const ready = s.phase === 'Running' || s.phase === 'Succeeded'
  // The generation this decision read: also while an attempt of the previous spec is being cancelled (SpecChanged),
  // so `kubectl wait --for=jsonpath='{.status.observedGeneration}'` sees the new spec acknowledged at once.
  const generation = b.metadata.generation ?? s.generation
  const terminal = s.phase === 'Succeeded' || s.phase === 'Failed'
  const previous = b.status?.conditions?.find((c) => c.type === 'Ready')
  const status = ready ? 'True' : 'False'
  const condition: Condition = {
    type: 'Ready',
    status,
    reason: s.reason,
    message: s.message,
    lastTransitionTime:
      previous?.status === status && previous.lastTransitionTime ? previous.lastTransitionTime : iso(now),
    observedGeneration: generation,
  }
  // The run shows while it goes on, and after it ended only beside its outcome (Succeeded, Failed) and for its own
  // spec: a status without a run tells a takeover (pkg/core/takeover.ts) that the next attempt begins a new one.
  const shownRun = !!s.runId && s.generation === generation && (!s.runEnded || terminal)
  // The run's progress as its attempts reported it, for the run the status shows.
  const note = shownRun ? progressNote(s) : undefined
  const reported = note !== undefined
  const out: ModelBackfillStatus = {
    phase: s.phase,
    reason: s.reason,
    message: note ? `${s.message} (${note})` : s.message,
    observedGeneration: generation,
    nodeName: s.nodeName,
    jobName: s.jobName ?? (terminal ? s.finishedJobName : undefined),
    idleSince: s.idleSince,
    startedAt: s.startedAt,
    completionTime: s.completionTime,
    nextRunTime: s.nextRunTime,
    attempts: s.attempts,
    runId: shownRun ? s.runId : undefined,
    runAttempt: shownRun ? s.runAttempt : undefined,
    runDone: reported ? s.runDone : undefined,
    runTotal: reported ? s.runTotal : undefined,
    runDiscarded: reported ? (s.runDiscarded ?? 0) : undefined,
    conditions: [condition],
  }
  for (const key of Object.keys(out) as (keyof ModelBackfillStatus)[]) {
    if (out[key] === undefined) delete out[key]
  }
  return out
}
