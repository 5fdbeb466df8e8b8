// NATS slow to answer admit's read after its Job POST, with a foreground request on the foreground subject stored
// while the POST was in flight, and demand → cancel slow too (a NATS restarting, a backlog, an apiserver behind: what a
// chaos run has at once). The read after the POST is what lets admit delete the Job a request raced; without an answer
// it proves nothing. Admit gives that read POST_READ_DEADLINE_MS and, with no answer, deletes the Job it has just
// created — before, it waited for the JetStream API's own timeout (5 s), and the error went to the event's retry
// while the Job ran on, left to demand → cancel. The servers are real; NATS's silence is a hook around admit's reads
// of the stream (held until the test ends), and cancel's DELETE of this backfill's Job is held the same way, so a
// deletion seen by the test's watch is admit's own. Seen failing without the deadline: the Job lived until the test's
// 10 s wait ended.
import { expect, it } from 'vitest'
import { useTestEnv } from '../../env/fixture.js'
import { useSplitBackfillSystem } from '../support/backfill-system.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useSplitBackfillSystem(env, { watchJobs: true })
/** Releases every call the test holds (NATS "answering" again) at the end, after the hooks are undone. */
const held: (() => void)[] = []
const hold = () => new Promise<void>((r) => held.push(r))
sys.atEnd(() => {
  for (const release of held.splice(0)) release()
})

it('no answer to the read after the POST: admit deletes the Job it has just created', async () => {
  const { split: system, world, jobs } = sys
  const { backfill, model, template, node } = world.names('post-read')
  await world.model(model, { node })
  await world.template(template)
  // admit's reads of the stream go unanswered from the moment its POST of this backfill's Job is answered.
  let silent = false
  const streams = system.admit.deps.bus.jsm.streams
  sys.hook(
    streams,
    'getMessage',
    (original) =>
      (async (...args: Parameters<typeof streams.getMessage>) => {
        if (silent) await hold()
        return original(...args)
      }) as typeof streams.getMessage,
  )
  let storedAt: number | undefined
  sys.hook(system.admit.deps.kube, 'createJob', (original) => async (job) => {
    const ours = storedAt === undefined && job.metadata?.ownerReferences?.[0]?.name === backfill
    if (ours) storedAt = await world.foregroundOnDocumentedSubject(model)
    const created = await original(job)
    if (ours) silent = true
    return created
  })
  // demand → cancel, the other way this Job goes, is slow: cancel's DELETE of it waits (an apiserver behind).
  sys.hook(system.cancel.deps.kube, 'deleteJob', (original) => async (namespace, name, uid) => {
    if (name.startsWith(`${backfill}-`)) await hold()
    return original(namespace, name, uid)
  })

  await world.backfill(backfill, { modelRef: model, templateRef: template, idleFor: '2s' })
  const job = await waitUntil('the Job created', async () => jobs.of(backfill)[0])
  const deletingAt = await waitUntil('the Job deleted', async () => job.deletingAt, 10_000)
  const afterRequestMs = deletingAt - (storedAt as number)
  process.stderr.write(
    `[post-read-deadline] Job seen live for ${deletingAt - job.addedAt} ms; deleted ${afterRequestMs} ms after the request\n`,
  )
  // Within the second a raced admission is allowed (generous: the machine is loaded), by admit itself.
  expect(afterRequestMs).toBeLessThan(1_500)
  expect(jobs.of(backfill).filter((j) => j.deletingAt === undefined)).toEqual([])
})
