// The POST between two reads of the newest request (pkg/admission/protocol.ts post), over the in-memory ports: what the
// admission does when a request comes while the POST is in flight, and when the read after the POST gives no answer.
import type { V1Job } from '@kubernetes/client-node'
import { describe, expect, it } from 'vitest'
import { PRE_POST_READ_FRESH_MS, post, readBeforePost } from '../../pkg/admission/protocol.js'
import type { BackfillState } from '../../pkg/core/state.js'
import { emptyCounters } from '../../pkg/core/state.js'
import { createLogger } from '../../pkg/observability/log.js'
import { type Gate, MemoryJobs, MemoryKv, MemoryRequests, memoryPorts, SimulatedFault } from './support/memory-ports.js'

const T = Date.parse('2026-06-01T00:00:00.000Z')
const iso = (ms: number) => new Date(ms).toISOString()

const job: V1Job = { metadata: { namespace: 'ns', name: 'bf-1', labels: {} }, spec: { template: {} } }
const where = { namespace: 'ns', model: 'llm', jobName: 'bf-1', cursor: 0 }
const starting = {
  v: 1,
  namespace: 'ns',
  name: 'bf-1',
  phase: 'Starting',
  jobName: 'bf-1',
  idleSince: iso(T - 10_000),
  startedAt: iso(T),
  counters: emptyCounters(),
  updatedAt: iso(T),
} as unknown as BackfillState

/**
 * The ports, with `during` run as the POST takes effect, the n-th newest-request read failing when asked, and the
 * n-th idle-state read too.
 */
function world(opts: { during?: (requests: MemoryRequests) => void; failRead?: number; failIdleRead?: number } = {}) {
  let now = T
  const clock = { now: () => now }
  let reads = 0
  let idleReads = 0
  const gate: Gate = async (op) => {
    if (op === 'requests.newest' && ++reads === opts.failRead) return 'failBefore'
    if (op === 'idle.get' && ++idleReads === opts.failIdleRead) return 'failBefore'
    if (op === 'jobs.create') {
      now += 50
      opts.during?.(requests)
    }
    return 'ok'
  }
  const idle = new MemoryKv('idle', gate)
  const requests = new MemoryRequests(idle, clock, gate)
  const jobs = new MemoryJobs(clock, gate)
  const ports = memoryPorts({
    claims: new MemoryKv('claims'),
    states: new MemoryKv('backfills'),
    requests,
    jobs,
    clock,
    log: createLogger('test'),
  })
  return {
    ports,
    jobs,
    requests,
    live: () => [...jobs.jobs.values()].filter((j) => j.deletedAt === undefined),
    /** Time passing (a state write, the actions before the POST). */
    tick: (ms: number) => {
      now += ms
    },
    reads: () => reads,
    idleReads: () => idleReads,
    /** Demand's idle-state write for a request at `at` (acknowledged before the fence). */
    idleWrite: (at: number) =>
      idle.put(
        'ns.llm',
        JSON.stringify({
          v: 1,
          namespace: 'ns',
          model: 'llm',
          lastForegroundAt: iso(at),
          requests: 1,
          updatedAt: iso(at),
        }),
      ),
  }
}

describe('post', () => {
  it('creates the Job when no request came', async () => {
    const w = world()
    const outcome = await post(w.ports, job, starting, where)
    expect(outcome.kind).toBe('created')
    expect(w.live()).toHaveLength(1)
  })

  it('deletes the Job it created when a request on the foreground subject was stored during the POST', async () => {
    const w = world({
      during: (requests) =>
        requests.store({ namespace: 'ns', model: 'llm', at: T + 20, subject: 'documented' } as never),
    })
    const outcome = await post(w.ports, job, starting, where)
    expect(outcome).toMatchObject({ kind: 'racedAfter', lastRequestAt: iso(T + 20), deleted: 'deleted' })
    expect(w.live()).toHaveLength(0)
  })

  // A read after the POST that fails (NATS restarting, or its answer later than the deadline) proved nothing: the
  // request may be there, and demand, the other way to cancel it, may be as slow. Before, the error went up to the
  // event's retry and the Job was left to demand → cancel.
  it('deletes the Job it created when the read after the POST gives no answer', async () => {
    const w = world({
      failRead: 2,
      during: (requests) =>
        requests.store({ namespace: 'ns', model: 'llm', at: T + 20, subject: 'documented' } as never),
    })
    const outcome = await post(w.ports, job, starting, where)
    expect(outcome).toMatchObject({ kind: 'unobserved', deleted: 'deleted' })
    expect(outcome.kind === 'unobserved' && outcome.why).toMatch(/timeout/)
    expect(w.live()).toHaveLength(0)
    expect(w.jobs.created).toHaveLength(1)
  })

  // The read in front of the POST is sent together with the state write (one round trip fewer per admission).
  describe('with the read sent alongside the state write', () => {
    it('uses it while it is fresh: one read before the POST, not two', async () => {
      const w = world()
      const early = readBeforePost(w.ports, 'ns', 'llm', 0)
      w.tick(PRE_POST_READ_FRESH_MS - 5)
      const outcome = await post(w.ports, job, starting, where, undefined, early)
      expect(outcome.kind).toBe('created')
      expect(w.reads()).toBe(2) // the early one and the one after the POST
    })

    // A slow state write (or a finalizer, a cleanup before the POST): a request stored after the early read was sent
    // is one it cannot have seen. Used anyway, the Job would be created over it, and deleted only by the read after.
    it('sends it again when it is older than PRE_POST_READ_FRESH_MS, and creates no Job over a request since', async () => {
      const w = world()
      const early = readBeforePost(w.ports, 'ns', 'llm', 0)
      expect((await early.answer).at).toBeNull()
      w.tick(10)
      w.requests.store({ namespace: 'ns', model: 'llm', at: T + 10, subject: 'documented' } as never)
      w.tick(PRE_POST_READ_FRESH_MS)
      const outcome = await post(w.ports, job, starting, where, undefined, early)
      expect(outcome).toMatchObject({ kind: 'racedBefore', lastRequestAt: iso(T + 10) })
      expect(w.jobs.created).toHaveLength(0)
    })

    it('sends it again when it failed', async () => {
      const w = world({ failRead: 1 })
      const early = readBeforePost(w.ports, 'ns', 'llm', 0)
      const outcome = await post(w.ports, job, starting, where, undefined, early)
      expect(outcome.kind).toBe('created')
      expect(w.reads()).toBe(3)
    })
  })

  // The idle state is read after the fence and awaited only here, not on the admission's path before its state write
  // (one round trip fewer): it holds the foreground subject's requests demand acknowledged up to the fence's cursor,
  // which the reads around the POST look past. A request in it newer than the window keeps the POST from going.
  describe('with the idle state read after the fence', () => {
    it('creates no Job over a request demand acknowledged before the fence', async () => {
      const w = world()
      await w.idleWrite(T - 1_000)
      const idle = w.ports.requests.idle('ns', 'llm')
      const early = readBeforePost(w.ports, 'ns', 'llm', 0, idle)
      const outcome = await post(w.ports, job, starting, where, undefined, early)
      expect(outcome).toMatchObject({ kind: 'racedBefore', lastRequestAt: iso(T - 1_000) })
      expect(w.jobs.created).toHaveLength(0)
    })

    it('creates the Job when the idle state holds only requests before the window', async () => {
      const w = world()
      await w.idleWrite(T - 20_000)
      const early = readBeforePost(w.ports, 'ns', 'llm', 0, w.ports.requests.idle('ns', 'llm'))
      const outcome = await post(w.ports, job, starting, where, undefined, early)
      expect(outcome.kind).toBe('created')
    })

    it('reads it again when it failed', async () => {
      const w = world({ failIdleRead: 1 })
      const idle = w.ports.requests.idle('ns', 'llm')
      await w.idleWrite(T - 1_000)
      const early = readBeforePost(w.ports, 'ns', 'llm', 0, idle)
      const outcome = await post(w.ports, job, starting, where, undefined, early)
      expect(outcome).toMatchObject({ kind: 'racedBefore', lastRequestAt: iso(T - 1_000) })
      expect(w.idleReads()).toBe(2)
    })
  })

  it('creates no Job when the read before the POST gives no answer', async () => {
    const w = world({ failRead: 1 })
    await expect(post(w.ports, job, starting, where)).rejects.toBeInstanceOf(SimulatedFault)
    expect(w.jobs.created).toHaveLength(0)
  })
})
