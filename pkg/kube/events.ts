// The Kubernetes Events this process writes on a ModelBackfill, so that `kubectl describe` tells its story:
// repeats aggregated into one Event with a count, as client-go's correlator does. Best effort: an Event is for
// people, and losing one must never fail a transition.
import { createHash } from 'node:crypto'
import type { CoreV1Api } from '@kubernetes/client-node'
import { GROUP, type ModelBackfill, VERSION } from '../core/api.js'
import { statusCode } from './errors.js'
import { mergePatch } from './http.js'

/** Aggregated Event names this process remembers the count of. */
export const MAX_EVENT_COUNTS = 4096

/** `<object>.<16 hex of sha256(identity)>`: a valid, deterministic Event name for one kind of repeated Event. */
export function eventName(object: string, identity: string): string {
  return `${object.slice(0, 200)}.${createHash('sha256').update(identity).digest('hex').slice(0, 16)}`
}

/** The Event writer of one Kube client: its requests count in the client's `requests`. */
export class EventRecorder {
  /** Counts of the aggregated Events this process wrote (name → count), bounded; see record. */
  private readonly eventCounts = new Map<string, number>()

  constructor(
    private readonly core: CoreV1Api,
    private readonly requests: { read: number; write: number },
    /** Who reports the Events (HOSTNAME: the pod). */
    private readonly reportingInstance: string,
  ) {}

  /**
   * Records an Event on the ModelBackfill. Identical Events (same object, type, reason and message) are aggregated
   * as `kubectl describe` expects (`count`, `lastTimestamp`, as client-go's correlator does): the Event's name is
   * derived from them, so a repeat — from this instance or another — updates the existing Event instead of
   * adding one. This process remembers counts it wrote (at most MAX_EVENT_COUNTS) to skip a read; a count raced by
   * another instance may be off by one, which is all an Event is worth. Never throws.
   */
  async record(backfill: ModelBackfill, type: 'Normal' | 'Warning', reason: string, message: string) {
    const { namespace, name: object, uid } = backfill.metadata
    const text = message.slice(0, 1024)
    const name = eventName(object, `${uid ?? ''}\n${type}\n${reason}\n${text}`)
    const now = new Date()
    try {
      const known = this.eventCounts.get(name)
      if (known !== undefined && (await this.bumpEvent(namespace, name, known + 1, now))) return
      this.requests.write++
      await this.core.createNamespacedEvent({
        namespace,
        body: {
          metadata: { name, namespace },
          involvedObject: {
            apiVersion: `${GROUP}/${VERSION}`,
            kind: 'ModelBackfill',
            name: object,
            namespace,
            uid,
            resourceVersion: backfill.metadata.resourceVersion,
          },
          type,
          reason,
          message: text,
          firstTimestamp: now,
          lastTimestamp: now,
          count: 1,
          source: { component: 'model-backfill' },
          reportingComponent: 'flexinfer.ai/model-backfill',
          reportingInstance: this.reportingInstance,
        },
      })
      this.rememberEvent(name, 1)
    } catch (err) {
      if (statusCode(err) !== 409) return // Events are for people; losing one must never fail a transition.
      try {
        // Written before (by another instance, or before a restart): count on from what is stored.
        this.requests.read++
        const stored = await this.core.readNamespacedEvent({ namespace, name })
        await this.bumpEvent(namespace, name, (stored.count ?? 1) + 1, now)
      } catch {
        // As above.
      }
    }
  }

  /** Sets an aggregated Event's count and lastTimestamp; false when it no longer exists (expired: create it). */
  private async bumpEvent(namespace: string, name: string, count: number, now: Date): Promise<boolean> {
    this.requests.write++
    try {
      await this.core.patchNamespacedEvent(
        { namespace, name, body: { count, lastTimestamp: now.toISOString() } },
        mergePatch,
      )
      this.rememberEvent(name, count)
      return true
    } catch (err) {
      this.eventCounts.delete(name)
      if (statusCode(err) === 404) return false
      throw err
    }
  }

  private rememberEvent(name: string, count: number) {
    this.eventCounts.delete(name) // re-inserted last: the oldest entry is the first to go
    this.eventCounts.set(name, count)
    if (this.eventCounts.size > MAX_EVENT_COUNTS) {
      const oldest = this.eventCounts.keys().next().value
      if (oldest !== undefined) this.eventCounts.delete(oldest)
    }
  }
}
