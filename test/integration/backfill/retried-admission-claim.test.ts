// An admission that failed after taking its claims (in a failover run: the claims bucket's new leader took them, then
// "JetStream system temporarily unavailable" before the state write) leaves both claims naming the attempt's Job,
// and no Job. A foreground request then has demand cancel that try (the cancel finds no Job), and demand remembers
// that cancel by the claim (namespace, Job, claimedAt) for a minute. When the admission is retried it is the same
// attempt, the same Job name: admit took the leftover claim as "ours already" and left it as it was — so the Job it
// then created was covered by the earlier try's remembered cancel, and the next foreground request cancelled
// nothing (the failover harness: a Job still live 36 s after a request for its model). The leftover claim is
// written here as the failed try left it (the real bucket, the real functions); everything after is the system's.
import type { NatsConnection } from '@nats-io/transport-node'
import { expect, it } from 'vitest'
import { claimKeys, jobName } from '../../../pkg/core/names.js'
import { toKv } from '../../../pkg/core/state.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env)

/** The cancel requests published for `job` (core NATS sees the stream's subject too). */
function countCancels(nc: NatsConnection, job: string) {
  const seen: string[] = []
  const sub = nc.subscribe('flexinfer.events.backfill.cancel', {
    callback: (_err, m) => {
      const text = m.string()
      if (text.includes(job)) seen.push(text)
    },
  })
  return { seen, stop: () => sub.unsubscribe() }
}

it("an admission retried after a failed try is cancelled by the next foreground request (not covered by that try's cancel)", {
  timeout: 120_000,
}, async () => {
  const { world } = sys
  const n = world.names('retried-claim')
  const job = jobName(n.backfill, 1)
  await world.model(n.model, { node: n.node })
  await world.template(n.template)
  const cancels = countCancels(env.nc, job)
  await env.nc.flush()
  try {
    // What the failed try left: the attempt's claims, taken a moment ago on a window that began before.
    const now = Date.now()
    const leftover = toKv({
      namespace: env.namespace,
      backfill: n.backfill,
      attempt: 1,
      jobName: job,
      claimedAt: new Date(now - 1_000).toISOString(),
      idleSince: new Date(now - 6_000).toISOString(),
    })
    const keys = claimKeys(env.namespace, n.model, n.node)
    const claims = sys.runner.deps.bus.kv.claims
    await claims.put(keys.model, leftover)
    await claims.put(keys.node, leftover)

    // A request: demand cancels that try; there is no Job to delete.
    await world.foreground(n.model)
    await waitUntil('demand to cancel the failed try', async () => (cancels.seen.length > 0 ? true : undefined), 20_000)
    expect(await world.job(job)).toBeNull()

    // The declaration: after 2 s of quiet the attempt is admitted again — the same Job name.
    await world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '2s' })
    await world.waitFor(n.backfill, 'Running', 'JobRunning', 60_000)
    const created = await world.job(job)
    expect(created?.metadata?.uid).toBeDefined()

    // Foreground wins: the next request deletes it.
    const before = cancels.seen.length
    await world.foreground(n.model)
    await waitUntil(
      'the retried attempt to be cancelled',
      async () => {
        const j = await world.job(job)
        return !j || j.metadata?.uid !== created?.metadata?.uid || j.metadata?.deletionTimestamp ? true : undefined
      },
      20_000,
    )
    expect(cancels.seen.length).toBeGreaterThan(before)
    await world.waitFor(n.backfill, 'WaitingForIdle', undefined, 30_000)
  } finally {
    cancels.stop()
  }
})
