// Crash-safety and concurrency: racing admit replicas, duplicated and reordered events, two declarations on
// one model, and malformed input going to the dead-letter stream while the functions keep serving.
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { STREAM_DEAD_LETTER } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { jobName } from '../../../pkg/core/names.js'
import { SCHEDULER_TICK_MS } from '../../../pkg/core/timer-tick.js'
import { DEAD_LETTER_REASON } from '../../../pkg/jetstream/dead-letter-headers.js'
import { reconcile } from '../../../pkg/reconcile/reconcile.js'
import { sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, handledAll, ms, waitUntil } from '../support/backfill-world.js'
import { startTestRunner, testInstance } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let secondAdmit: Runner
let world: BackfillWorld

beforeAll(async () => {
  const instance = testInstance()
  runner = await startTestRunner(env, { instance })
  // A second replica of the admit function: same durable consumer, its own connections and caches.
  secondAdmit = await startTestRunner(env, { instance, functions: ['admit'], watch: false })
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  await secondAdmit?.stop()
  await runner?.stop()
})

const ownJobs = async (backfill: string) =>
  (await world.jobs()).filter((j) => j.metadata?.ownerReferences?.some((r) => r.name === backfill))

describe('racing admit replicas', () => {
  it('create exactly one Job for one attempt', async () => {
    await world.model('m-race', { node: 'node-race' })
    await world.template('tpl-race')
    await world.backfill('race', { modelRef: 'm-race', templateRef: 'tpl-race', idleFor: '2s' })
    const waiting = await world.waitFor('race', 'WaitingForIdle', 'IdleWindow')
    // Time is the subject: the window must be complete for the racers to admit (100 ms past its end).
    await sleep(ms(waiting.status?.idleSince) + 2100 - Date.now())
    // Both replicas (and direct reconciles on two independent connections) race for the same admission.
    const bus = runner.deps.bus
    await Promise.all([
      ...Array.from({ length: 10 }, () =>
        bus.publish('ai.flexinfer.backfill.admit', { namespace: env.namespace, backfill: 'race' }),
      ),
      reconcile(runner.deps, 'admit', env.namespace, 'race', { type: 'admit' }),
      reconcile(secondAdmit.deps, 'admit', env.namespace, 'race', { type: 'admit' }),
      reconcile(secondAdmit.deps, 'admit', env.namespace, 'race', { type: 'admit' }),
    ])
    await world.waitFor('race', 'Running')
    // Every racer done: the direct reconciles returned above, and both replicas (one durable consumer) and the
    // rest of the system have handled all they were sent.
    await handledAll(runner)
    const jobs = await ownJobs('race')
    expect(jobs.map((j) => j.metadata?.name)).toEqual([jobName('race', 1)])
    const state = await world.state('race')
    expect(state?.attempts).toBe(1)
    expect(state?.counters.starts).toBe(1)
  })

  it('two declarations on one model: one runs, the other is Blocked ConcurrentBackfill', async () => {
    await world.model('m-shared', { node: 'node-shared' })
    await world.template('tpl-shared')
    await Promise.all([
      world.backfill('first', { modelRef: 'm-shared', templateRef: 'tpl-shared', idleFor: '2s' }),
      world.backfill('second', { modelRef: 'm-shared', templateRef: 'tpl-shared', idleFor: '2s' }),
    ])
    const running = await waitUntil('one of them running', async () => {
      const [a, b] = await Promise.all([world.getBackfill('first'), world.getBackfill('second')])
      const run = [a, b].filter((x) => x?.status?.phase === 'Running')
      const blocked = [a, b].filter((x) => x?.status?.phase === 'Blocked')
      return run.length === 1 && blocked.length === 1 ? { run: run[0], blocked: blocked[0] } : undefined
    })
    expect(running.blocked?.status?.reason).toBe('ConcurrentBackfill')
    expect(running.blocked?.status?.message).toContain(running.run?.metadata.name)
    const jobs = [...(await ownJobs('first')), ...(await ownJobs('second'))]
    expect(jobs).toHaveLength(1)
  })
})

describe('duplicated and reordered events', () => {
  it('replaying every kind of event in shuffled order changes nothing once Succeeded', async () => {
    await world.model('m-replay', { node: 'node-replay' })
    await world.template('tpl-replay')
    await world.backfill('replay', { modelRef: 'm-replay', templateRef: 'tpl-replay', idleFor: '2s' })
    await world.waitFor('replay', 'Running')
    await world.finishJob(jobName('replay', 1), 'Succeeded')
    await world.waitFor('replay', 'Succeeded', 'JobComplete')
    const before = await world.state('replay')

    const ns = env.namespace
    const bus = runner.deps.bus
    const job = jobName('replay', 1)
    const at = new Date().toISOString()
    const replays = [
      () =>
        bus.publish('ai.flexinfer.backfill.changed', {
          namespace: ns,
          backfill: 'replay',
          generation: 1,
          deleted: false,
        }),
      () => bus.publish('ai.flexinfer.backfill.admit', { namespace: ns, backfill: 'replay' }),
      () => bus.publish('ai.flexinfer.job.completed', { namespace: ns, job, backfill: 'replay', outcome: 'Started' }),
      () => bus.publish('ai.flexinfer.job.completed', { namespace: ns, job, backfill: 'replay', outcome: 'Complete' }),
      () => bus.publish('ai.flexinfer.model.ready', { namespace: ns, model: 'm-replay', ready: true, deleted: false }),
      () => bus.armTimer(ns, 'replay', new Date(Date.now() + 200).toISOString()),
      // A stale foreground request from before the attempt, delivered late.
      () =>
        bus.publish(
          'ai.flexinfer.foreground.request',
          { namespace: ns, model: 'm-replay' },
          { time: new Date(Date.parse(before?.startedAt ?? at) - 60_000).toISOString() },
        ),
    ]
    const shuffled = [...replays, ...replays, ...replays].sort(() => Math.random() - 0.5)
    for (const publish of shuffled) await publish()
    // The replayed timers (due 200 ms after they were armed) have fired: time is the subject, a scheduler tick more;
    // then every function has handled all the replays.
    await sleep(200 + SCHEDULER_TICK_MS)
    await handledAll(runner)

    const after = await world.state('replay')
    expect(after?.phase).toBe('Succeeded')
    expect(after?.attempts).toBe(1)
    expect(after?.counters).toEqual(before?.counters)
    expect((await ownJobs('replay')).map((j) => j.metadata?.name)).toEqual([job])
  })

  it('a foreground request with duplicated cancel requests preempts once', async () => {
    await world.model('m-dup', { node: 'node-dup' })
    await world.template('tpl-dup')
    await world.backfill('dup', { modelRef: 'm-dup', templateRef: 'tpl-dup', idleFor: '2s' })
    await world.waitFor('dup', 'Running')
    const at = new Date().toISOString()
    const cancel = {
      namespace: env.namespace,
      backfill: 'dup',
      jobName: jobName('dup', 1),
      reason: 'ForegroundDemand',
      at,
    }
    // The gateway's request (demand publishes its own cancel) plus the same cancel delivered five more times.
    await Promise.all([
      runner.deps.bus.publish(
        'ai.flexinfer.foreground.request',
        { namespace: env.namespace, model: 'm-dup' },
        { time: at },
      ),
      ...Array.from({ length: 5 }, () => runner.deps.bus.publish('ai.flexinfer.backfill.cancel', cancel)),
    ])
    // The model stays busy until the state is read: its window (2 s) must not end and admit a second attempt while
    // the duplicates are handled on a loaded machine (a fresh-clone CI run read attempts 2 here).
    const busy = setInterval(() => {
      void runner.deps.bus
        .publish('ai.flexinfer.foreground.request', { namespace: env.namespace, model: 'm-dup' })
        .catch(() => {})
    }, 500)
    let state: Awaited<ReturnType<typeof world.state>>
    try {
      await world.waitFor('dup', 'WaitingForIdle')
      // Every duplicate cancel handled (each one's bookkeeping runs before its ack).
      await handledAll(runner)
      state = await world.state('dup')
    } finally {
      clearInterval(busy)
    }
    expect(state?.counters.preemptions).toEqual({ foreground: 1 })
    expect(state?.attempts).toBe(1)
  })
})

describe('a timer recorded in the state but never stored', () => {
  it('is armed again by the next decision, and the backfill is admitted when its window ends', async () => {
    // What a crash, or a failed action (a 409 on the finalizer), between the state's compare-and-set and the
    // timer's publish leaves behind: timerAt in KV, no schedule in FLEXINFER_TIMERS.
    await world.model('m-lost-timer', { node: 'node-lost-timer' })
    await world.template('tpl-lost-timer')
    await world.backfill('lost-timer', { modelRef: 'm-lost-timer', templateRef: 'tpl-lost-timer', idleFor: '4s' })
    await world.waitFor('lost-timer', 'WaitingForIdle', 'IdleWindow')
    const bus = runner.deps.bus
    await waitUntil('the timer stored', async () =>
      (await bus.timerArmed(env.namespace, 'lost-timer')) ? true : undefined,
    )
    const timerAt = (await world.state('lost-timer'))?.timerAt
    expect(Date.parse(timerAt ?? '')).toBeGreaterThan(Date.now())
    await bus.cancelTimer(env.namespace, 'lost-timer')
    expect(await bus.timerArmed(env.namespace, 'lost-timer')).toBe(false)

    // Any later decision about it (here an admit request, before the window ends) stores the schedule again.
    await reconcile(runner.deps, 'admit', env.namespace, 'lost-timer', { type: 'admit' })
    expect(await bus.timerArmed(env.namespace, 'lost-timer')).toBe(true)
    expect((await world.state('lost-timer'))?.attempts).toBe(0)
    const running = await world.waitFor('lost-timer', 'Running', 'JobRunning')
    expect(running.status?.attempts).toBe(1)
  })
})

describe('malformed input', () => {
  it('goes to the dead-letter stream with its reason, and the functions keep serving', async () => {
    const js = jetstream(env.nc)
    const jsm = await jetstreamManager(env.nc)
    const ours = `flexinfer.deadletter.${runner.functions.find((f) => f.name.startsWith('demand'))?.name}`
    const before = (await jsm.streams.info(STREAM_DEAD_LETTER)).state.last_seq
    await js.publish('flexinfer.events.foreground.request', 'this is not an event')
    await js.publish(
      'flexinfer.events.foreground.request',
      encode('ai.flexinfer.foreground.request', { namespace: 'Not Valid', model: 'm' } as never),
    )
    const reasons = await waitUntil('two dead letters', async () => {
      const info = await jsm.streams.info(STREAM_DEAD_LETTER)
      if (info.state.last_seq < before + 2) return undefined
      const found: string[] = []
      for (let seq = before + 1; seq <= info.state.last_seq; seq++) {
        // Every running system's demand consumer dead-letters these too: read only this file's, tolerate gaps.
        const msg = await jsm.streams.getMessage(STREAM_DEAD_LETTER, { seq }).catch(() => null)
        const reason = msg?.subject === ours ? msg.header?.get(DEAD_LETTER_REASON) : ''
        if (reason) found.push(reason)
      }
      return found.some((r) => /not JSON/.test(r)) && found.some((r) => /namespace:/.test(r)) ? found : undefined
    })
    expect(reasons.some((r) => /not JSON/.test(r))).toBe(true)
    expect(reasons.some((r) => /namespace: must be a Kubernetes namespace/.test(r))).toBe(true)

    // Still serving: a new declaration goes all the way to Running.
    await world.model('m-after', { node: 'node-after' })
    await world.template('tpl-after')
    await world.backfill('after', { modelRef: 'm-after', templateRef: 'tpl-after', idleFor: '2s' })
    await world.waitFor('after', 'Running')
  })
})
