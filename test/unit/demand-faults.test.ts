// demand under faults, over in-memory ports: its slow cancel path (the claim read after the idle write, for an
// admission the watched claims have not shown yet) while the idle bucket refuses writes — its stream failing over,
// full, or over its account's quota. The cancel must not wait for a write that may not succeed for a long time; the
// requests are still failed and redelivered, so idleness is written (and the claim read after it) once the bucket
// takes writes again. Then the stored idle time, which never moves back, and a request delivered twice while its
// cancel is being published.
import { describe, expect, it } from 'vitest'
import type { InboundEvent } from '../../events/codec.js'
import { Demand } from '../../functions/demand/index.js'
import type { Cancel, DemandPorts } from '../../functions/demand/ports.js'
import { modelClaimKey } from '../../pkg/core/names.js'
import { type Claim, type ModelIdleState, toKv } from '../../pkg/core/state.js'
import { createLogger } from '../../pkg/observability/log.js'
import { MemoryKv } from './support/memory-ports.js'

const T = Date.parse('2026-06-01T00:00:00.000Z')
const immediateTimers: DemandPorts['timers'] = {
  set: (fire) => setTimeout(fire, 0),
  clear: (t) => clearTimeout(t as NodeJS.Timeout),
}

function world(
  idleFails: boolean,
  timers: DemandPorts['timers'] = immediateTimers,
  publish?: (cancel: Cancel) => Promise<{ seq: number }>,
  watched?: Claim,
) {
  const claims = new MemoryKv('claims')
  const idle = new MemoryKv('idle')
  const cancels: Cancel[] = []
  const refuse = () => Promise.reject(new Error('maximum bytes exceeded'))
  const ports: DemandPorts = {
    now: () => T,
    idle: {
      get: (key) => idle.get(key),
      create: (key, text) => (idleFails ? refuse() : idle.create(key, text)),
      update: (key, text, revision) => (idleFails ? refuse() : idle.update(key, text, revision)),
    },
    readClaim: (key) => claims.get(key),
    // Unless given, the admission is too recent for the watched copy: only the read can find it.
    watchedClaim: () => watched,
    publishCancel: async (cancel) => {
      cancels.push(cancel)
      return publish ? publish(cancel) : { seq: cancels.length }
    },
    publishPreempt: () => {},
    timers,
    start: async () => {},
    stop: async () => {},
  }
  return { claims, idle, cancels, demand: new Demand(ports, createLogger('test')) }
}

const claim: Claim = {
  namespace: 'ns',
  backfill: 'bf',
  attempt: 1,
  jobName: 'bf-1',
  claimedAt: new Date(T - 5_000).toISOString(),
  idleSince: new Date(T - 65_000).toISOString(),
}

const request = (at: number) =>
  ({
    id: 'r1',
    source: 'test',
    type: 'ai.flexinfer.foreground.request',
    time: new Date(at).toISOString(),
    storedAt: at,
    data: { namespace: 'ns', model: 'llm', workloadClass: 'interactive' },
  }) as unknown as InboundEvent

describe('a request breaking a claimed window while the idle bucket refuses writes', () => {
  it('sends the cancel all the same, and still fails the request (redelivered: idleness is written later)', async () => {
    const { claims, cancels, demand } = world(true)
    await claims.put(modelClaimKey('ns', 'llm'), toKv(claim))
    // Failed without the fix: the request failed with the write and no cancel went out until a delivery's write
    // succeeded.
    await expect(demand.handle(request(T - 1_000))).rejects.toThrow(/maximum bytes exceeded/)
    expect(cancels).toMatchObject([{ namespace: 'ns', backfill: 'bf', jobName: 'bf-1', reason: 'ForegroundDemand' }])
  })

  it('sends one cancel when the write succeeds (as before)', async () => {
    const { claims, cancels, demand } = world(false)
    await claims.put(modelClaimKey('ns', 'llm'), toKv(claim))
    await demand.handle(request(T - 1_000))
    expect(cancels).toHaveLength(1)
  })

  it('a request before the window sends nothing, write or no write', async () => {
    const { claims, cancels, demand } = world(true)
    await claims.put(modelClaimKey('ns', 'llm'), toKv(claim))
    await expect(demand.handle(request(T - 70_000))).rejects.toThrow()
    expect(cancels).toEqual([])
  })
})

describe("the model's last foreground request in the idle bucket", () => {
  const idleAt = async (idle: MemoryKv) => {
    const e = await idle.get('ns.llm')
    return e?.operation === 'PUT' ? (JSON.parse(e.text) as ModelIdleState).lastForegroundAt : null
  }
  const state = (at: number): ModelIdleState => ({
    namespace: 'ns',
    model: 'llm',
    lastForegroundAt: new Date(at).toISOString(),
    requests: 1,
    updatedAt: new Date(at).toISOString(),
  })

  it('never moves back: a newer time found stored is remembered, not written over by an older request', async () => {
    const { idle, demand } = world(false)
    // Another replica (or a write of ours whose reply was lost) stored T+10 s.
    await idle.put('ns.llm', toKv(state(T + 10_000)))
    // A request at T+5 s finds it on its compare-and-set, and leaves it.
    await demand.handle(request(T + 5_000))
    expect(await idleAt(idle)).toBe(new Date(T + 10_000).toISOString())
    // A redelivered request at T+8 s: older than what is stored. Failed without the fix: written over it with the
    // revision just read (T+8 s stored — the window measured from a request that was not the last).
    await demand.handle(request(T + 8_000))
    expect(await idleAt(idle)).toBe(new Date(T + 10_000).toISOString())
    // A newer one is written.
    await demand.handle(request(T + 12_000))
    expect(await idleAt(idle)).toBe(new Date(T + 12_000).toISOString())
  })

  // Found by the simulation (seed 12892, fresh reads): a restarted demand's write found a newer time stored, the claim
  // read after it failed, and the request's redelivery wrote its older time over the newer one with the revision that
  // write had read — admit then measured the window from the older request and created a Job inside the real one.
  it('never moves back when the claim read after a write that found a newer time failed', async () => {
    const { idle, claims, demand } = world(false)
    await idle.put('ns.llm', toKv(state(T + 10_000)))
    const get = claims.get.bind(claims)
    let failures = 1
    claims.get = (key) => (failures-- > 0 ? Promise.reject(new Error('claims.get: timeout')) : get(key))
    await expect(demand.handle(request(T + 5_000))).rejects.toThrow(/timeout/)
    expect(await idleAt(idle)).toBe(new Date(T + 10_000).toISOString())
    // Its redelivery: the claim read again (answered now), nothing written. Failed without the fix: T+5 s stored.
    await demand.handle(request(T + 5_000))
    expect(await idleAt(idle)).toBe(new Date(T + 10_000).toISOString())
    await demand.handle(request(T + 12_000))
    expect(await idleAt(idle)).toBe(new Date(T + 12_000).toISOString())
  })
})

describe('one request delivered twice while its cancel is being published', () => {
  it('the second delivery is not answered before the cancel is stored', async () => {
    // A redelivery racing the first delivery (the ack wait ran out while NATS was slow). Acknowledging it ends the
    // message: had the second been answered at once (the cancel counted as sent while still in flight), a crash
    // before the publish landed lost the cancel for good — the simulation's hostile seed 27381, a Job live 10.7 s
    // after the request. Failed without the fix: the duplicate resolved while the publish was pending.
    let store!: () => void
    const stored = new Promise<{ seq: number }>((resolve) => {
      store = () => resolve({ seq: 1 })
    })
    // Watched: each delivery finds the claim on the request itself.
    const { claims, cancels, demand } = world(false, immediateTimers, () => stored, claim)
    await claims.put(modelClaimKey('ns', 'llm'), toKv(claim))
    const first = demand.handle(request(T - 1_000))
    const second = demand.handle(request(T - 1_000))
    let secondDone = false
    void second?.then(() => {
      secondDone = true
    })
    await new Promise((r) => setTimeout(r, 20))
    expect(cancels).toHaveLength(1)
    expect(secondDone).toBe(false)
    store()
    await Promise.all([first, second])
    expect(secondDone).toBe(true)
    expect(cancels).toHaveLength(1)
  })

  it('a failed publish fails both deliveries, and the next one sends the cancel again', async () => {
    let fail = true
    const { claims, cancels, demand } = world(false, immediateTimers, async () => {
      if (fail) throw new Error('timeout')
      return { seq: 2 }
    })
    await claims.put(modelClaimKey('ns', 'llm'), toKv(claim))
    const both = [demand.handle(request(T - 1_000)), demand.handle(request(T - 1_000))]
    await expect(both[0]).rejects.toThrow('timeout')
    await expect(both[1]).rejects.toThrow('timeout')
    fail = false
    await demand.handle(request(T - 1_000))
    expect(cancels.length).toBeGreaterThanOrEqual(2)
  })
})

describe('requests that arrive during a write which finds a newer time already stored', () => {
  it('are answered, and a claim their time breaks is cancelled, though nothing is left to write', async () => {
    // A demand process restarted after another was killed mid-backlog: the killed one had stored T+10 s. The first
    // request here (T+5 s) writes; while that write is in flight a second (T+7 s) arrives and waits for the next
    // write. The write finds T+10 s stored and keeps it, so nothing is left to write — and the second request hung
    // for good: its message was kept alive forever, and on an AckAll consumer it held the ack floor, so everything
    // above it was redelivered every ack wait (seen on the real server: 7,799 requests never acked). Failed without
    // the fix: the second request still pending, and no cancel for the window only it breaks.
    const { claims, idle, cancels, demand } = world(false)
    await idle.put(
      'ns.llm',
      toKv({
        namespace: 'ns',
        model: 'llm',
        lastForegroundAt: new Date(T + 10_000).toISOString(),
        requests: 1,
        updatedAt: new Date(T + 10_000).toISOString(),
      } satisfies ModelIdleState),
    )
    // Admitted on a window that opened at T+6 s; too recent for the watched copy.
    await claims.put(modelClaimKey('ns', 'llm'), toKv({ ...claim, idleSince: new Date(T + 6_000).toISOString() }))
    const first = demand.handle(request(T + 5_000))
    const second = demand.handle(request(T + 7_000))
    const settled = (p: Promise<void> | undefined) =>
      Promise.race([p?.then(() => 'answered') ?? 'answered', new Promise((r) => setTimeout(() => r('pending'), 500))])
    expect(await settled(first)).toBe('answered')
    expect(await settled(second)).toBe('answered')
    expect(cancels).toMatchObject([{ jobName: 'bf-1', at: new Date(T + 7_000).toISOString() }])
    const stored = await idle.get('ns.llm')
    expect(stored?.operation === 'PUT' && JSON.parse(stored.text).lastForegroundAt).toBe(
      new Date(T + 10_000).toISOString(),
    )
  })
})
