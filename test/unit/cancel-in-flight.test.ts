// A foreground cancel that finds no Job waits for the admission still creating it (functions/cancel/in-flight.ts).
// The watched copy wakes that wait the moment the Job is copied: no poll interval between the Job appearing and its
// DELETE, on the one preemption that is already late.
import type { V1Job } from '@kubernetes/client-node'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { awaitAdmittedJob, JobArrivals } from '../../functions/cancel/in-flight.js'
import type { ModelBackfill } from '../../pkg/core/api.js'
import type { ObjectCache } from '../../pkg/kube/cache.js'
import { fakeDeps } from './support/deps.js'
import { fakeKube } from './support/kube-fake.js'

const NS = 'team'
const JOB = 'bf-a-1-abc'
const claimedAt = '2026-01-01T00:00:00.000Z'
const requestAt = '2026-01-01T00:00:05.000Z'

const job = (name = JOB): V1Job => ({ metadata: { namespace: NS, name, uid: `uid-${name}` } })

/** A watched copy of Jobs that tells its listeners of every change, as the real one does. */
class Copy implements ObjectCache<V1Job> {
  private readonly items = new Map<string, V1Job>()
  private readonly listeners: ((j: V1Job, removed: boolean) => void)[] = []
  async start() {}
  async stop() {}
  list() {
    return [...this.items.values()]
  }
  get(namespace: string, name: string) {
    return this.items.get(`${namespace}/${name}`) ?? null
  }
  onChange(l: (j: V1Job, removed: boolean) => void) {
    this.listeners.push(l)
  }
  add(j: V1Job) {
    this.items.set(`${j.metadata?.namespace}/${j.metadata?.name}`, j)
    for (const l of this.listeners) l(j, false)
  }
}

function world() {
  const calls = { getJob: 0, claims: 0 }
  let claim: object | null = { namespace: NS, backfill: 'a', attempt: 1, jobName: JOB, claimedAt, idleSince: claimedAt }
  const deps = fakeDeps({
    log: { error() {}, warn() {}, info() {}, debug() {} },
    // The wait's clock and timers are Deps' (the fake timers replace both).
    now: () => Date.now(),
    kube: fakeKube({
      getBackfill: async () =>
        ({ metadata: { namespace: NS, name: 'a' }, spec: { modelRef: 'model-a' } }) as unknown as ModelBackfill,
      getJob: async () => {
        calls.getJob++
        return null
      },
    }),
    bus: {
      kv: {
        claims: {
          get: async (key: string) => {
            calls.claims++
            const text = claim && JSON.stringify(claim)
            return text === null
              ? null
              : { bucket: 'claims', key, revision: 1, operation: 'PUT' as const, string: () => text }
          },
        },
      },
    },
  })
  return { deps, calls, dropClaim: () => (claim = null) }
}

const cancel = { namespace: NS, backfill: 'a', jobName: JOB, at: requestAt }

describe('awaitAdmittedJob', () => {
  beforeEach(() => vi.useFakeTimers())
  afterEach(() => vi.useRealTimers())

  it('returns the Job the moment the watched copy has it, with no time passing', async () => {
    const { deps, calls } = world()
    const copy = new Copy()
    const arrivals = new JobArrivals()
    copy.onChange(arrivals.change)
    let found: V1Job | null | undefined
    const waiting = awaitAdmittedJob(deps, copy, cancel, { arrivals }).then((j) => (found = j))
    await vi.advanceTimersByTimeAsync(300)
    expect(found).toBeUndefined()
    expect(arrivals.size).toBe(1)
    // Another Job changing does not end the wait.
    copy.add(job('other'))
    await vi.advanceTimersByTimeAsync(0)
    expect(found).toBeUndefined()
    copy.add(job())
    // Not one timer advanced: the copy's change alone ends the wait (a 25 ms poll did not see it here).
    await vi.advanceTimersByTimeAsync(0)
    await waiting
    expect(found?.metadata?.uid).toBe(`uid-${JOB}`)
    expect(arrivals.size).toBe(0)
    // Claim read before and after; no GET was needed.
    expect(calls).toEqual({ getJob: 0, claims: 2 })
  })

  it('a Job already in the copy when the wait begins is returned without waiting', async () => {
    const { deps } = world()
    const copy = new Copy()
    copy.add(job())
    const arrivals = new JobArrivals()
    copy.onChange(arrivals.change)
    expect((await awaitAdmittedJob(deps, copy, cancel, { arrivals }))?.metadata?.name).toBe(JOB)
    expect(arrivals.size).toBe(0)
  })

  it('without a copy: a GET and a claim read once a second, and null at the deadline', async () => {
    const { deps, calls } = world()
    let found: V1Job | null | undefined
    const waiting = awaitAdmittedJob(deps, undefined, cancel, { waitMs: 3_000 }).then((j) => (found = j))
    await vi.advanceTimersByTimeAsync(2_999)
    expect(found).toBeUndefined()
    expect(calls).toEqual({ getJob: 2, claims: 3 })
    await vi.advanceTimersByTimeAsync(1)
    await waiting
    expect(found).toBeNull()
    expect(calls.getJob).toBe(3)
  })

  it('the claim given up while waiting ends the wait at the next recheck, and no waiter is left behind', async () => {
    const { deps, dropClaim } = world()
    const copy = new Copy()
    const arrivals = new JobArrivals()
    copy.onChange(arrivals.change)
    let found: V1Job | null | undefined
    const waiting = awaitAdmittedJob(deps, copy, cancel, { arrivals }).then((j) => (found = j))
    await vi.advanceTimersByTimeAsync(500)
    dropClaim()
    await vi.advanceTimersByTimeAsync(500)
    await waiting
    expect(found).toBeNull()
    expect(arrivals.size).toBe(0)
    expect(vi.getTimerCount()).toBe(0)
  })
})
