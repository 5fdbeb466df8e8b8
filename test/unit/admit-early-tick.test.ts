// A timer waits out its early tick without holding one of admit's admission slots (functions/admit afterEarlyTick):
// when windows end together, a slot is busy only with admission work.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { afterEarlyTick } from '../../functions/admit/index.js'
import { Lane } from '../../pkg/lib/lane.js'

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'performance'] })
})
afterEach(() => {
  vi.useRealTimers()
})

describe("admit's early tick", () => {
  it('is waited out off the slot: the next timer starts the moment a slot frees, its wait already over', async () => {
    const slots = new Lane(1)
    const started: string[] = []
    let finishA: () => void = () => {}
    const a = afterEarlyTick(slots, 200, () => {
      started.push('a')
      return new Promise<void>((r) => {
        finishA = r
      })
    })
    const b = afterEarlyTick(slots, 200, async () => {
      started.push('b')
    })
    await vi.advanceTimersByTimeAsync(200)
    expect(started).toEqual(['a'])
    await vi.advanceTimersByTimeAsync(50)
    finishA()
    // No time passes: b's early tick went by while a held the only slot.
    await vi.advanceTimersByTimeAsync(0)
    expect(started).toEqual(['a', 'b'])
    expect((await a).slotMs).toBe(50)
    expect((await b).slotMs).toBe(0)
  })

  it('a timer that is not early takes a slot at once', async () => {
    const slots = new Lane(1)
    const { result } = await afterEarlyTick(slots, 0, async () => 'admitted')
    expect(result).toBe('admitted')
  })
})
