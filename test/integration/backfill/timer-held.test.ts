// A timer that fired and waits for admit is not armed a second time (issue 11, bench runs E: lifecycle logged "timer
// recorded but not stored; arming it" for windows whose timers admit held). On the real servers: one lifecycle
// instance decides a backfill waiting on a 24 h window (its timer stored as a schedule); the schedule is then
// replaced by the fired timer event, as the server does when it fires (here without admit running, so the event
// waits, as it does behind admit's backlog). A reconcile must leave it at that — before the fix it stored a new
// schedule, which fires the same window again for admit. A fired event for another due time does not count: that
// timer is re-armed as before. The sweep, whose listing of stored schedules does not show a held timer, checks each
// such backfill once more and publishes nothing for it (before: a TimerNotStored resync, then the re-arm above).
import { jetstream } from '@nats-io/jetstream'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { STREAM_TIMERS, scheduleSubject, subjectFor } from '../../../events/catalog.js'
import { decode, encode, type InboundEvent } from '../../../events/codec.js'
import { lifecycleFunction } from '../../../functions/lifecycle/index.js'
import { sweep } from '../../../functions/lifecycle/resync.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { openDeps } from '../../../pkg/transport/deps.js'
import type { EventFunction } from '../../../pkg/transport/function.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld } from '../support/backfill-world.js'

const env = useTestEnv()
let world: BackfillWorld
let deps: Awaited<ReturnType<typeof openDeps>>
let fn: EventFunction

const resync = (backfill: string): InboundEvent => {
  const r = decode(encode('ai.flexinfer.backfill.resync', { namespace: env.namespace, backfill, reason: 'NoState' }))
  if (!r.ok) throw new Error(r.reason)
  return r.event
}

/** What the server does when the schedule fires: the schedule goes, the timer event is stored for admit. */
async function fire(backfill: string, due: string) {
  await deps.bus.cancelTimer(env.namespace, backfill)
  const data = { namespace: env.namespace, backfill, due }
  return jetstream(env.nc).publish(
    subjectFor('ai.flexinfer.timer.fired', data),
    encode('ai.flexinfer.timer.fired', data),
  )
}

beforeAll(async () => {
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  await world.template('tpl')
  await world.model('m', { node: `node-${env.namespace}` })
  deps = await openDeps({
    natsUrl: env.natsUrl,
    functions: ['lifecycle'],
    kubeconfig: env.kc,
    namespaces: [env.namespace],
    name: 'timer-held-test',
    logger: createLogger('timer-held-test'),
  })
  fn = lifecycleFunction()
  await fn.start?.(deps)
}, 120_000)

afterAll(async () => {
  await fn?.stop?.()
  await deps?.close()
  world?.close()
  const jsm = await jetstream(env.nc).jetstreamManager()
  for (const filter of [`flexinfer.schedules.${env.namespace}.>`, `flexinfer.events.timer.${env.namespace}.>`])
    await jsm.streams.purge(STREAM_TIMERS, { filter }).catch(() => {})
})

it('a fired timer waiting for admit is not armed again; one that fired for another time is', {
  timeout: 60_000,
}, async () => {
  for (const name of ['held', 'other']) {
    await world.backfill(name, { modelRef: 'm', templateRef: 'tpl', idleFor: '24h' })
    await fn.handle(resync(name), deps)
    expect(await deps.bus.timerArmed(env.namespace, name)).toBe(true)
  }
  const timerAt = async (name: string) => (await world.state(name))?.timerAt as string

  // Fired for the state's timerAt and not handled yet: held.
  const due = await timerAt('held')
  const fired = await fire('held', due)
  expect(await deps.bus.timerArmed(env.namespace, 'held')).toBe(false)
  await fn.handle(resync('held'), deps)
  expect(await timerAt('held')).toBe(due)
  expect(await deps.bus.timerArmed(env.namespace, 'held')).toBe(false)
  const last = await deps.bus.jsm.streams.getMessage(STREAM_TIMERS, {
    last_by_subj: subjectFor('ai.flexinfer.timer.fired', { namespace: env.namespace, backfill: 'held', due }),
  })
  expect(last?.seq).toBe(fired.seq) // no second timer fired for the same window

  // A fired event of an earlier timer (handled long ago): the recorded one is not stored, so it is armed again.
  const otherDue = await timerAt('other')
  await fire('other', new Date(Date.parse(otherDue) - 3_600_000).toISOString())
  await fn.handle(resync('other'), deps)
  expect(await deps.bus.timerArmed(env.namespace, 'other')).toBe(true)
  const schedule = await deps.bus.jsm.streams.getMessage(STREAM_TIMERS, {
    last_by_subj: scheduleSubject(env.namespace, 'other'),
  })
  const r = schedule ? decode(schedule.data) : undefined
  expect(r?.ok && r.event.data).toMatchObject({ due: otherDue })
})

it('the sweep re-checks what its listing calls TimerNotStored: a timer held for admit is not re-published', {
  timeout: 60_000,
}, async () => {
  // 'held' (above): its timer fired and waits for admit. 'other': its schedule disarmed, nothing fired for it.
  await deps.bus.cancelTimer(env.namespace, 'other')
  // The tombstone's TTL (1 s): waited until the stream's listing of stored schedules no longer shows it.
  await waitFor('the tombstone expired', async () => {
    const info = await deps.bus.jsm.streams.info(STREAM_TIMERS, {
      subjects_filter: scheduleSubject(env.namespace, 'other'),
    })
    return Object.keys(info.state.subjects ?? {}).length === 0
  })
  const result = await sweep(deps)
  const picked = Object.fromEntries(result.picked.map((p) => [p.backfill, p.reason]))
  expect(picked).toEqual({ other: 'TimerNotStored' })
  expect(result.timersHeld).toBe(1)
})
