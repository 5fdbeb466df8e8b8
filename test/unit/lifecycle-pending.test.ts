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
})
