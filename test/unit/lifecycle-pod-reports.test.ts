// lifecycle's pod reports: each ended container's summary decided once, retried a few times, bounded.
import { describe, expect, it } from 'vitest'
import { POD_REPORT_TRIES, POD_REPORTS_MAX_QUEUED, PodReports } from '../../functions/lifecycle/pod-reports.js'
import { ANNOTATION_BACKFILL } from '../../pkg/core/names.js'

const RUN = '0123456789abcdef'
const pod = (uid: string, message = JSON.stringify({ runId: RUN, done: 1, total: 2 })) => ({
  metadata: {
    name: `p-${uid}`,
    namespace: 'ns',
    uid,
    annotations: { [ANNOTATION_BACKFILL]: 'bf' },
    ownerReferences: [{ kind: 'Job', name: 'bf-1-abcd1234', controller: true }],
  },
  status: { containerStatuses: [{ name: 'work', state: { terminated: { exitCode: 0, message } } }] },
})

function setup(answer: () => Promise<boolean>) {
  const warnings: string[] = []
  const calls: unknown[] = []
  const log = { warn: (_: object, msg: string) => warnings.push(msg) } as never
  // Retries wait on these timers: at once here.
  const timers = { set: (fire: () => void) => setImmediate(fire), clear: () => {} }
  const r = new PodReports({ log, timers }, async (...args) => {
    calls.push(args)
    return answer()
  })
  return { r, warnings, calls }
}
const settle = () => new Promise((resolve) => setTimeout(resolve, 20))

describe('PodReports', () => {
  it('decides a report once, however often the pod is seen', async () => {
    const { r, calls } = setup(async () => true)
    r.observe(pod('a'), false)
    r.observe(pod('a'), false)
    r.observe(pod('a'), true)
    await settle()
    expect(calls).toEqual([
      [
        'ns',
        'bf',
        { type: 'progress', jobName: 'bf-1-abcd1234', progress: { runId: RUN, done: 1, total: 2 }, preempted: false },
      ],
    ])
    expect(r.handled).toBe(1)
  })

  it('retries a failed or uncommitted decision, then gives up with a warning', async () => {
    let n = 0
    const { r, calls } = setup(async () => {
      n++
      if (n === 1) throw new Error('apiserver blip')
      return n === 3
    })
    r.observe(pod('a'), false)
    await settle()
    expect(calls).toHaveLength(3)
    expect(r.handled).toBe(1)
    const never = setup(async () => {
      throw new Error('down')
    })
    never.r.observe(pod('b'), false)
    await settle()
    expect(never.calls).toHaveLength(POD_REPORT_TRIES)
    expect(never.warnings).toEqual(['progress report not decided; given up'])
  })

  it('logs a refused message once and decides nothing', async () => {
    const { r, calls, warnings } = setup(async () => true)
    r.observe(pod('a', 'Error: out of memory'), false)
    r.observe(pod('a', 'Error: out of memory'), true)
    await settle()
    expect(calls).toEqual([])
    expect(warnings).toHaveLength(1)
    expect(warnings[0]).toMatch(/termination message is no progress summary/)
  })

  it('holds at most POD_REPORTS_MAX_QUEUED reports; the rest are dropped with a warning', async () => {
    let release: (v: boolean) => void = () => {}
    const gate = new Promise<boolean>((resolve) => {
      release = resolve
    })
    const { r, calls, warnings } = setup(() => gate)
    for (let i = 0; i < POD_REPORTS_MAX_QUEUED + 3; i++) r.observe(pod(`u${i}`), false)
    expect(warnings.filter((w) => w.includes('dropped'))).toHaveLength(3)
    release(true)
    await settle()
    expect(calls).toHaveLength(POD_REPORTS_MAX_QUEUED)
    // A dropped one is read again the next time its pod is seen.
    r.observe(pod(`u${POD_REPORTS_MAX_QUEUED}`), true)
    await settle()
    expect(calls).toHaveLength(POD_REPORTS_MAX_QUEUED + 1)
  })
})
