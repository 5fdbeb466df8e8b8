// The waits admit's and cancel's handlers make run on Deps' timers (pkg/lib/timers.ts), not on setTimeout: the
// deterministic simulation (support/dst.ts) runs the real handlers in virtual time, and a wait that went to a real
// timer there would fire after the run, or never. Each wait is given timers that only fire when told to.
import { describe, expect, it } from 'vitest'
import { BookkeepingLane } from '../../functions/admit/bookkeeping.js'
import { afterEarlyTick } from '../../functions/admit/index.js'
import { awaitAdmittedJob, JobArrivals } from '../../functions/cancel/in-flight.js'
import { Lane } from '../../pkg/lib/lane.js'
import type { Timers } from '../../pkg/lib/timers.js'
import type { Deps } from '../../pkg/transport/function.js'
import { fakeKube } from './support/kube-fake.js'
import { silentLogger } from './support/world.js'

/** Timers on a clock that moves only by advance(). */
function virtualTimers() {
  let now = 0
  let seq = 0
  const due = new Map<number, { at: number; fire: () => void }>()
  const timers: Timers = {
    set: (fire, ms) => {
      due.set(++seq, { at: now + ms, fire })
      return seq
    },
    clear: (t) => {
      due.delete(t as number)
    },
  }
  const advance = async (ms: number) => {
    now += ms
    for (const [id, t] of [...due].sort((a, b) => a[1].at - b[1].at)) {
      if (t.at > now) continue
      due.delete(id)
      t.fire()
    }
    for (let i = 0; i < 10; i++) await Promise.resolve()
  }
  return { timers, advance, now: () => now, pending: () => due.size }
}

const settled = async <T>(p: Promise<T>) => {
  let done = false
  void p.then(() => (done = true))
  for (let i = 0; i < 10; i++) await Promise.resolve()
  return done
}

describe('the handlers wait on Deps’ timers', () => {
  it('Lane.idle gives up on a busy lane when its timer fires', async () => {
    const v = virtualTimers()
    const lane = new Lane(1)
    void lane.run(() => new Promise(() => {}))
    const idle = lane.idle(10_000, v.timers)
    expect(await settled(idle)).toBe(false)
    await v.advance(10_000)
    expect(await settled(idle)).toBe(true)
  })

  it('JobArrivals.wait ends at its bound on those timers', async () => {
    const v = virtualTimers()
    const arrivals = new JobArrivals(v.timers)
    const wait = arrivals.wait('ns', 'job', 1_000)
    await v.advance(999)
    expect(await settled(wait)).toBe(false)
    await v.advance(1)
    expect(await settled(wait)).toBe(true)
    expect(arrivals.size).toBe(0)
  })

  it('awaitAdmittedJob waits on Deps’ clock and timers when given no time of its own', async () => {
    const v = virtualTimers()
    const claimedAt = new Date(0).toISOString()
    const claim = JSON.stringify({
      namespace: 'ns',
      backfill: 'a',
      attempt: 1,
      jobName: 'job',
      claimedAt,
      idleSince: claimedAt,
    })
    const deps = {
      log: silentLogger,
      now: v.now,
      timers: v.timers,
      kube: fakeKube({
        getBackfill: async () => ({ spec: { modelRef: 'model-a' } }) as never,
        getJob: async () => null,
      }),
      bus: {
        kv: {
          claims: {
            get: async (key: string) => ({ bucket: 'claims', key, revision: 1, operation: 'PUT', string: () => claim }),
          },
        },
      },
    } as unknown as Deps
    const at = new Date(1).toISOString()
    const found = awaitAdmittedJob(
      deps,
      undefined,
      { namespace: 'ns', backfill: 'a', jobName: 'job', at },
      { waitMs: 2_000 },
    )
    expect(await settled(found)).toBe(false)
    await v.advance(1_000)
    await v.advance(1_000)
    expect(await settled(found)).toBe(true)
    expect(await found).toBeNull()
  })

  it('afterEarlyTick waits out the early remainder on the given timers', async () => {
    const v = virtualTimers()
    const admitted = afterEarlyTick(new Lane(1), 200, async () => 'admitted', v.timers)
    expect(await settled(admitted)).toBe(false)
    await v.advance(200)
    expect((await admitted).result).toBe('admitted')
  })

  it('the bookkeeping lane’s deadline runs on the given timers', async () => {
    const v = virtualTimers()
    const errors: unknown[] = []
    const log = { ...silentLogger, error: (o: unknown) => errors.push(o) } as typeof silentLogger
    const { done } = await new BookkeepingLane(1, 1, 60_000).submit(() => new Promise(() => {}), where, log, v.timers)
    expect(await settled(done)).toBe(false)
    await v.advance(60_000)
    expect(await settled(done)).toBe(true)
    expect(errors).toHaveLength(1)
    expect(v.pending()).toBe(0)
  })
})

const where = { namespace: 'ns', backfill: 'a', job: 'job' }
