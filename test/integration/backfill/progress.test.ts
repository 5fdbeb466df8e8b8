// Progress the controller can see, end to end on the real apiserver: an attempt's pod ends with its termination
// message (the test writes the pod's status as a kubelet would: pods/status; there is no kubelet here), lifecycle's
// pod watch reads it, and the status, the RunProgress Event and the three metrics beyond the contract's show it —
// for an attempt that completed and for one a foreground request preempted (its pods being deleted by cancel when
// they stop). A message that is no summary of ours changes nothing.
import { describe, it } from 'vitest'
import { ANNOTATION_BACKFILL, jobName } from '../../../pkg/core/names.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { handledAll, waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env, { httpPort: 0 })

const metrics = async () => (await fetch(`${sys.runner.httpUrl}/metrics`)).text()
const series = (text: string, name: string, labels: string) =>
  Number(new RegExp(`^${name}\\{${labels.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\} (\\S+)$`, 'm').exec(text)?.[1])

async function running(id: string) {
  const n = sys.world.names(id)
  await sys.world.declare(n.backfill)
  const b = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
  const job = jobName(n.backfill, 1)
  const runId = b.status?.runId as string
  const labels = `backfill="${n.backfill}",namespace="${env.namespace}",model="${n.model}"`
  return { ...n, job, runId, labels }
}

describe.concurrent('the termination message', () => {
  it('a completed attempt: status, RunProgress Event and items completed', async ({ expect }) => {
    const r = await running('progress-done')
    const [pod] = await sys.world.pods(r.job)
    expect(pod?.metadata?.annotations?.[ANNOTATION_BACKFILL]).toBe(r.backfill)
    expect(pod?.metadata?.labels?.['ai.flexinfer/model-backfill']).toBeTruthy()
    await sys.world.finishJob(r.job, 'Succeeded', JSON.stringify({ runId: r.runId, done: 9, total: 9 }))
    const done = await sys.world.waitForStatus(
      r.backfill,
      'Succeeded with the run progress',
      (s) => s?.phase === 'Succeeded' && s.runDone === 9,
    )
    expect(done.status?.message).toBe(`Job ${r.job} completed (run ${r.runId}: 9/9 items done)`)
    expect(done.status).toMatchObject({ runId: r.runId, runDone: 9, runTotal: 9, runDiscarded: 0 })
    expect(await sys.world.events(r.backfill)).toContainEqual({
      type: 'Normal',
      reason: 'RunProgress',
      message: `Job ${r.job} ended with run ${r.runId} at 9/9 items (9 completed by it)`,
    })
    const text = await metrics()
    expect(series(text, 'flexinfer_model_backfill_items_completed_total', r.labels)).toBe(9)
    expect(series(text, 'flexinfer_model_backfill_items_discarded_total', r.labels)).toBe(0)
    expect(series(text, 'flexinfer_model_backfill_preempted_running_seconds_total', r.labels)).toBe(0)
    // The contract's four keep their meaning.
    expect(text).toContain(`flexinfer_model_backfill_completions_total{${r.labels},result="success"} 1`)
  })

  it('a preempted attempt: what it had in flight is counted discarded, with its running seconds', async ({
    expect,
  }) => {
    const r = await running('progress-preempted')
    // Held as a kubelet still stopping the containers would: cancel's DELETE leaves them deleting.
    await sys.world.holdPods(r.job)
    await sys.world.foreground(r.model)
    await sys.world.waitFor(r.backfill, 'Cancelling', 'ForegroundDemand')
    await waitUntil('the pods deleting', async () =>
      (await sys.world.pods(r.job)).every((p) => p.metadata?.deletionTimestamp) ? true : undefined,
    )
    await sys.world.terminatePods(r.job, 143, JSON.stringify({ runId: r.runId, done: 4, total: 9, inFlight: 2 }))
    await sys.world.releasePods(r.job)
    const back = await sys.world.waitForStatus(
      r.backfill,
      'WaitingForIdle with the run progress',
      (s) => s?.phase === 'WaitingForIdle' && s.runDone === 4,
    )
    expect(back.status).toMatchObject({ runId: r.runId, runAttempt: 1, runDone: 4, runTotal: 9, runDiscarded: 2 })
    expect(back.status?.message).toMatch(new RegExp(`\\(run ${r.runId}: 4/9 items done\\)$`))
    expect(await sys.world.events(r.backfill)).toContainEqual({
      type: 'Normal',
      reason: 'RunProgress',
      message: `Job ${r.job} ended with run ${r.runId} at 4/9 items (4 completed by it; 2 in flight discarded by the preemption)`,
    })
    const text = await metrics()
    expect(series(text, 'flexinfer_model_backfill_items_completed_total', r.labels)).toBe(4)
    expect(series(text, 'flexinfer_model_backfill_items_discarded_total', r.labels)).toBe(2)
    const preempted = series(text, 'flexinfer_model_backfill_preempted_running_seconds_total', r.labels)
    expect(preempted).toBeGreaterThan(0)
    expect(preempted).toBe(series(text, 'flexinfer_model_backfill_useful_running_seconds_total', r.labels))
    expect(text).toContain(`flexinfer_model_backfill_preemptions_total{${r.labels},reason="foreground"} 1`)
  })

  it('a message that is no summary of ours (or of another run) changes nothing', async ({ expect }) => {
    const r = await running('progress-foreign')
    await sys.world.finishJob(r.job, 'Succeeded', 'all done, bye')
    const done = await sys.world.waitFor(r.backfill, 'Succeeded', 'JobComplete')
    await handledAll(sys.runner)
    const after = await sys.world.getBackfill(r.backfill)
    expect(after?.status?.message).toBe(`Job ${r.job} completed`)
    expect(after?.status?.runDone).toBeUndefined()
    expect(done.status?.runDone).toBeUndefined()
    expect((await sys.world.events(r.backfill)).some((e) => e.reason === 'RunProgress')).toBe(false)
    expect((await sys.world.state(r.backfill))?.counters.itemsDone).toBeUndefined()
  })
})
