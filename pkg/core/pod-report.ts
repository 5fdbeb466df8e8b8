// An attempt's pod as lifecycle's pod watch sees it (functions/lifecycle/pod-reports.ts): which backfill and Job it
// belongs to, and what its terminated containers left as their termination message, read as the workload's summary
// (./progress.ts). Pure: a pod in, a report or the reasons there is none out, never a throw.
import { ANNOTATION_BACKFILL, isObjectName } from './names.js'
import { parseProgress, type WorkloadProgress } from './progress.js'

/** The Job controller's label naming a pod's Job (older clusters: `job-name`), when no owner reference names it. */
const JOB_NAME_LABELS = ['batch.kubernetes.io/job-name', 'job-name']

export interface PodReport {
  namespace: string
  backfill: string
  jobName: string
  /** The pod's UID and the container that reported: a report seen again (watch re-list, update) is told once. */
  key: string
  progress: WorkloadProgress
  /**
   * The pod was being deleted (a preemption: cancel's DELETE, or the garbage collector after the Job's) when its
   * container stopped without success: the items it had in flight are thrown away.
   */
  preempted: boolean
}

export interface PodReading {
  report?: PodReport
  /** Termination messages that are no summary of ours (foreign, malformed, oversized), one line each, for the log. */
  refused: string[]
}

interface Terminated {
  exitCode?: number
  message?: string
}
interface ContainerStatus {
  name?: string
  state?: { terminated?: Terminated }
  lastState?: { terminated?: Terminated }
}
interface PodLike {
  metadata?: {
    name?: string
    namespace?: string
    uid?: string
    deletionTimestamp?: unknown
    labels?: Record<string, string>
    annotations?: Record<string, string>
    ownerReferences?: { kind?: string; name?: string; controller?: boolean }[]
  }
  status?: { containerStatuses?: ContainerStatus[] }
}

function jobOf(meta: NonNullable<PodLike['metadata']>): string | undefined {
  const owner = meta.ownerReferences?.find((r) => r.controller && r.kind === 'Job')?.name
  if (owner) return owner
  for (const l of JOB_NAME_LABELS) if (meta.labels?.[l]) return meta.labels[l]
  return undefined
}

/**
 * The report a pod carries: the first container whose termination message is a summary of ours. The current state
 * first; a container restarted in place keeps its last termination in lastState, read only once the pod is going
 * (`removed`, or being deleted): until then its current run has the last word.
 */
export function readPod(pod: unknown, removed = false): PodReading {
  const p = (pod ?? {}) as PodLike
  const meta = p.metadata ?? {}
  const refused: string[] = []
  const statuses = Array.isArray(p.status?.containerStatuses) ? p.status.containerStatuses : []
  const going = removed || Boolean(meta.deletionTimestamp)
  const ended = statuses
    .map((c) => ({ c, t: c?.state?.terminated ?? (going ? c?.lastState?.terminated : undefined) }))
    .filter((x): x is { c: ContainerStatus; t: Terminated } => typeof x.t?.message === 'string' && x.t.message !== '')
  if (!ended.length) return { refused }
  const backfill = meta.annotations?.[ANNOTATION_BACKFILL]
  const jobName = jobOf(meta)
  const where = `pod ${meta.namespace ?? '?'}/${meta.name ?? '?'}`
  if (!meta.namespace || !meta.uid || !isObjectName(backfill) || !isObjectName(jobName)) {
    refused.push(`${where}: no backfill annotation (${ANNOTATION_BACKFILL}) or Job owner; its messages are not read`)
    return { refused }
  }
  for (const { c, t } of ended) {
    const parsed = parseProgress(t.message as string)
    if (!parsed.ok) {
      refused.push(`${where} container ${c.name ?? '?'}: termination message is no progress summary: ${parsed.error}`)
      continue
    }
    return {
      refused,
      report: {
        namespace: meta.namespace,
        backfill,
        jobName,
        key: `${meta.uid}/${c.name ?? ''}`,
        progress: parsed.value,
        preempted: Boolean(meta.deletionTimestamp) && t.exitCode !== 0,
      },
    }
  }
  return { refused }
}
