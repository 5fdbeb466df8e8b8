// admit's bookkeeping lane (functions/admit/bookkeeping.ts): an admission hands over what follows its Job and goes
// on at once; at most `width` tasks run, at most `bound` are pending (past it the admission waits for a place), a
// task that fails or overruns its deadline is logged with its backfill and frees its place, and a stop drains for
// a bounded time only.
import { describe, expect, it } from 'vitest'
import { BookkeepingLane } from '../../functions/admit/bookkeeping.js'
import type { Logger } from '../../pkg/observability/log.js'

const tick = () => new Promise((r) => setTimeout(r, 0))
const where = (i: number) => ({ namespace: 'ns', backfill: `b${i}`, job: `b${i}-1` })

function logger() {
  const errors: { fields: Record<string, unknown>; msg: string }[] = []
  const log = { error: (fields: Record<string, unknown>, msg: string) => errors.push({ fields, msg }) }
  return { log: log as unknown as Logger, errors }
}

/** A task that runs until released (released before it starts: it ends at once). */
function gate() {
  let released = false
  let release = () => {
    released = true
  }
  const started = { value: false }
  const task = () => {
    started.value = true
    return released ? Promise.resolve() : new Promise<void>((r) => (release = r))
  }
  return { task, started, release: () => release() }
}

describe('BookkeepingLane', () => {
  it('queues at once up to its bound, runs at most width, and makes the next admission wait past the bound', async () => {
    const { log } = logger()
    const lane = new BookkeepingLane(2, 3, 60_000)
    const gates = [0, 1, 2, 3].map(() => gate())
    const queued = await Promise.all(gates.slice(0, 3).map((g, i) => lane.submit(g.task, where(i), log)))
    await tick()
    expect(gates.map((g) => g.started.value)).toEqual([true, true, false, false])
    expect(lane.size).toBe(3)
    // The fourth finds no place: its admission waits (bounded queue), until one task ends.
    let placed = false
    const fourth = lane.submit(gates[3]?.task ?? gate().task, where(3), log).then((q) => {
      placed = true
      return q
    })
    await tick()
    expect(placed).toBe(false)
    gates[0]?.release()
    await queued[0]?.done
    await tick()
    expect(placed).toBe(true)
    expect(gates[2]?.started.value).toBe(true) // took the freed place, in arrival order
    for (const g of gates.slice(1)) g.release()
    await (await fourth).done
    await Promise.all(queued.map((q) => q.done))
    expect(lane.size).toBe(0)
  })

  it('logs a failure with the backfill and frees its place; done never rejects', async () => {
    const { log, errors } = logger()
    const lane = new BookkeepingLane(1, 4, 60_000)
    const failed = await lane.submit(() => Promise.reject(new Error('apiserver said no')), where(1), log)
    await failed.done
    expect(errors).toHaveLength(1)
    expect(errors[0]?.fields).toMatchObject({ namespace: 'ns', backfill: 'b1', job: 'b1-1' })
    expect(String(errors[0]?.fields.error)).toContain('apiserver said no')
    let ran = false
    await (
      await lane.submit(
        async () => {
          ran = true
        },
        where(2),
        log,
      )
    ).done
    expect(ran).toBe(true)
  })

  it('a task past its deadline frees its place and is logged', async () => {
    const { log, errors } = logger()
    const lane = new BookkeepingLane(1, 4, 30)
    const hung = await lane.submit(() => new Promise<void>(() => {}), where(1), log)
    await hung.done
    expect(String(errors[0]?.fields.error)).toContain('deadline')
    expect(lane.size).toBe(0)
  })

  it('drain waits for pending tasks, for at most maxMs', async () => {
    const { log } = logger()
    const lane = new BookkeepingLane(1, 4, 60_000)
    const g = gate()
    await lane.submit(g.task, where(1), log)
    const t0 = Date.now()
    expect(await lane.drain(50)).toBe(1)
    expect(Date.now() - t0).toBeGreaterThanOrEqual(40)
    g.release()
    expect(await lane.drain(60_000)).toBe(0)
  })
})
