// The sweep's pending set (functions/lifecycle/pending.ts): one queued resync per backfill, bounded, expiring.
import { describe, expect, it } from 'vitest'
import { PendingResyncs } from '../../functions/lifecycle/pending.js'

describe('PendingResyncs', () => {
  it('holds a backfill back until its event is handled', () => {
    const p = new PendingResyncs(() => 0)
    expect(p.has('ns.a')).toBe(false)
    expect(p.add('ns.a')).toBe(true)
    expect(p.has('ns.a')).toBe(true)
    p.done('ns.a')
    expect(p.has('ns.a')).toBe(false)
  })

  it('lets it go after the ttl (another replica may have handled it)', () => {
    let now = 0
    const p = new PendingResyncs(() => now, 1000)
    p.add('ns.a')
    now = 999
    expect(p.has('ns.a')).toBe(true)
    now = 1000
    expect(p.has('ns.a')).toBe(false)
    expect(p.size).toBe(0)
  })

  it('is bounded: a full set refuses new keys, expired ones make room', () => {
    let now = 0
    const p = new PendingResyncs(() => now, 1000, 2)
    expect(p.add('a')).toBe(true)
    now = 500
    expect(p.add('b')).toBe(true)
    expect(p.add('c')).toBe(false)
    expect(p.add('a')).toBe(true) // already held: re-stamped, not refused
    now = 1400
    expect(p.add('c')).toBe(false) // a (re-stamped) and b, both at 500, still held
    now = 1500
    expect(p.add('c')).toBe(true) // both expired
    expect(p.size).toBe(1)
  })

  it('the ack floor holds on to what is provably still queued, up to maxHold; the rest keeps its ttl', () => {
    let now = 0
    const p = new PendingResyncs(() => now, 1000, 100, 5000)
    for (const [k, seq] of [
      ['handled', 10],
      ['queued', 20],
    ] as const) {
      p.add(k)
      p.published(k, seq)
    }
    p.add('unacked') // its publish not acknowledged (yet): the floor says nothing about it
    now = 900
    p.floor(15)
    expect(p.has('handled')).toBe(true) // at or below the floor: its ttl as before
    expect(p.has('queued')).toBe(true)
    now = 1500 // past the ttl of the first publish, but the floor at 900 showed it queued: held on
    expect(p.has('queued')).toBe(true)
    expect(p.has('handled')).toBe(false)
    expect(p.has('unacked')).toBe(false) // ttl as before
    for (now = 1800; now < 5000; now += 800) {
      p.floor(15)
      expect(p.has('queued')).toBe(true)
    }
    now = 5000
    p.floor(15) // maxHold after its publish: no longer restarted, a stuck floor does not hold it forever
    now = 5900
    expect(p.has('queued')).toBe(false)
  })

  it('keeps expiring oldest first after floors re-stamp entries', () => {
    let now = 0
    const p = new PendingResyncs(() => now, 1000, 100, 60_000)
    p.add('a')
    p.published('a', 5)
    now = 500
    p.add('b')
    p.published('b', 6)
    now = 800
    p.floor(5) // b re-stamped at 800 (after a, at 0)
    now = 1700
    p.add('c') // expire() walks oldest first: a (0) goes, b (800) is not yet due
    expect(p.size).toBe(2)
    expect(p.has('b')).toBe(true)
    now = 1800
    expect(p.has('b')).toBe(false)
    expect(p.has('c')).toBe(true)
  })
})
