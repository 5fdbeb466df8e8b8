// Two tries of one attempt share its Job name: a timer and lifecycle's admit request handled at once, or a retry
// while the first try still runs (a failover's slow NATS calls). The later try replaces the earlier one's claim
// (takeClaim: ours, naming another admission). The earlier try, deciding after its fence not to create the Job
// (a foreground request), gave its claims back by Job name — and deleted the later try's, whose Job then ran with
// no claims: demand could not find it to cancel, and another backfill took its node (the failover short variant in
// the merged suite of 2026-12-02: one lost cancel and two live attempts on node-0; the logs show the Job created,
// then "live attempt without its claims"). On the real claims bucket, with the functions' own take and release.
import { afterAll, beforeAll, expect, it } from 'vitest'
import { readClaim, releaseClaimKeys, takeClaimKeys } from '../../../admission/reconcile.js'
import { claimKeys } from '../../../core/names.js'
import { createLogger } from '../../../observability/log.js'
import { openDeps } from '../../../transport/deps.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
let deps: Awaited<ReturnType<typeof openDeps>>

beforeAll(async () => {
  deps = await openDeps({
    natsUrl: env.natsUrl,
    kubeconfig: env.kc,
    namespaces: [env.namespace],
    name: 'claim-release-test',
    logger: createLogger('claim-release-test'),
    functions: ['demand'],
  })
}, 60_000)

afterAll(async () => {
  await deps?.close()
})

const claimOf = (jobName: string, claimedAt: string) => ({
  namespace: env.namespace,
  backfill: 'b',
  attempt: 1,
  jobName,
  claimedAt,
  idleSince: '2026-12-02T00:00:00.000Z',
})

async function holders(keys: { model: string; node: string }) {
  return Promise.all(
    [keys.model, keys.node].map(async (k) => readClaim(deps.log, await deps.bus.kv.claims.get(k))?.claimedAt ?? null),
  )
}

it("an admission's release leaves the claims a later try of the same attempt took", async () => {
  const keys = claimKeys(env.namespace, 'm-release', `node-release-${env.namespace}`)
  const first = claimOf('b-1-aaaa', '2026-12-02T00:00:01.000Z')
  const second = claimOf('b-1-aaaa', '2026-12-02T00:00:02.000Z')
  expect((await takeClaimKeys(deps, keys, first)).keys).toBeDefined()
  expect((await takeClaimKeys(deps, keys, second)).keys).toBeDefined()
  expect(await holders(keys)).toEqual([second.claimedAt, second.claimedAt])
  // The first try gives back what it took: nothing of the second's goes with it (failed without the fix: both
  // claims deleted, [null, null]).
  await releaseClaimKeys(deps, keys, first)
  expect(await holders(keys)).toEqual([second.claimedAt, second.claimedAt])
  // The second try's own release, and the attempt's end (by Job name), do give them back.
  await releaseClaimKeys(deps, keys, second)
  expect(await holders(keys)).toEqual([null, null])
  await takeClaimKeys(deps, keys, second)
  await releaseClaimKeys(deps, keys, 'b-1-aaaa')
  expect(await holders(keys)).toEqual([null, null])
})
