// A request on the foreground subject (flexinfer.events.foreground.request, no model in the subject: any plain NATS
// client of the contract) reached admission only through demand: the reads around the Job's POST looked at the
// per-model subject alone, so one stored after the fence was invisible to them (a trace replay saw a Job created
// 317 ms after such a request). Now they also read the foreground subject's requests past the fence's cursor. Each
// scenario slows one step of the running system (a hook around a real call; the servers are real) and publishes a
// request on the foreground subject in the gap; the oracle is a watch on the Jobs and the request's store time.
import { describe, expect, it } from 'vitest'
import type { BackfillState } from '../../../pkg/core/state.js'
import { sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { handledAll, waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env, {}, { watchJobs: true })
const jobsSeenOf = (backfill: string) => sys.jobs.of(backfill)

describe('a request on the foreground subject, stored after the fence', () => {
  it('stored between the fence and the POST: no Job is created over it', async () => {
    const { runner, world } = sys
    const { backfill, model, template, node } = world.names('doc-before')
    await world.model(model, { node })
    await world.template(template)
    // Nothing but admission itself may delete the backfill's Job: every cancel request for it is dropped.
    sys.dropCancels(runner.deps.bus, backfill)
    let storedAt: number | undefined
    // The slow step: the Starting state write between the fence and the POST.
    const kv = runner.deps.bus.kv.backfills
    sys.hook(
      kv,
      'update',
      (original) =>
        (async (key: string, value: Uint8Array | string, version: number) => {
          const text = typeof value === 'string' ? value : new TextDecoder().decode(value)
          const s = JSON.parse(text) as BackfillState
          const revision = await original(key, value, version)
          if (storedAt === undefined && s.name === backfill && s.phase === 'Starting') {
            storedAt = await world.foregroundOnDocumentedSubject(model)
            await sleep(300) // time is the subject: the slow step the request lands in
          }
          return revision
        }) as typeof kv.update,
    )
    await world.backfill(backfill, { modelRef: model, templateRef: template, idleFor: '2s' })
    await waitUntil('the admission to reach its state write', async () => storedAt)
    // Past the gap: the admission that passed the fence has been handled (its Job POSTed, or not), and the watch has
    // seen every Job change made until then.
    await handledAll(runner, ['admit'])
    await sys.jobs.caughtUp()
    const stored = storedAt as number
    // The chaos oracle's rule: a Job seen at c breaks the window of a request stored at s when
    // c - idleFor + 250 ms < s < c - 250 ms.
    const over = jobsSeenOf(backfill).filter((j) => j.addedAt - 2000 + 250 < stored && stored < j.addedAt - 250)
    expect(over, 'a Job created over a request stored before its POST').toEqual([])
  })

  it('stored while the POST is in flight: admit deletes the Job itself at once', async () => {
    const { runner, world } = sys
    const { backfill, model, template, node } = world.names('doc-post')
    await world.model(model, { node })
    await world.template(template)
    // Nothing but admission itself may delete the backfill's Job: every cancel request for it is dropped.
    sys.dropCancels(runner.deps.bus, backfill)
    let storedAt: number | undefined
    const kube = runner.deps.kube
    sys.hook(
      kube,
      'createJob',
      (original) =>
        (async (job: Parameters<typeof kube.createJob>[0]) => {
          const owner = job.metadata?.ownerReferences?.[0]?.name
          if (storedAt === undefined && owner === backfill) {
            storedAt = await world.foregroundOnDocumentedSubject(model)
            await sleep(300) // time is the subject: the slow step the request lands in
          }
          return original(job)
        }) as typeof kube.createJob,
    )
    await world.backfill(backfill, { modelRef: model, templateRef: template, idleFor: '2s' })
    await waitUntil('the admission to reach its POST', async () => storedAt)
    const [job] = await waitUntil('the Job created', async () => {
      const jobs = jobsSeenOf(backfill)
      return jobs.length ? jobs : undefined
    })
    const deleted = await waitUntil('the Job deleted', async () => job?.deletingAt, 10_000)
    const liveMs = deleted - (job?.addedAt as number)
    process.stderr.write(`[foreground-subject-gap] raced Job seen live for ${liveMs} ms\n`)
    expect(liveMs).toBeLessThan(3000)
    const state = await waitUntil('the attempt ended', async () => {
      const s = await world.state(backfill)
      return s && !['Starting', 'Running', 'Cancelling'].includes(s.phase) ? s : undefined
    })
    expect(state.counters.preemptions.foreground).toBe(1)
  })
})
