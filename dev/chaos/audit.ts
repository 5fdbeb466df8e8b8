// The apiserver's own record of every Job created and deleted (test/env/environment.ts `auditJobs`): when each
// request arrived and when its response was complete, to the microsecond, and who sent it. The oracle times a Job's
// creation and deletion by it instead of by its watch, which delivers late when the machine is loaded (a Job then
// looks created later than it was, and requests stored while its POST was in flight look stored before it).
import { readFile } from 'node:fs/promises'

export interface AuditedWrite {
  /** The apiserver received the request (epoch ms). */
  receivedAt: number
  /** Its response was complete: the write is in etcd (epoch ms). */
  completedAt: number
  user: string
  code: number
}

export interface JobAudit {
  /** Successful creates (201) and deletes (200/202) of each Job, by `<namespace>/<name>`, in the log's order. */
  creates: Map<string, AuditedWrite[]>
  deletes: Map<string, AuditedWrite[]>
  /** Lines that were not an audit event of a Job write (a torn last line while the apiserver stops). */
  unreadable: number
}

export function parseJobAudit(text: string): JobAudit {
  const audit: JobAudit = { creates: new Map(), deletes: new Map(), unreadable: 0 }
  for (const line of text.split('\n')) {
    if (!line.trim()) continue
    let e: {
      verb?: string
      stage?: string
      objectRef?: { resource?: string; namespace?: string; name?: string }
      responseStatus?: { code?: number }
      requestReceivedTimestamp?: string
      stageTimestamp?: string
      user?: { username?: string }
    }
    try {
      e = JSON.parse(line)
    } catch {
      audit.unreadable++
      continue
    }
    const ref = e.objectRef
    const code = e.responseStatus?.code ?? 0
    const receivedAt = Date.parse(e.requestReceivedTimestamp ?? '')
    const completedAt = Date.parse(e.stageTimestamp ?? '')
    if (e.stage !== 'ResponseComplete' || ref?.resource !== 'jobs' || !ref.namespace || !ref.name) continue
    if (Number.isNaN(receivedAt) || Number.isNaN(completedAt)) {
      audit.unreadable++
      continue
    }
    const into =
      e.verb === 'create' && code === 201
        ? audit.creates
        : e.verb === 'delete' && (code === 200 || code === 202)
          ? audit.deletes
          : undefined
    if (!into) continue
    const key = `${ref.namespace}/${ref.name}`
    const list = into.get(key) ?? []
    list.push({ receivedAt, completedAt, user: e.user?.username ?? '', code })
    into.set(key, list)
  }
  return audit
}

export async function readJobAudit(path: string | undefined): Promise<JobAudit | undefined> {
  if (!path) return undefined
  const text = await readFile(path, 'utf8').catch(() => undefined)
  return text === undefined ? undefined : parseJobAudit(text)
}

/**
 * The create of the Job whose creationTimestamp is `createdSecond` (names repeat when a backfill is re-created): the
 * one whose write lies in that second — creationTimestamp is set while the request is handled, so between its
 * arrival and its completion.
 */
export function createOf(audit: JobAudit, key: string, createdSecond: number): AuditedWrite | undefined {
  return audit.creates.get(key)?.find((w) => w.receivedAt < createdSecond + 1000 && w.completedAt >= createdSecond)
}

/** The first delete of that Job that completed after its creation. */
export function deleteAfter(audit: JobAudit, key: string, created: AuditedWrite): AuditedWrite | undefined {
  return audit.deletes.get(key)?.find((w) => w.completedAt >= created.completedAt)
}
