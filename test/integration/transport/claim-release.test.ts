// Two tries of one attempt share its Job name: a timer and lifecycle's admit request handled at once, or a retry
// while the first try still runs (a failover's slow NATS calls). The later try replaces the earlier one's claim
// (takeClaim: ours, naming another admission). The earlier try, deciding after its fence not to create the Job
// (a foreground request), gave its claims back by Job name — and deleted the later try's, whose Job then ran with
// no claims: demand could not find it to cancel, and another backfill took its node (the failover short variant in
// the merged suite of 2026-12-02: one lost cancel and two live attempts on node-0; the logs show the Job created,
// then "live attempt without its claims"). On the real claims bucket, with the functions' own take and release.
import { afterAll, beforeAll, expect, it } from 'vitest'
import { BUCKET_CLAIMS } from '../../../events/catalog.js'
import { readClaimsAhead, takeClaimKeys as takeWithReads } from '../../../pkg/admission/claims.js'
import { claimKeys } from '../../../pkg/core/names.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { portsOf, releaseClaimKeys, takeClaimKeys } from '../../../pkg/reconcile/deps.js'
import { readClaim } from '../../../pkg/reconcile/read-kv.js'
import { openDeps } from '../../../pkg/transport/deps.js'
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

/**
 * What `body` sent on the functions' connection, counted on the connection itself (nats.js's requests publish there
 * too): `requests`, the messages that wait for an answer (a reply subject), and `sent`, those that do not (the
 * messages of an atomic batch before its commit).
 */
async function sentBy(body: () => Promise<unknown>): Promise<{ requests: string[]; sent: string[] }> {
  const nc = deps.bus.nc
  const publish = nc.publish.bind(nc)
  const requests: string[] = []
  const sent: string[] = []
  nc.publish = (subject, payload, opts) => {
    ;(opts?.reply ? requests : sent).push(subject)
    return publish(subject, payload, opts)
  }
  try {
    await body()
  } finally {
    nc.publish = publish
  }
  return { requests, sent }
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

it('keys given back before are read together and taken with one atomic write: two round trips for both', async () => {
  // The usual case: both keys hold the delete marker of the attempt before. The KV client's create costs three round
  // trips on a marker (a create that fails on it, a read, the update), six for both keys; read first, four (a
  // compare-and-set each, one after the other); the two compare-and-sets go as one atomic batch instead, whose first
  // message waits for no answer (failed before it: 4 requests). Counted on the connection itself.
  const keys = claimKeys(env.namespace, 'm-trips', `node-trips-${env.namespace}`)
  const before = claimOf('b-1-bbbb', '2026-12-02T00:00:01.000Z')
  await takeClaimKeys(deps, keys, before)
  await releaseClaimKeys(deps, keys, before)
  const next = claimOf('b-2-bbbb', '2026-12-02T00:01:01.000Z')
  const { requests, sent } = await sentBy(async () =>
    expect((await takeClaimKeys(deps, keys, next)).keys).toBeDefined(),
  )
  expect(requests, requests.join('\n')).toEqual([
    '$JS.API.STREAM.MSG.GET.KV_flexinfer-claims',
    '$JS.API.STREAM.MSG.GET.KV_flexinfer-claims',
    `$KV.flexinfer-claims.${keys.node}`,
  ])
  expect(sent).toEqual([`$KV.flexinfer-claims.${keys.model}`])
  expect(await holders(keys)).toEqual([next.claimedAt, next.claimedAt])
})

it("keys read ahead (with the admission's first reads) are taken with one round trip", async () => {
  const keys = claimKeys(env.namespace, 'm-ahead', `node-ahead-${env.namespace}`)
  const before = claimOf('b-1-cccc', '2026-12-02T00:00:01.000Z')
  await takeClaimKeys(deps, keys, before)
  await releaseClaimKeys(deps, keys, before)
  const ports = portsOf(deps)
  const ahead = readClaimsAhead(ports, keys)
  await ahead.entries
  const next = claimOf('b-2-cccc', '2026-12-02T00:01:01.000Z')
  const { requests, sent } = await sentBy(async () =>
    expect((await takeWithReads(ports, keys, next, ahead)).keys).toBeDefined(),
  )
  expect(requests, requests.join('\n')).toHaveLength(1)
  expect(sent).toHaveLength(1)
  expect(await holders(keys)).toEqual([next.claimedAt, next.claimedAt])
})

it('a key taken by someone else since it was read fails the whole batch: the other key is not taken either', async () => {
  const keys = claimKeys(env.namespace, 'm-atomic', `node-atomic-${env.namespace}`)
  const ports = portsOf(deps)
  const ahead = readClaimsAhead(ports, keys)
  await ahead.entries
  // Another backfill takes the node key between the read and the batch (a live hold: younger than the grace).
  const theirs = { ...claimOf('other-1-dddd', new Date().toISOString()), backfill: 'other' }
  await deps.bus.kv.claims.create(keys.node, JSON.stringify(theirs))
  const writes: string[] = []
  const together = ports.claims.writeTogether?.bind(ports.claims)
  ports.claims.writeTogether = async (w) => {
    try {
      return (await together?.(w)) ?? false
    } catch (err) {
      writes.push(String((err as Error).message))
      throw err
    }
  }
  const r = await takeWithReads(ports, keys, claimOf('b-1-dddd', '2026-12-02T00:01:01.000Z'), ahead)
  expect(writes).toHaveLength(1)
  expect(writes[0]).toMatch(/wrong last sequence/)
  expect(r.contender).toMatchObject({ on: 'node', jobName: 'other-1-dddd' })
  // The model key was taken one by one after the failed batch and given back: nobody holds it.
  expect(await holders(keys)).toEqual([null, theirs.claimedAt])
})

it('a claims bucket without allow_atomic (an older release provisioned it): the keys are taken one by one, logged once, the batch tried again a minute later', async () => {
  const stream = `KV_${BUCKET_CLAIMS}`
  const config = (await deps.bus.jsm.streams.info(stream)).config
  await deps.bus.jsm.streams.update(stream, { ...config, allow_atomic: false })
  const warned: string[] = []
  const log = Object.create(deps.log) as typeof deps.log
  log.warn = ((_o: unknown, msg: string) => void warned.push(msg)) as typeof log.warn
  const ports = portsOf({ ...deps, log })
  try {
    for (const [i, model] of ['m-old-1', 'm-old-2'].entries()) {
      const keys = claimKeys(env.namespace, model, `node-old-${env.namespace}`)
      const next = claimOf(`b-${i}-eeee`, new Date().toISOString())
      const { requests, sent } = await sentBy(async () =>
        expect((await takeWithReads(ports, keys, next)).keys).toBeDefined(),
      )
      expect(await holders(keys)).toEqual([next.claimedAt, next.claimedAt])
      // The refused batch once (its commit answered "atomic publish is disabled"), then never tried again.
      expect(sent).toHaveLength(i === 0 ? 1 : 0)
      expect(requests.filter((s) => s.startsWith('$KV.'))).toHaveLength(i === 0 ? 3 : 2)
      await releaseClaimKeys(deps, keys, next.jobName)
    }
    expect(warned.filter((m) => /refuses atomic batches/.test(m))).toHaveLength(1)
    // Provision sets allow_atomic again (an upgrade): a minute later the batch is tried, and taken.
    await deps.bus.jsm.streams.update(stream, { ...config, allow_atomic: true })
    const later = portsOf({ ...deps, log, now: () => Date.now() + 61_000 })
    const keys = claimKeys(env.namespace, 'm-old-3', `node-old-${env.namespace}`)
    const { requests, sent } = await sentBy(async () =>
      expect((await takeWithReads(later, keys, claimOf('b-3-eeee', new Date().toISOString()))).keys).toBeDefined(),
    )
    expect([requests.filter((s) => s.startsWith('$KV.')).length, sent.length]).toEqual([1, 1])
  } finally {
    await deps.bus.jsm.streams.update(stream, { ...config, allow_atomic: true })
  }
})
