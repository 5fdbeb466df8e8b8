// lifecycle's reading of an attempt's pod: the backfill and Job it belongs to, its termination message as the
// workload's summary, and whether a preemption stopped it.
import { describe, expect, it } from 'vitest'
import { ANNOTATION_BACKFILL } from '../../pkg/core/names.js'
import { readPod } from '../../pkg/core/pod-report.js'

const RUN = '0123456789abcdef'
const summary = (extra: object = {}) => JSON.stringify({ runId: RUN, done: 5, total: 9, ...extra })

function pod(containers: object[], meta: object = {}) {
  return {
    metadata: {
      name: 'bf-1-abcd-xyz',
      namespace: 'ns',
      uid: 'pod-uid',
      annotations: { [ANNOTATION_BACKFILL]: 'bf' },
      ownerReferences: [{ kind: 'Job', name: 'bf-1-abcd1234', controller: true }],
      ...meta,
    },
    status: { containerStatuses: containers },
  }
}
const terminated = (message: string, exitCode = 0, name = 'work') => ({
  name,
  state: { terminated: { exitCode, message } },
})

describe('readPod', () => {
  it('a completed container: its summary, not preempted', () => {
    const r = readPod(pod([terminated(summary())]))
    expect(r.refused).toEqual([])
    expect(r.report).toEqual({
      namespace: 'ns',
      backfill: 'bf',
      jobName: 'bf-1-abcd1234',
      key: 'pod-uid/work',
      progress: { runId: RUN, done: 5, total: 9 },
      preempted: false,
    })
  })

  it('a container stopped by the pod deletion: preempted, its in-flight items with it', () => {
    const r = readPod(pod([terminated(summary({ inFlight: 2 }), 143)], { deletionTimestamp: '2026-01-01T00:00:00Z' }))
    expect(r.report).toMatchObject({ preempted: true, progress: { inFlight: 2 } })
  })

  it('a container that failed on its own is not preempted', () => {
    expect(readPod(pod([terminated(summary(), 1)])).report?.preempted).toBe(false)
  })

  it('nothing terminated yet: no report, nothing refused', () => {
    expect(readPod(pod([{ name: 'work', state: { running: {} } }]))).toEqual({ refused: [] })
    expect(readPod({})).toEqual({ refused: [] })
    expect(readPod(null)).toEqual({ refused: [] })
  })

  it("a foreign sidecar's message is refused with a reason; the workload's summary still counts", () => {
    const r = readPod(pod([terminated('bye', 0, 'gate'), terminated(summary())]))
    expect(r.report?.key).toBe('pod-uid/work')
    expect(r.refused).toHaveLength(1)
    expect(r.refused[0]).toMatch(
      /pod ns\/bf-1-abcd-xyz container gate: termination message is no progress summary: not JSON/,
    )
  })

  it('malformed, oversized or out-of-range summaries are refused, never thrown', () => {
    for (const m of [
      '{"runId":"x","done":1,"total":2}',
      JSON.stringify({ runId: RUN, done: 3, total: 2 }),
      JSON.stringify({ runId: RUN, done: -1, total: 2 }),
      `{"runId":"${RUN}","done":1,"total":2,"pad":"${'x'.repeat(5000)}"}`,
    ]) {
      const r = readPod(pod([terminated(m)]))
      expect(r.report).toBeUndefined()
      expect(r.refused).toHaveLength(1)
    }
  })

  it('the last termination of a restarted container is read only once the pod goes', () => {
    const restarted = {
      name: 'work',
      state: { running: {} },
      lastState: { terminated: { exitCode: 1, message: summary() } },
    }
    expect(readPod(pod([restarted])).report).toBeUndefined()
    expect(readPod(pod([restarted]), true).report).toMatchObject({ preempted: false })
    expect(readPod(pod([restarted], { deletionTimestamp: '2026-01-01T00:00:00Z' })).report?.preempted).toBe(true)
  })

  it('a pod without our annotation or Job owner is not read', () => {
    const r = readPod(pod([terminated(summary())], { annotations: {}, ownerReferences: [] }))
    expect(r.report).toBeUndefined()
    expect(r.refused[0]).toMatch(/no backfill annotation/)
  })

  it('the Job controller label names the Job when no owner reference does', () => {
    const r = readPod(
      pod([terminated(summary())], {
        ownerReferences: [],
        labels: { 'batch.kubernetes.io/job-name': 'bf-1-abcd1234' },
      }),
    )
    expect(r.report?.jobName).toBe('bf-1-abcd1234')
  })
})
