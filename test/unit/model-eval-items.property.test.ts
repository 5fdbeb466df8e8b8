// model-eval's bookkeeping (cmd/model-eval/items.ts, attempt.ts) under any interleaving of preemptions (a stop
// during or between items), crashes (a store call that dies, before or after its write took effect) and duplicate
// attempts (the same attempt number twice, or two attempts running at once): once an attempt runs undisturbed, the
// run's items are each recorded exactly once, every sink got the artifact written exactly once, and the artifact
// holds every item with the record that won. Run against two models of the stores: one that keeps the records (the
// PostgreSQL items table) and one that drops them once the artifact is written (the ConfigMap of the run).
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type ArtifactSink, type ProgressStore, runAttempt } from '../../cmd/model-eval/attempt.js'
import {
  type AssembledRun,
  addRecord,
  assemble,
  type ItemRecord,
  planItems,
  remaining,
} from '../../cmd/model-eval/items.js'

class Crash extends Error {}

/** The stores' state, shared by every attempt; each attempt reaches it through a view that may crash. */
class World {
  records: ItemRecord[] = []
  attempts: number[] = []
  accepted = new Map<string, number>()
  published = new Map<string, AssembledRun[]>()
  constructor(readonly keepsRecords: boolean) {}
}

function views(world: World, crashAt: number | undefined, crashApplies: boolean) {
  let ops = 0
  /** Runs a store call: at the chosen call the process dies, its write applied first or not. */
  const op = async <T>(apply: () => T): Promise<T> => {
    await new Promise((r) => setImmediate(r))
    const n = ops++
    if (n === crashAt) {
      if (crashApplies) apply()
      throw new Crash(`crash at store call ${n}`)
    }
    return apply()
  }
  const progress: ProgressStore = {
    begin: (_runId, attempt) =>
      op(() => {
        if (!world.attempts.includes(attempt)) world.attempts.push(attempt)
        return {
          records: [...world.records],
          attempts: [...world.attempts].sort((a, b) => a - b),
          published: (world.published.get('primary')?.length ?? 0) > 0,
        }
      }),
    record: (_runId, record) =>
      op(() => {
        const { records, added } = addRecord(world.records, record)
        world.records = records
        if (added) world.accepted.set(record.id, (world.accepted.get(record.id) ?? 0) + 1)
        return added
      }),
    records: () => op(() => ({ records: [...world.records], attempts: [...world.attempts].sort((a, b) => a - b) })),
    finish: () =>
      op(() => {
        if (!world.keepsRecords) world.records = []
      }),
  }
  const sink = (name: string): ArtifactSink => ({
    name,
    publish: (run) =>
      op(() => {
        const list = world.published.get(name) ?? []
        if (list.some((r) => r.runId === run.runId)) return false
        world.published.set(name, [...list, run])
        return true
      }),
  })
  return { progress, sinks: [sink('primary'), sink('latest')] }
}

interface AttemptPlan {
  attempt: number
  /** Stop when this many items have started (during the last one). */
  preemptAt?: number
  crashAt?: number
  crashApplies: boolean
  /** Runs at the same time as the attempt after it. */
  overlapsNext: boolean
}

const attemptArb = fc.record({
  attempt: fc.integer({ min: 1, max: 4 }),
  preemptAt: fc.option(fc.integer({ min: 0, max: 12 }), { nil: undefined }),
  crashAt: fc.option(fc.integer({ min: 0, max: 20 }), { nil: undefined }),
  crashApplies: fc.boolean(),
  overlapsNext: fc.boolean(),
})

async function runScenario(keepsRecords: boolean, items: number, attempts: AttemptPlan[]) {
  const world = new World(keepsRecords)
  const plan = planItems(
    ['m'],
    Array.from({ length: items }, (_, i) => `p${i}`),
    2,
  )
  const executions: string[] = []
  let token = 0
  const one = async (a: AttemptPlan) => {
    const stop = new AbortController()
    const { progress, sinks } = views(world, a.crashAt, a.crashApplies)
    let started = 0
    try {
      await runAttempt({
        runId: 'run-1',
        attempt: a.attempt,
        plan,
        progress,
        sinks,
        signal: stop.signal,
        execute: async (item) => {
          if (a.preemptAt !== undefined && started++ >= a.preemptAt) setImmediate(() => stop.abort())
          await new Promise((r) => setImmediate(r))
          await new Promise((r) => setImmediate(r))
          if (stop.signal.aborted) throw new Error('aborted')
          const value = `${item.id}#${++token}`
          executions.push(value)
          return value
        },
      })
    } catch (err) {
      if (!(err instanceof Crash)) throw err
      stop.abort() // the process is gone: nothing of it runs on
    }
  }
  for (let i = 0; i < attempts.length; ) {
    const group = [attempts[i] as AttemptPlan]
    while ((attempts[i]?.overlapsNext ?? false) && i + 1 < attempts.length) group.push(attempts[++i] as AttemptPlan)
    i++
    await Promise.all(group.map(one))
  }
  // The controller starts attempts until the run succeeds: one undisturbed attempt ends every scenario.
  await one({ attempt: 9, crashApplies: false, overlapsNext: false })
  return { world, plan, executions }
}

describe('model-eval item bookkeeping', () => {
  for (const keepsRecords of [true, false]) {
    it(`records each item once and writes the artifact once (${keepsRecords ? 'records kept' : 'records dropped'})`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 1, max: 5 }),
          fc.array(attemptArb, { maxLength: 6 }),
          async (n, attempts) => {
            const { world, plan, executions } = await runScenario(keepsRecords, n, attempts)
            for (const name of ['primary', 'latest']) expect(world.published.get(name)).toHaveLength(1)
            const [run] = world.published.get('primary') as AssembledRun[]
            expect(run?.items.map((i) => i.id)).toEqual(plan.map((i) => i.id))
            for (const item of plan) expect(world.accepted.get(item.id)).toBe(1)
            // Every recorded result is one a completed execution returned, for that item.
            for (const i of run?.items ?? []) {
              expect(executions).toContain(i.record.result)
              expect(String(i.record.result).startsWith(`${i.id}#`)).toBe(true)
            }
            if (keepsRecords) expect(remaining(plan, world.records)).toEqual([])
          },
        ),
        { numRuns: 300 },
      )
    })
  }

  it('without disturbance, no item runs twice across attempts', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 5 }),
        fc.array(fc.integer({ min: 0, max: 10 }), { maxLength: 4 }),
        async (n, stops) => {
          const attempts = stops.map((preemptAt, i) => ({
            attempt: i + 1,
            preemptAt,
            crashApplies: false,
            overlapsNext: false,
          }))
          const { executions, plan } = await runScenario(true, n, attempts)
          // Sequential attempts preempted anywhere: an item completes once; the one in flight at a stop never completed.
          expect(executions).toHaveLength(plan.length)
        },
      ),
      { numRuns: 200 },
    )
  })

  it('assembles nothing while an item is missing, and the same run from the same records', () => {
    const plan = planItems(['a', 'b'], ['x'], 1)
    const rec = (id: string, attempt: number, t: number): ItemRecord => ({
      id,
      attempt,
      startedAt: new Date(t).toISOString(),
      ms: 10,
      result: id,
    })
    const records = plan.map((p, i) => rec(p.id, (i % 2) + 1, 1000 * i))
    expect(assemble('r', plan, records.slice(1), [1, 2])).toBeUndefined()
    const one = assemble('r', plan, records, [1, 2])
    const two = assemble('r', plan, [...records].reverse(), [2, 1])
    expect(one).toEqual(two)
    expect(one?.itemsByAttempt).toEqual({ 1: 3, 2: 3 })
    expect(addRecord(records, rec(plan[0]?.id as string, 5, 0)).added).toBe(false)
  })
})
