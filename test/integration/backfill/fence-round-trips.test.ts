// The fence's and the foreground-subject read's round trips on the real server, counted at the JetStream manager:
// when demand is caught up, a fence is one consumer info (demand's foreground-subject consumer), the liveness of
// demand's per-model consumer and of cancel's is read once per LIVENESS_MS for all admissions, and a read of the
// foreground subject with nothing past its cursor is one leader read (no stream info).
import type { JetStreamManager } from '@nats-io/jetstream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { STREAM_FOREGROUND } from '../../../events/catalog.js'
import { checkFence, LIVENESS_MS } from '../../../pkg/admission/fence.js'
import { foregroundSince } from '../../../pkg/admission/nats-ports.js'
import { useTestEnv } from '../../env/fixture.js'
import { fakeDeps } from '../../unit/support/deps.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner, testInstance } from '../support/runner.js'

const env = useTestEnv()
const instance = testInstance()
let runner: Runner
let world: BackfillWorld

beforeAll(async () => {
  runner = await startTestRunner(env, { instance })
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  await runner?.stop()
})

/** The real JetStream manager, with every call of its stream and consumer APIs recorded. */
function counted(jsm: JetStreamManager) {
  const calls: string[] = []
  const record = <T extends object>(api: T, name: string) =>
    new Proxy(api, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver)
        if (typeof v !== 'function') return v
        return (...args: unknown[]) => {
          calls.push(`${name}.${String(prop)}`)
          return v.apply(target, args)
        }
      },
    })
  const wrapped = Object.create(jsm) as JetStreamManager
  Object.defineProperty(wrapped, 'streams', { value: record(jsm.streams, 'streams') })
  Object.defineProperty(wrapped, 'consumers', { value: record(jsm.consumers, 'consumers') })
  const count = (call: string) => calls.filter((c) => c === call).length
  return { jsm: wrapped, calls, count }
}

describe('the fence in round trips', () => {
  it('demand caught up: one consumer info per fence, the other consumers once per interval, no stream info', async () => {
    const c = counted(runner.deps.bus.jsm)
    const deps = fakeDeps({ ...runner.deps, instance, bus: { jsm: c.jsm } })
    // Every function of this system pulling (the runner has just started them).
    await waitUntil('demand and cancel pulling', async () => ((await checkFence(deps)).ready ? true : undefined))
    await new Promise((r) => setTimeout(r, LIVENESS_MS + 50))
    c.calls.length = 0
    const fences = await Promise.all(Array.from({ length: 8 }, () => checkFence(deps)))
    expect(fences.map((f) => f.ready)).toEqual(Array(8).fill(true))
    // Eight of demand's foreground-subject consumer, one each of demand's per-model and cancel's consumer.
    expect(c.count('consumers.info')).toBe(10)
    expect(c.count('streams.info')).toBe(0)
    // Past the interval: read again.
    await new Promise((r) => setTimeout(r, LIVENESS_MS + 50))
    c.calls.length = 0
    await checkFence(deps)
    expect(c.count('consumers.info')).toBe(3)
  })

  it('nothing past the cursor is one leader read; a request past it is found', async () => {
    const c = counted(runner.deps.bus.jsm)
    const { model } = world.names('fence-rt')
    const end = (await runner.deps.bus.jsm.streams.info(STREAM_FOREGROUND)).state.last_seq
    c.calls.length = 0
    const nothing = await foregroundSince(c.jsm, env.namespace, model, end, Date.now)
    expect(nothing).toEqual({ at: null, cursor: end })
    expect(c.calls).toEqual(['streams.getMessage'])
    const storedAt = await world.foregroundOnDocumentedSubject(model)
    const found = await foregroundSince(c.jsm, env.namespace, model, end, Date.now)
    expect(found.at).toBe(new Date(storedAt).toISOString())
    expect(found.cursor).toBeGreaterThan(end)
  })
})
