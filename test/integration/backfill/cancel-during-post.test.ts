// A foreground request on the foreground subject (what a plain NATS client of the contract publishes) stored while
// admit's Job POST is in flight: admit's own re-check after the POST reads only the per-model subject, so deleting
// the Job is demand → cancel's — and demand's cancel (the claims were taken before the POST) reaches cancel before the
// Job exists. Cancel found no Job, that cancel was spent (demand sends one per admission), and the Job the POST
// created a moment later ran until a later decision noticed it: 1.8 s in a failover run, past the 1 s the chaos
// oracle allows a raced admission. Now cancel waits for the Job the claim still stands for and deletes it at once.
// The POST is slowed by a hook around the real call, and cancel (a runner of its own, as deployed) has its
// bookkeeping's state reads slowed — what made that later decision late under load — and lifecycle's own cancels for
// the backfill are dropped (its reaction to the new Job cancels it too; in the failover run it was behind). The
// servers are real. The
// oracle is the test's own watch. Seen failing without cancel's wait: the Job lived 2.9 s (175 ms with it).
import { expect, it } from 'vitest'
import { useTestEnv } from '../../env/fixture.js'
import { useSplitBackfillSystem } from '../support/backfill-system.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useSplitBackfillSystem(env, { watchJobs: true })

it('a request on the foreground subject during the Job POST: the Job is deleted as soon as it exists', async () => {
  const { split: system, world, jobs } = sys
  const { backfill, model, template, node } = world.names('post-race')
  await world.model(model, { node })
  await world.template(template)
  // demand's cancel for this backfill, seen on the wire.
  let cancelledAt: number | undefined
  const sub = env.nc.subscribe('flexinfer.events.backfill.cancel', {
    callback: (_err, m) => {
      if (cancelledAt === undefined && m.string().includes(`"backfill":"${backfill}"`)) cancelledAt = Date.now()
    },
  })
  sys.atEnd(() => sub.unsubscribe())
  let storedAt: number | undefined
  sys.hook(system.admit.deps.kube, 'createJob', (original) => async (job) => {
    if (storedAt === undefined && job.metadata?.ownerReferences?.[0]?.name === backfill) {
      // The POST is slow (an apiserver under load): the request is stored, demand cancels, cancel finds no Job
      // and its bookkeeping runs — all before the POST is answered.
      storedAt = await world.foregroundOnDocumentedSubject(model)
      await waitUntil('demand to cancel the attempt', async () => cancelledAt, 10_000)
      await new Promise((r) => setTimeout(r, 1_500))
    }
    return original(job)
  })
  sys.dropCancels(system.lifecycle.deps.bus, backfill)
  // cancel's bookkeeping (its reconcile) reads the backfill's state first: slow, as under load.
  const states = system.cancel.deps.bus.kv.backfills
  sys.hook(
    states,
    'get',
    (original) =>
      (async (key: string, ...rest: unknown[]) => {
        if (key.endsWith(`.${backfill}`)) await new Promise((r) => setTimeout(r, 4_000))
        return (original as (...a: unknown[]) => ReturnType<typeof states.get>)(key, ...rest)
      }) as typeof states.get,
  )

  await world.backfill(backfill, { modelRef: model, templateRef: template, idleFor: '2s' })
  const job = await waitUntil('the Job created', async () => jobs.of(backfill)[0])
  const deletingAt = await waitUntil('the Job deleted', async () => job.deletingAt, 20_000)
  const liveMs = deletingAt - job.addedAt
  process.stderr.write(`[cancel-during-post] Job seen live for ${liveMs} ms (watch ADDED → deletion)\n`)
  // At once (generous: the machine is loaded), not at some later decision.
  expect(liveMs).toBeLessThan(1_500)
  // And nothing of it is left running.
  const live = jobs.of(backfill).filter((j) => j.deletingAt === undefined)
  expect(live).toEqual([])
})
