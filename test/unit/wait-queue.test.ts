// The adapter's queue of delivered messages waiting for a handler (pkg/transport/jetstream-adapter.ts): FIFO, bounded,
// O(1) shift that compacts, and forEach (the keep-alive) sees exactly what waits.
import { describe, expect, it } from 'vitest'
import { WaitQueue } from '../../pkg/transport/jetstream-adapter.js'

describe('WaitQueue', () => {
  it('is first in, first out and refuses past its bound', () => {
    const q = new WaitQueue<number>(3)
    expect([q.push(1), q.push(2), q.push(3), q.push(4)]).toEqual([true, true, true, false])
    expect(q.size).toBe(3)
    expect(q.shift()).toBe(1)
    expect(q.push(5)).toBe(true)
    expect([q.shift(), q.shift(), q.shift(), q.shift()]).toEqual([2, 3, 5, undefined])
    expect(q.size).toBe(0)
  })

  it('keeps order and visits exactly what waits across compactions', () => {
    const q = new WaitQueue<number>(10_000)
    const out: number[] = []
    let n = 0
    for (let round = 0; round < 20; round++) {
      for (let i = 0; i < 500; i++) q.push(n++)
      for (let i = 0; i < 400; i++) out.push(q.shift() as number)
      const seen: number[] = []
      q.forEach((x) => {
        seen.push(x)
      })
      expect(seen.length).toBe(q.size)
      expect(seen[0]).toBe((out.at(-1) as number) + 1)
    }
    for (let x = q.shift(); x !== undefined; x = q.shift()) out.push(x)
    expect(out).toEqual(Array.from({ length: n }, (_, i) => i))
  })
})
