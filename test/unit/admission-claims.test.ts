// The claims over the in-memory ports: two tries of one attempt (same Job name) taking and giving back claims.
import { describe, expect, it } from 'vitest'
import { claimKeys, releaseClaimKeys, takeClaimKeys } from '../../admission/claims.js'
import { MemoryKv } from '../../admission/memory-ports.js'
import { type Claim, parseClaim, parseEntry } from '../../core/state.js'
import { createLogger } from '../../observability/log.js'

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
