// The cancel fast path's lanes (functions/cancel/index.ts, functions/cancel/deletes.ts): never more than `width` tasks at once, the rest in
// arrival order, and idle() lets the bookkeeping wait for a burst of DELETEs without ever being starved.
import { describe, expect, it } from 'vitest'
import { Lane } from '../../pkg/lib/lane.js'

const tick = () => new Promise((r) => setTimeout(r, 0))

describe('Lane', () => {
  it('runs at most width tasks at once, the rest in arrival order', async () => {
    const lane = new Lane(2)
    const started: number[] = []
    const release: (() => void)[] = []
    const tasks = [0, 1, 2, 3].map((i) =>
      lane.run(async () => {
        started.push(i)
        await new Promise<void>((r) => release.push(r))
        return i
      }),
    )
    await tick()
    expect(started).toEqual([0, 1])
    expect(lane.busy).toBe(4)
    release.shift()?.()
    await tick()
    expect(started).toEqual([0, 1, 2])
    for (let i = 0; i < 3; i++) {
      release.shift()?.()
      await tick()
    }
    expect(await Promise.all(tasks)).toEqual([0, 1, 2, 3])
    expect(lane.busy).toBe(0)
  })

  it('frees its place when a task throws', async () => {
    const lane = new Lane(1)
    await expect(lane.run(() => Promise.reject(new Error('boom')))).rejects.toThrow('boom')
    expect(await lane.run(async () => 'next')).toBe('next')
  })

  it('idle() resolves once the lane drains, or after maxWaitMs while it stays busy', async () => {
    const lane = new Lane(1)
    await lane.idle(10) // already idle
    let release = () => {}
    const running = lane.run(() => new Promise<void>((r) => (release = r)))
    let drained = false
    const waiting = lane.idle(60_000).then(() => (drained = true))
    await tick()
    expect(drained).toBe(false)
    release()
    await running
    await waiting
    expect(drained).toBe(true)

    const stuck = new Lane(1)
    void stuck.run(() => new Promise(() => {}))
    const t0 = Date.now()
    await stuck.idle(50)
    expect(Date.now() - t0).toBeGreaterThanOrEqual(40)
  })
})
