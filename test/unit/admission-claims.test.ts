// The claims over the in-memory ports: two tries of one attempt (same Job name) taking and giving back claims.
import { describe, expect, it } from 'vitest'
import { claimKeys, newClaim, readClaimsAhead, releaseClaimKeys, takeClaimKeys } from '../../pkg/admission/claims.js'
import { type Claim, parseClaim, parseEntry } from '../../pkg/core/state.js'
import { createLogger } from '../../pkg/observability/log.js'
import { MemoryKv } from './support/memory-ports.js'

const T = Date.parse('2026-06-01T00:00:00.000Z')
const iso = (ms: number) => new Date(ms).toISOString()

function world() {
  const claims = new MemoryKv('claims')
  const states = new MemoryKv('backfills')
  let now = T
  const ports = { claims, states, clock: { now: () => now }, log: createLogger('test') }
  const holder = (key: string) => {
    const e = claims.peek(key)
    if (e?.operation !== 'PUT') return null
    const r = parseEntry(e.text, parseClaim)
    // Which try holds it: its time names it.
    return r.ok ? r.value.claimedAt : null
  }
  return { ports, holder, tick: (ms: number) => (now += ms) }
}

const keys = claimKeys('ns', 'llm', 'node-a')
const tryOf = (claimedAt: number, idleSince: number): Claim => ({
  namespace: 'ns',
  backfill: 'bf',
  attempt: 1,
  jobName: 'bf-1',
  claimedAt: iso(claimedAt),
  idleSince: iso(idleSince),
})

describe('two tries of one attempt', () => {
  it('a later try that gives up puts back the claim of the earlier one it replaced (whose Job may exist)', async () => {
    const { ports, holder } = world()
    const a = tryOf(T, T - 5_000)
    const b = tryOf(T + 200, T - 4_000)
    expect((await takeClaimKeys(ports, keys, a)).claim).toEqual(a)
    // The later try replaces it (a leftover of a failed try must name the admission that creates the Job)...
    const taken = await takeClaimKeys(ports, keys, b)
    expect(holder(keys.model)).toEqual(b.claimedAt)
    // ... and, deciding after its fence not to create, gives back only its own: the earlier try's claim is back.
    await releaseClaimKeys(ports, keys, b, taken.replaced)
    expect([holder(keys.model), holder(keys.node)]).toEqual([a.claimedAt, a.claimedAt])
  })

  it('an earlier try that gives up leaves the later one its claims', async () => {
    const { ports, holder } = world()
    const a = tryOf(T, T - 5_000)
    const b = tryOf(T + 200, T - 4_000)
    const first = await takeClaimKeys(ports, keys, a)
    await takeClaimKeys(ports, keys, b)
    await releaseClaimKeys(ports, keys, a, first.replaced)
    expect([holder(keys.model), holder(keys.node)]).toEqual([b.claimedAt, b.claimedAt])
  })

  it('a try with nothing to put back releases its claims', async () => {
    const { ports, holder } = world()
    const a = tryOf(T, T - 5_000)
    const taken = await takeClaimKeys(ports, keys, a)
    await releaseClaimKeys(ports, keys, a, taken.replaced)
    expect([holder(keys.model), holder(keys.node)]).toEqual([null, null])
  })
})

describe('two tries of one attempt started in the same millisecond (a timer delivered twice)', () => {
  const tryIdOf = (ports: ReturnType<typeof world>['ports'], key: string) => {
    const e = ports.claims.peek(key)
    const r = e?.operation === 'PUT' ? parseEntry(e.text, parseClaim) : null
    return r?.ok ? r.value.tryId : null
  }

  it('the one that gives up leaves the other its claims, though both name the same time', async () => {
    // The simulation's seeds 52165 and 42033: the try giving up released "its own" claim by claimedAt and took the
    // other try's with it — whose Job was created, and ran without claims. Failed without the try's id: [null, null].
    const { ports } = world()
    const a = { ...tryOf(T, T - 5_000), tryId: 'try-a' }
    const b = { ...tryOf(T, T - 5_000), tryId: 'try-b' }
    const first = await takeClaimKeys(ports, keys, a)
    const second = await takeClaimKeys(ports, keys, b)
    expect(second.claim).toEqual(b)
    await releaseClaimKeys(ports, keys, a, first.replaced)
    expect([tryIdOf(ports, keys.model), tryIdOf(ports, keys.node)]).toEqual(['try-b', 'try-b'])
  })

  it('the later one giving up puts the earlier one back', async () => {
    const { ports } = world()
    const a = { ...tryOf(T, T - 5_000), tryId: 'try-a' }
    const b = { ...tryOf(T, T - 5_000), tryId: 'try-b' }
    await takeClaimKeys(ports, keys, a)
    const second = await takeClaimKeys(ports, keys, b)
    await releaseClaimKeys(ports, keys, b, second.replaced)
    expect([tryIdOf(ports, keys.model), tryIdOf(ports, keys.node)]).toEqual(['try-a', 'try-a'])
  })

  it('newClaim gives every try its own id', () => {
    const fields = { namespace: 'ns', backfill: 'bf', attempt: 1, jobName: 'bf-1' }
    const [x, y] = [newClaim(fields, T), newClaim(fields, T)]
    expect(x.claimedAt).toBe(y.claimedAt)
    expect(x.tryId).not.toBe(y.tryId)
  })
})

describe('a key contended past the retries', () => {
  it('is not taken: a key free again by the last read still counts as held, never as taken unwritten', async () => {
    // Every write loses (someone writes in between each time) and every read finds the key free (a delete marker):
    // failed before the fix by reporting both keys taken with neither written — a Job would have run unclaimed.
    const writes: string[] = []
    const conflict = (key: string) => {
      writes.push(key)
      return Promise.reject(new Error('wrong last sequence: claims (10071)'))
    }
    const claims = {
      get: async () => ({ operation: 'DEL' as const, revision: 7, text: '' }),
      create: conflict,
      update: conflict,
      delete: conflict,
    }
    const ports = { claims, states: new MemoryKv('backfills'), clock: { now: () => T }, log: createLogger('test') }
    const r = await takeClaimKeys(ports, keys, tryOf(T, T - 5_000))
    expect(r.keys).toBeUndefined()
    expect(r.contender).toMatchObject({ on: 'model', jobName: '(contended)' })
    // Bounded: four compare-and-sets on the model key, none on the node key.
    expect(writes).toEqual([keys.model, keys.model, keys.model, keys.model])
  })
})

describe('claims read ahead (with the first reads, before the decision)', () => {
  /** The world's claims bucket, counting its reads. */
  function counted() {
    const w = world()
    const gets: string[] = []
    const get = w.ports.claims.get.bind(w.ports.claims)
    w.ports.claims.get = (key: string) => {
      gets.push(key)
      return get(key)
    }
    return { ...w, gets }
  }
  const other = (claimedAt: number): Claim => ({
    ...tryOf(claimedAt, T - 9_000),
    backfill: 'other',
    jobName: 'other-1',
  })

  it('a key read free ahead is taken without another read', async () => {
    const { ports, holder, gets } = counted()
    const a = tryOf(T, T - 5_000)
    await releaseClaimKeys(ports, keys, (await takeClaimKeys(ports, keys, a)).claim as Claim)
    const ahead = readClaimsAhead(ports, keys)
    await ahead.entries
    gets.length = 0
    const b = tryOf(T + 1_000, T - 4_000)
    expect((await takeClaimKeys(ports, keys, b, ahead)).claim).toEqual(b)
    expect(gets).toEqual([])
    expect([holder(keys.model), holder(keys.node)]).toEqual([b.claimedAt, b.claimedAt])
  })

  it("another backfill's hold read ahead is read again: given back since, the keys are taken, not contended", async () => {
    const { ports, holder, gets } = counted()
    const theirs = other(T)
    await takeClaimKeys(ports, keys, theirs)
    const ahead = readClaimsAhead(ports, keys)
    await ahead.entries
    // They give it back between the read ahead and the admission's claims.
    await releaseClaimKeys(ports, keys, theirs)
    gets.length = 0
    const mine = tryOf(T + 100, T - 4_000)
    const r = await takeClaimKeys(ports, keys, mine, ahead)
    expect(r.contender).toBeUndefined()
    expect([holder(keys.model), holder(keys.node)]).toEqual([mine.claimedAt, mine.claimedAt])
    expect(gets).toEqual([keys.model, keys.node])
  })

  it('a key taken by another backfill after it was read free ahead: the compare-and-set fails, the hold stands', async () => {
    const { ports, holder } = counted()
    const ahead = readClaimsAhead(ports, keys)
    await ahead.entries
    const theirs = other(T)
    await takeClaimKeys(ports, keys, theirs)
    const r = await takeClaimKeys(ports, keys, tryOf(T + 100, T - 4_000), ahead)
    expect(r.keys).toBeUndefined()
    expect(r.contender).toMatchObject({ on: 'model', jobName: 'other-1' })
    expect([holder(keys.model), holder(keys.node)]).toEqual([theirs.claimedAt, theirs.claimedAt])
  })

  it('reads ahead of other keys (the model moved to another node) are not used; a failed read ahead is read again', async () => {
    const { ports, gets } = counted()
    const elsewhere = readClaimsAhead(ports, claimKeys('ns', 'llm', 'node-b'))
    gets.length = 0
    await takeClaimKeys(ports, keys, tryOf(T, T - 5_000), elsewhere)
    expect(gets).toEqual([keys.model, keys.node])
    gets.length = 0
    const failed = { keys, entries: Promise.reject(new Error('timeout')) } as ReturnType<typeof readClaimsAhead>
    failed.entries.catch(() => {})
    const r = await takeClaimKeys(ports, keys, tryOf(T + 100, T - 5_000), failed)
    expect(r.keys).toBeDefined()
    expect(gets).toEqual([keys.model, keys.node])
  })
})

describe('both keys free: taken together, one atomic write', () => {
  /** The world's claims bucket, counting its writes by kind. */
  function counted(opts: { atomic?: boolean } = {}) {
    const w = world()
    const writes: string[] = []
    const c = w.ports.claims
    for (const op of ['create', 'update', 'writeTogether'] as const) {
      const real = c[op].bind(c) as (...a: unknown[]) => Promise<unknown>
      ;(c as unknown as Record<string, unknown>)[op] = (...a: unknown[]) => {
        writes.push(op)
        return real(...a)
      }
    }
    // A store that cannot (a bucket without allow_atomic): nothing written, the keys one by one.
    if (opts.atomic === false)
      c.writeTogether = async () => {
        writes.push('writeTogether refused')
        return false
      }
    return { ...w, writes }
  }
  const other = (claimedAt: number): Claim => ({ ...tryOf(claimedAt, T - 9_000), backfill: 'other', jobName: 'o-1' })

  it('never written, then given back (delete markers): each admission is one write', async () => {
    const { ports, holder, writes } = counted()
    const a = tryOf(T, T - 5_000)
    expect((await takeClaimKeys(ports, keys, a)).claim).toEqual(a)
    await releaseClaimKeys(ports, keys, a)
    const b = tryOf(T + 1_000, T - 4_000)
    expect((await takeClaimKeys(ports, keys, b)).claim).toEqual(b)
    expect(writes).toEqual(['writeTogether', 'writeTogether'])
    expect([holder(keys.model), holder(keys.node)]).toEqual([b.claimedAt, b.claimedAt])
  })

  it('a key taken by another backfill after it was read free: the batch fails whole, the keys are judged one by one', async () => {
    const { ports, holder, writes } = counted()
    const ahead = readClaimsAhead(ports, keys)
    await ahead.entries
    const theirs = other(T)
    // Their node key only: the batch would have taken our model key had it not been all or nothing.
    await ports.claims.create(keys.node, JSON.stringify(theirs))
    writes.length = 0
    const r = await takeClaimKeys(ports, keys, tryOf(T + 100, T - 4_000), ahead)
    expect(r.contender).toMatchObject({ on: 'node', jobName: 'o-1' })
    // The model key was taken one by one after the failed batch, then given back: nobody holds it.
    expect(writes[0]).toBe('writeTogether')
    expect([holder(keys.model), holder(keys.node)]).toEqual([null, theirs.claimedAt])
  })

  it('a store that refuses batches: the keys are taken one by one, as before', async () => {
    const { ports, holder, writes } = counted({ atomic: false })
    const a = tryOf(T, T - 5_000)
    expect((await takeClaimKeys(ports, keys, a)).claim).toEqual(a)
    expect(writes).toEqual(['writeTogether refused', 'create', 'create'])
    expect([holder(keys.model), holder(keys.node)]).toEqual([a.claimedAt, a.claimedAt])
  })

  it('one key ours from an earlier try: no batch, the leftover replaced by compare-and-set', async () => {
    const { ports, writes } = counted()
    await takeClaimKeys(ports, keys, tryOf(T, T - 5_000))
    writes.length = 0
    const r = await takeClaimKeys(ports, keys, tryOf(T + 100, T - 4_000))
    expect(Object.keys(r.replaced ?? {})).toEqual([keys.model, keys.node])
    expect(writes).toEqual(['update', 'update'])
  })
})
