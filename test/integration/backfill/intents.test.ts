// What else may hold a model's node, end to end: gaming sessions (also one being torn down), GPU leases, and
// another declaration's active backfill Job. They block admission once the idle window is complete and lift when
// they go; expired ones, and sessions in another mode, never count. Cancelling a running attempt for them is in
// cancellation.test.ts. Tests run concurrently, each on its own node.
import { describe, it } from 'vitest'
import { jobName } from '../../../pkg/core/names.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { handledAll, ms } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env)

const inAnHour = () => new Date(Date.now() + 3_600_000).toISOString()
const aMinuteAgo = () => new Date(Date.now() - 60_000).toISOString()

describe.concurrent('gaming sessions', () => {
  it('a session on the model node blocks (Blocked/GamingIntent) after the idle window; admitted once it ends', async ({
    expect,
  }) => {
    const n = sys.world.names('gaming-blocks')
    const session = `${n.backfill}-session`
    await sys.world.gamingSession(session, n.node, { expiresAt: inAnHour() })
    const history = await sys.world.history(n.backfill)
    await sys.world.declare(n.backfill)
    const blocked = await sys.world.waitFor(n.backfill, 'Blocked', 'GamingIntent')
    const message = `GamingSession ${session} targets node ${n.node}`
    expect(blocked.status?.message).toBe(message)
    // The gates run in the contract's order: the idle window completes first, then the session blocks.
    expect(await history.first(2)).toEqual(['WaitingForIdle/IdleWindow', 'Blocked/GamingIntent'])
    expect(ms(blocked.status?.idleSince) + 2000).toBeLessThanOrEqual(Date.now())
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])
    expect(await sys.world.events(n.backfill)).toContainEqual({
      type: 'Warning',
      reason: 'Blocked',
      message: `GamingIntent: ${message}`,
    })

    await sys.world.deleteObject('gamingsessions', session)
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    history.stop()
    expect(running.status?.attempts).toBe(1)
    expect((await sys.world.state(n.backfill))?.counters.preemptions).toEqual({})
  })

  it('a session being deleted (deletionTimestamp set, held by a finalizer) still blocks; gone, it does not', async ({
    expect,
  }) => {
    const n = sys.world.names('gaming-deleting')
    const session = `${n.backfill}-session`
    await sys.world.gamingSession(session, n.node, { finalizers: ['test.flexinfer.ai/linger'] })
    await sys.world.deleteObject('gamingsessions', session)
    expect((await sys.world.getObject('gamingsessions', session))?.metadata?.deletionTimestamp).toBeTruthy()

    await sys.world.declare(n.backfill)
    const blocked = await sys.world.waitFor(n.backfill, 'Blocked', 'GamingIntent')
    expect(blocked.status?.message).toBe(`GamingSession ${session} targets node ${n.node}`)
    // The admission that found the session is over (admit has handled all it was sent): no Job from it.
    await handledAll(sys.runner, ['admit'])
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])

    await sys.world.clearFinalizers('gamingsessions', session)
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(running.status?.attempts).toBe(1)
  })

  it('an expired session, a session in another mode and one on another node do not block', async ({ expect }) => {
    const n = sys.world.names('gaming-ignored')
    await sys.world.gamingSession(`${n.backfill}-expired`, n.node, { expiresAt: aMinuteAgo() })
    await sys.world.gamingSession(`${n.backfill}-streaming`, n.node, { mode: 'streaming' })
    await sys.world.gamingSession(`${n.backfill}-elsewhere`, `${n.node}-other`)
    const history = await sys.world.history(n.backfill)
    await sys.world.declare(n.backfill)
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(running.status?.attempts).toBe(1)
    // Never blocked on the way. Not every phase between is asserted: the status is the state's projection, and a
    // Starting written while lifecycle already saw the Job run may be replaced before a watch sees it (a CI run saw
    // WaitingForIdle then Running).
    expect(history.phases()[0]).toBe('WaitingForIdle/IdleWindow')
    expect(history.phases().filter((p) => p.startsWith('Blocked'))).toEqual([])
    history.stop()
  })
})

describe.concurrent('GPU leases', () => {
  it('a lease on the model node blocks (Blocked/GPULeaseActive); admitted once it is deleted', async ({ expect }) => {
    const n = sys.world.names('lease-blocks')
    const lease = `${n.backfill}-lease`
    await sys.world.gpuLease(lease, { node: n.node, expiresAt: inAnHour() })
    await sys.world.declare(n.backfill)
    const blocked = await sys.world.waitFor(n.backfill, 'Blocked', 'GPULeaseActive')
    const message = `GPULease ${env.namespace}/${lease} holds the model's GPU`
    expect(blocked.status?.message).toBe(message)
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])
    expect(await sys.world.events(n.backfill)).toContainEqual({
      type: 'Warning',
      reason: 'Blocked',
      message: `GPULeaseActive: ${message}`,
    })

    await sys.world.deleteObject('gpuleases', lease)
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(running.status?.attempts).toBe(1)
  })

  it('a lease on the GPU group blocks too; expired leases and leases elsewhere do not', async ({ expect }) => {
    const n = sys.world.names('lease-group')
    const group = `grp-${n.node}`
    await sys.world.gpuLease(`${n.backfill}-expired`, { node: n.node, group, expiresAt: aMinuteAgo() })
    await sys.world.gpuLease(`${n.backfill}-elsewhere`, { node: `${n.node}-other`, group: `${group}-other` })
    // The longer 3s window, so the group lease below lands inside it: admission finds it, not a running attempt.
    await sys.world.declare(n.backfill, { idleFor: '3s' }, { group })
    await sys.world.waitFor(n.backfill, 'WaitingForIdle', 'IdleWindow')
    await sys.world.gpuLease(`${n.backfill}-group`, { group, node: `${n.node}-other` })
    const blocked = await sys.world.waitFor(n.backfill, 'Blocked', 'GPULeaseActive')
    expect(blocked.status?.message).toBe(`GPULease ${env.namespace}/${n.backfill}-group holds the model's GPU`)

    await sys.world.deleteObject('gpuleases', `${n.backfill}-group`)
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(running.status?.attempts).toBe(1)
  })
})

describe.concurrent('contenders', () => {
  it("another declaration's active backfill Job on the node blocks ConcurrentBackfill until it finishes", async ({
    expect,
  }) => {
    const n = sys.world.names('contended')
    const foreign = `${n.backfill}-foreign`
    // Another model on the same node, its backfill Job active (Pending, never finished).
    await sys.world.foreignJob(foreign, { node: n.node, model: `${n.model}-other` })
    await sys.world.declare(n.backfill)
    const blocked = await sys.world.waitFor(n.backfill, 'Blocked', 'ConcurrentBackfill')
    const message = `backfill ${env.namespace} (Job ${foreign}) is active on the same node`
    expect(blocked.status?.message).toBe(message)
    expect(blocked.status?.attempts).toBe(0)
    expect(await sys.world.jobsOf(n.backfill)).toEqual([])
    expect(await sys.world.events(n.backfill)).toContainEqual({
      type: 'Warning',
      reason: 'Blocked',
      message: `ConcurrentBackfill: ${message}`,
    })

    // Nothing tells this declaration that a foreign Job finished: its re-check timer (15s) finds the node free.
    await sys.world.finishJob(foreign, 'Succeeded')
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning', 30_000)
    expect(running.status?.attempts).toBe(1)
    expect(running.status?.jobName).toBe(jobName(n.backfill, 1))
  })

  it('a foreign Job that has finished, or is on another node, is no contender', async ({ expect }) => {
    const n = sys.world.names('uncontended')
    await sys.world.foreignJob(`${n.backfill}-done`, { node: n.node, model: `${n.model}-other` })
    await sys.world.finishJob(`${n.backfill}-done`, 'Failed')
    await sys.world.foreignJob(`${n.backfill}-far`, { node: `${n.node}-other`, model: `${n.model}-other` })
    await sys.world.waitForJobCondition(`${n.backfill}-done`, 'Failed')
    await sys.world.declare(n.backfill)
    const running = await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    expect(running.status?.attempts).toBe(1)
  })
})
