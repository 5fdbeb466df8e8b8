// The fence → create gap (issue 9's failover finding): admit's fence read the model's newest request, then slow
// work stood between that read and the Job's POST (the state write, the POST itself under load), and a foreground
// request stored in that gap got a Job created over it, left to demand → cancel seconds later. Each scenario slows
// one step of the running system (a test hook around a real call: the servers are real) and publishes a request in
// the gap. The oracle is the test's own: a watch on the namespace's Jobs and the request's JetStream store time.
import { describe, expect, it } from 'vitest'
import { lastRequestAt } from '../../../pkg/admission/fence.js'
import type { BackfillState } from '../../../pkg/core/state.js'
import { sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { handledAll, ms, waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env, {}, { watchJobs: true })
const jobsSeenOf = (backfill: string) => sys.jobs.of(backfill)

/** The time NATS stored a foreground request published now (the leader's store time, read back by sequence). */
async function foregroundStoredAt(model: string): Promise<number> {
  await sys.world.foreground(model)
  const at = await lastRequestAt(sys.runner.deps.bus.jsm, env.namespace, model)
  if (!at) throw new Error('the request was not stored')
  return Date.parse(at)
}

describe('the fence → create gap', () => {
  it('a request stored while the admission is between its fence and its POST gets no Job', async () => {
    const { runner, world } = sys
    const { backfill, model, template, node } = world.names('gap-before')
    await world.model(model, { node })
    await world.template(template)
    let storedAt: number | undefined
    // The slow step: the Starting state write that sits between the fence and the POST (slow under load).
    const kv = runner.deps.bus.kv.backfills
    sys.hook(
      kv,
      'update',
      (original) =>
        (async (key: string, value: Uint8Array | string, version: number) => {
          const text = typeof value === 'string' ? value : new TextDecoder().decode(value)
          const s = JSON.parse(text) as BackfillState
          const revision = await original(key, value, version)
          // Committed: the admission is past its fence and on its way to the POST.
          if (storedAt === undefined && s.name === backfill && s.phase === 'Starting') {
            storedAt = await foregroundStoredAt(model)
            await sleep(600) // time is the subject: the slow step the request lands in
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
    // The chaos oracle's rule (dev/chaos/oracle.ts): a Job seen at c breaks the window of a request stored at s when
    // c - idleFor + 250 ms < s < c - 250 ms.
    const stored = storedAt as number
    const created = jobsSeenOf(backfill).filter((j) => j.addedAt - 2000 + 250 < stored && stored < j.addedAt - 250)
    expect(created, 'a Job created over a request stored before its POST').toEqual([])
    // Still admitted later, a full window after that request.
    await world.waitFor(backfill, 'Running', undefined, 20_000)
    const [job] = await world.jobsOf(backfill)
    expect(ms(job?.metadata?.creationTimestamp as unknown as string) + 1000).toBeGreaterThanOrEqual(
      (storedAt as number) + 2000,
    )
  })

  it('a request stored while the POST is in flight: admit deletes the Job itself at once, without demand → cancel', async () => {
    const { runner, world } = sys
    const { backfill, model, template, node } = world.names('gap-post')
    await world.model(model, { node })
    await world.template(template)
    let storedAt: number | undefined
    // Nothing else may cancel it: every cancel request for this backfill is dropped, so only admit's own re-check
    // after the create can delete the Job.
    sys.dropCancels(runner.deps.bus, backfill)
    // The slow step: the POST itself (an apiserver under load), with the request stored while it is in flight.
    const kube = runner.deps.kube
    sys.hook(
      kube,
      'createJob',
      (original) =>
        (async (job: Parameters<typeof kube.createJob>[0]) => {
          const owner = job.metadata?.ownerReferences?.[0]?.name
          if (storedAt === undefined && owner === backfill) {
            storedAt = await foregroundStoredAt(model)
            await sleep(400) // time is the subject: the slow step the request lands in
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
    // Deleted at once by admit (generous: the machine is loaded), not left running until a cancel.
    const liveMs = deleted - (job?.addedAt as number)
    process.stderr.write(`[fence-gap] raced Job seen live for ${liveMs} ms (watch ADDED → deletion)\n`)
    expect(liveMs).toBeLessThan(3000)
    const state = await waitUntil('the attempt ended', async () => {
      const s = await world.state(backfill)
      // Running too: lifecycle may record the Job's start before admit's Cancelling lands (seen once in CI).
      return s && !['Starting', 'Running', 'Cancelling'].includes(s.phase) ? s : undefined
    })
    expect(state.counters.preemptions.foreground).toBe(1)
    // Told as any preemption: started, and cancelled.
    await waitUntil('both Events', async () => {
      const r = (await world.events(backfill)).map((e) => e.reason)
      return r.includes('BackfillStarted') && r.includes('BackfillCancelled') ? r : undefined
    })
    expect(ms(state.idleSince)).toBeGreaterThanOrEqual((storedAt as number) - 1)
  })
})
