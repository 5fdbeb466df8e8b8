// The attempts' termination messages: lifecycle watches the pods of our Jobs (the backfill label their pod template
// carries; the process's watched copy, pkg/kube/shared-caches.ts) and turns each ended container's summary into a
// `progress` decision (pkg/core/decision.ts): the status message, the RunProgress Event, the items counters.
//
// Why a watch and not a read when the Job ends: a preempted attempt's pods are deleted by cancel in the same
// instant as its Job, without any read (the foreground must not wait), and are gone once their containers stop —
// by the time lifecycle hears of the Job's deletion there is often no pod left to GET. A watch sees the kubelet's
// last status write (the terminated state with its message) and the DELETED event that carries it, whatever
// cancel does, and costs cancel nothing. A completed attempt's pods stay while its Job does, so the watch's initial
// list reads those too after a restart.
//
// Bounded: reports waiting or running at most POD_REPORTS_MAX_QUEUED (beyond, one is dropped with a warning), two
// at a time; each retried a few times (a conflict, an apiserver blip), then given up with a warning. A report seen
// again (a pod's later updates, a re-list) is handled once here (a bounded memory of keys) and counted once by
// decide() in any case (per Job, pkg/core/progress.ts).
import type { Trigger } from '../../pkg/core/decision.js'
import { readPod } from '../../pkg/core/pod-report.js'
import { Lane } from '../../pkg/lib/lane.js'
import { realTimers, sleepOn } from '../../pkg/lib/timers.js'
import { reconcile } from '../../pkg/reconcile/reconcile.js'
import type { Deps } from '../../pkg/transport/function.js'

export const POD_REPORTS_MAX_QUEUED = 1024
/** Keys remembered (reports handled, refusals logged): the oldest forgotten first. */
export const POD_REPORTS_SEEN_MAX = 8192
/** Tries per report, the waits between them doubling from RETRY_BASE_MS. */
export const POD_REPORT_TRIES = 5
const RETRY_BASE_MS = 1000

type Report = (namespace: string, backfill: string, trigger: Extract<Trigger, { type: 'progress' }>) => Promise<boolean>

/**
 * One progress decision through lifecycle's reconcile: true when it was committed. A decision to create a Job is
 * handed to admit without committing anything (pkg/reconcile/reconcile.ts), so the report waits for the next try.
 */
export const reportThroughReconcile =
  (deps: Deps): Report =>
  async (namespace, backfill, trigger) => {
    const d = await reconcile(deps, 'lifecycle', namespace, backfill, trigger)
    return d !== null && !d.actions.some((a) => a.type === 'createJob')
  }

export class PodReports {
  private readonly seen = new Set<string>()
  private readonly lane = new Lane(2)
  private queued = 0
  private stopped = false
  /** Reports decided (tests read them). */
  handled = 0

  constructor(
    private readonly deps: Pick<Deps, 'log' | 'timers'>,
    private readonly report: Report,
  ) {}

  /** A pod as the watch delivered it (`removed`: its DELETED event, the last state it had). */
  observe(pod: unknown, removed: boolean) {
    if (this.stopped) return
    const { report, refused } = readPod(pod, removed)
    for (const why of refused) if (this.remember(`refused:${why}`)) this.deps.log.warn({}, why)
    if (!report || !this.remember(report.key)) return
    if (this.queued >= POD_REPORTS_MAX_QUEUED) {
      this.seen.delete(report.key)
      this.deps.log.warn(
        { namespace: report.namespace, backfill: report.backfill, job: report.jobName },
        `more than ${POD_REPORTS_MAX_QUEUED} progress reports waiting: this one is dropped`,
      )
      return
    }
    this.queued++
    const { namespace, backfill, jobName, progress, preempted } = report
    const trigger = { type: 'progress', jobName, progress, preempted } as const
    void this.lane
      .run(() => this.decide(namespace, backfill, trigger))
      .finally(() => {
        this.queued--
      })
  }

  stop() {
    this.stopped = true
  }

  private async decide(namespace: string, backfill: string, trigger: Extract<Trigger, { type: 'progress' }>) {
    const where = { namespace, backfill, job: trigger.jobName }
    for (let tryNo = 1; tryNo <= POD_REPORT_TRIES && !this.stopped; tryNo++) {
      try {
        if (await this.report(namespace, backfill, trigger)) {
          this.handled++
          return
        }
      } catch (err) {
        if (tryNo === POD_REPORT_TRIES) {
          this.deps.log.warn({ ...where, err }, 'progress report not decided; given up')
          return
        }
      }
      if (tryNo < POD_REPORT_TRIES) await sleepOn(this.deps.timers ?? realTimers, RETRY_BASE_MS * 2 ** (tryNo - 1))
    }
    if (!this.stopped) this.deps.log.warn(where, 'progress report not committed after its tries; given up')
  }

  /** True the first time `key` is seen (bounded: the oldest key is forgotten first). */
  private remember(key: string): boolean {
    if (this.seen.has(key)) return false
    this.seen.add(key)
    if (this.seen.size > POD_REPORTS_SEEN_MAX) this.seen.delete(this.seen.values().next().value as string)
    return true
  }
}
