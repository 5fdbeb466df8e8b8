// Two tries of one attempt share its Job name: a timer and lifecycle's admit request handled at once, or a retry
// while the first try still runs (a failover's slow NATS calls). The later try replaces the earlier one's claim
// (takeClaim: ours, naming another admission). The earlier try, deciding after its fence not to create the Job
// (a foreground request), gave its claims back by Job name — and deleted the later try's, whose Job then ran with
// no claims: demand could not find it to cancel, and another backfill took its node (the failover short variant in
// the merged suite of 2026-12-02: one lost cancel and two live attempts on node-0; the logs show the Job created,
// then "live attempt without its claims"). On the real claims bucket, with the functions' own take and release.
import { afterAll, beforeAll, expect, it } from 'vitest'
import { readClaimsAhead, takeClaimKeys as takeWithReads } from '../../../admission/claims.js'
import { portsOf, readClaim, releaseClaimKeys, takeClaimKeys } from '../../../admission/reconcile.js'
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

/** The subjects of the requests `body` made on the functions' connection, counted on the connection itself. */
async function requestsOf(body: () => Promise<unknown>): Promise<string[]> {
  const nc = deps.bus.nc
  const request = nc.request.bind(nc)
  const subjects: string[] = []
  nc.request = (subject, ...rest) => {
    subjects.push(subject)
    return request(subject, ...rest)
  }
  try {
    await body()
  } finally {
    nc.request = request
  }
  return subjects
}

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

it('a key given back before is taken with one read and one compare-and-set: four round trips for both', async () => {
  // The usual case: both keys hold the delete marker of the attempt before. The KV client's create costs three round
  // trips on a marker (a create that fails on it, a read, the update), six for both keys (failed without the read
  // ahead: 6 requests). Counted on the connection itself.
  const keys = claimKeys(env.namespace, 'm-trips', `node-trips-${env.namespace}`)
  const before = claimOf('b-1-bbbb', '2026-12-02T00:00:01.000Z')
  await takeClaimKeys(deps, keys, before)
  await releaseClaimKeys(deps, keys, before)
  const next = claimOf('b-2-bbbb', '2026-12-02T00:01:01.000Z')
  const subjects = await requestsOf(async () => expect((await takeClaimKeys(deps, keys, next)).keys).toBeDefined())
  expect(subjects, subjects.join('\n')).toHaveLength(4)
  expect(await holders(keys)).toEqual([next.claimedAt, next.claimedAt])
})

it("keys read ahead (with the admission's first reads) are taken with the two compare-and-sets alone", async () => {
  const keys = claimKeys(env.namespace, 'm-ahead', `node-ahead-${env.namespace}`)
  const before = claimOf('b-1-cccc', '2026-12-02T00:00:01.000Z')
  await takeClaimKeys(deps, keys, before)
  await releaseClaimKeys(deps, keys, before)
  const ports = portsOf(deps)
  const ahead = readClaimsAhead(ports, keys)
  await ahead.entries
  const next = claimOf('b-2-cccc', '2026-12-02T00:01:01.000Z')
  const subjects = await requestsOf(async () =>
    expect((await takeWithReads(ports, keys, next, ahead)).keys).toBeDefined(),
  )
  expect(subjects, subjects.join('\n')).toHaveLength(2)
  expect(await holders(keys)).toEqual([next.claimedAt, next.claimedAt])
})
