// Admission does not trust demand's progress (pkg/admission/fence.ts): no Job while demand or cancel is not running,
// and none inside the idle window of a request demand has not processed yet — whatever the deployment does to
// demand (scaled to zero, crashed, backlogged). Each scenario stops the function's consumer loop in a running
// system, as a scale-to-zero or a crash leaves it: the durable consumer stays and requests queue on it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { catalog } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { cancelFunction } from '../../../functions/cancel/index.js'
import { demandFunction } from '../../../functions/demand/index.js'
import { SCHEDULER_TICK_MS } from '../../../pkg/core/timer-tick.js'
import { scoped } from '../../../pkg/transport/deps.js'
import type { EventFunction } from '../../../pkg/transport/function.js'
import { type RunningFunction, runOnJetStream } from '../../../pkg/transport/jetstream-adapter.js'
import { sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, handledAll, ms, waitUntil } from '../support/backfill-world.js'
import { startTestRunner, testInstance } from '../support/runner.js'

const env = useTestEnv()
const instance = testInstance()
let runner: Runner
let world: BackfillWorld
const restarted: RunningFunction[] = []

beforeAll(async () => {
  runner = await startTestRunner(env, { instance })
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  for (const f of restarted) await f.stop()
  await runner?.stop()
})

/** Stops one function of the running system (its durable consumer stays, as when it is scaled to zero). */
async function stopFunction(name: string) {
  const index = runner.functions.findIndex((f) => f.name === `${name}-${instance}`)
  const [fn] = runner.functions.splice(index, 1)
  await fn?.stop()
}

/** Starts it again on the same durable consumer: it works through what queued meanwhile. */
async function startFunction(fn: EventFunction) {
  const running = await runOnJetStream(runner.deps, scoped(fn, [env.namespace], instance))
  restarted.push(running)
  runner.functions.push(running)
}

/** The lagging-clock case's idleFor. */
const IDLE_FOR_MS = 4_000

describe('the admission fence', () => {
  it('demand down: a request on the foreground subject inside the window is never admitted over', async () => {
    const { backfill, model, template, node } = world.names('nodemand')
    await world.model(model, { node })
    await world.template(template)
    await stopFunction('demand')
    await world.backfill(backfill, { modelRef: model, templateRef: template, idleFor: '4s' })
    await world.waitFor(backfill, 'WaitingForIdle', 'IdleWindow')
    // Time is the subject: the request must land well inside the declaration's window, so that the window it opens
    // ends measurably later than the declaration's own.
    await sleep(2500)
    const requestAt = await world.foregroundOnDocumentedSubject(model)
    // The declaration's first window ended and admit handled its timer: without the fence admit saw no request
    // (demand never wrote one) and would have admitted; the fence's refusal is in the status.
    await world.waitForStatus(backfill, 'not admitting: no demand', (s) => /no demand instance/.test(s.message ?? ''))
    expect(await world.jobsOf(backfill)).toEqual([])

    await startFunction(demandFunction())
    await world.waitFor(backfill, 'Running', undefined, 20_000)
    const [job] = await world.jobsOf(backfill)
    // creationTimestamp has whole seconds: the Job was created no earlier than the request's window end.
    expect(ms(job?.metadata?.creationTimestamp as unknown as string) + 1000).toBeGreaterThanOrEqual(requestAt + 4000)
    expect((await world.state(backfill))?.idleSince).toBe(new Date(requestAt).toISOString())
  })

  it('cancel down: no Job until something can cancel it', async () => {
    const { backfill, model, template, node } = world.names('nocancel')
    await world.model(model, { node })
    await world.template(template)
    await stopFunction('cancel')
    await world.backfill(backfill, { modelRef: model, templateRef: template, idleFor: '2s' })
    // The window ended and admit handled its timer: the fence's refusal is in the status, and no Job was created.
    await world.waitForStatus(backfill, 'not admitting: no cancel', (s) => /no cancel instance/.test(s.message ?? ''))
    expect(await world.jobsOf(backfill)).toEqual([])
    await startFunction(cancelFunction())
    await world.waitFor(backfill, 'Running', undefined, 20_000)
    // And it is cancelled by the next request, through the restarted cancel.
    await world.foreground(model)
    await waitUntil('the Job deleted', async () => ((await world.jobsOf(backfill)).length === 0 ? true : undefined))
  })

  it("a gateway clock that lags does not shorten the window: it is measured from NATS's store time", async () => {
    const { backfill, model, template, node } = world.names('lagging')
    await world.model(model, { node })
    await world.template(template)
    await world.backfill(backfill, { modelRef: model, templateRef: template, idleFor: `${IDLE_FOR_MS / 1_000}s` })
    const waiting = await world.waitFor(backfill, 'WaitingForIdle', 'IdleWindow')
    // Time is the subject: the request must land well inside the declaration's window, so that the window it opens
    // ends measurably (creationTimestamp has whole seconds) later than the declaration's own.
    await sleep(2000)
    // The gateway's clock is an hour behind: its `time` says the request is old news.
    const lagging = new Date(Date.now() - 3_600_000).toISOString()
    // On the foreground subject: only demand sees it, and demand must not take the gateway's word for the time.
    const ack = await runner.deps.bus.js.publish(
      catalog['ai.flexinfer.foreground.request'].subject,
      encode('ai.flexinfer.foreground.request', { namespace: env.namespace, model }, { time: lagging }),
    )
    const stored = await runner.deps.bus.jsm.streams.getMessage(ack.stream, { seq: ack.seq })
    const storedAt = stored?.time.getTime() ?? 0
    // Past the declaration's own first window (its timer fires at idleSince + idleFor, a scheduler tick early at
    // most), and admit has handled that timer (handledAll, the positive signal): no Job for a window the request
    // re-opened. A negative, so bounded by the timer's own due time, not a fixed wait.
    await sleep(ms(waiting.status?.idleSince) + IDLE_FOR_MS + SCHEDULER_TICK_MS - Date.now())
    await handledAll(runner, ['admit'])
    expect(await world.jobsOf(backfill)).toEqual([])
    await world.waitFor(backfill, 'Running', undefined, 20_000)
    const [job] = await world.jobsOf(backfill)
    expect(ms(job?.metadata?.creationTimestamp as unknown as string) + 1000).toBeGreaterThanOrEqual(
      storedAt + IDLE_FOR_MS,
    )
  })
})
