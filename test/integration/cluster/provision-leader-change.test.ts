// Provision runs as a Job while a cluster may be moving a stream's leader (it has just scaled it, or a server is
// rolling). Between the old leader stepping down and the new one subscribing, nothing answers a publish to the
// stream: nats.js reports "no responders". Provision's one publish (the resync schedule) must wait that out within a
// deadline, not fail the install.
import { jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { RESYNC_SCHEDULE_SUBJECT, STREAM_TIMERS } from '../../../events/catalog.js'
import { Bus, lastBySubject } from '../../../jetstream/bus.js'
import { type NatsOnly, startNats } from '../../env/nats.js'

let nats: NatsOnly
let nc: NatsConnection

beforeAll(async () => {
  nats = await startNats({ cluster: true })
  nc = await connect({ servers: nats.natsUrl.split(',') })
}, 120_000)

afterAll(async () => {
  await nc?.close()
  await nats?.stop()
})

it('arms the resync schedule across a leader change of the timers stream', async () => {
  const bus = await Bus.open(nc, { replicas: 3 })
  const jsm = await jetstreamManager(nc)
  for (let round = 0; round < 5; round++) {
    // The JetStream API's leader stepdown for one stream; the election that follows takes a few hundred ms.
    const reply = await nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${STREAM_TIMERS}`, undefined, { timeout: 5_000 })
    expect(JSON.parse(new TextDecoder().decode(reply.data)).success, 'stepdown').toBe(true)
    expect(await bus.armResync(60_000 + round * 1_000)).toBe(true)
  }
  const stored = await lastBySubject(jsm, STREAM_TIMERS, RESYNC_SCHEDULE_SUBJECT)
  expect(stored?.header.get('Nats-Schedule')).toBe('@every 64000ms')
}, 180_000)
