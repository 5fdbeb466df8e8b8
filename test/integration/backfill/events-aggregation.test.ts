// Kubernetes Events on the real apiserver: identical Events (same object, type, reason, message) are aggregated into
// one Event whose count and lastTimestamp move — from one instance, from a second instance with nothing cached (a
// replica, a restart), and after the Event expired — while a different message is an Event of its own.
import { afterAll, beforeAll, describe, it } from 'vitest'
import type { ModelBackfill } from '../../../pkg/core/api.js'
import { Kube } from '../../../pkg/kube/client.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld } from '../support/backfill-world.js'

const env = useTestEnv()
let world: BackfillWorld
let one: Kube
let two: Kube

beforeAll(async () => {
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  one = new Kube(env.kc)
  two = new Kube(env.kc)
})
afterAll(() => {
  world?.close()
  one?.close()
  two?.close()
})

async function eventsOf(name: string) {
  const list = await world.core.listNamespacedEvent({
    namespace: env.namespace,
    fieldSelector: `involvedObject.kind=ModelBackfill,involvedObject.name=${name}`,
  })
  return list.items.map((e) => ({
    name: e.metadata?.name,
    reason: e.reason,
    message: e.message,
    count: e.count,
    first: new Date(e.firstTimestamp as Date).getTime(),
    last: new Date(e.lastTimestamp as Date).getTime(),
  }))
}

describe('aggregated Events', () => {
  it('a repeated Event updates count and lastTimestamp on one Event; another message is its own', async ({
    expect,
  }) => {
    const n = world.names('events')
    const b = (await world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template })) as ModelBackfill
    for (let i = 0; i < 3; i++) await one.recordEvent(b, 'Warning', 'Blocked', 'TemplateNotFound: no CronJob')
    let events = await eventsOf(n.backfill)
    expect(events).toHaveLength(1)
    expect(events[0]).toMatchObject({ reason: 'Blocked', count: 3 })

    // Another instance (nothing cached) counts on from what is stored.
    await new Promise((r) => setTimeout(r, 1100)) // Event times have second precision
    await two.recordEvent(b, 'Warning', 'Blocked', 'TemplateNotFound: no CronJob')
    await two.recordEvent(b, 'Warning', 'Blocked', 'GPURequestForbidden: nvidia.com/gpu')
    events = await eventsOf(n.backfill)
    expect(events).toHaveLength(2)
    const same = events.find((e) => e.message?.startsWith('TemplateNotFound'))
    expect(same?.count).toBe(4)
    expect(same?.last).toBeGreaterThan(same?.first ?? Number.POSITIVE_INFINITY)
    expect(events.find((e) => e.message?.startsWith('GPURequestForbidden'))?.count).toBe(1)

    // Expired (the apiserver's event TTL, or deleted): the next repeat creates it again, count from 1.
    await world.core.deleteNamespacedEvent({ namespace: env.namespace, name: same?.name as string })
    await one.recordEvent(b, 'Warning', 'Blocked', 'TemplateNotFound: no CronJob')
    events = await eventsOf(n.backfill)
    expect(events.find((e) => e.message?.startsWith('TemplateNotFound'))?.count).toBe(1)
  })
})
