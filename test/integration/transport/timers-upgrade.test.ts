// Upgrade of the timers stream on a nats-server of the test's own: a FLEXINFER_TIMERS made by the previous release
// (no per-message TTL, timers disarmed by a purge) holding an armed schedule. The provision step turns on
// allow_msg_ttl in place, the armed schedule survives the update, and disarming it (a roll-up tombstone with a
// Nats-TTL, refused by a stream without allow_msg_ttl) then works.
import { jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { provision } from '../../../cmd/manager/provision.js'
import { STREAM_TIMERS } from '../../../events/catalog.js'
import { ensureBuckets } from '../../../pkg/jetstream/buckets.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { streamConfigs } from '../../../pkg/jetstream/streams.js'
import { useTestEnv } from '../../env/fixture.js'
import { type OwnNats, startOwnNats } from './own-nats.js'

const env = useTestEnv()
let nats: OwnNats
let nc: NatsConnection

beforeAll(async () => {
  nats = await startOwnNats(env.binaries.natsServer as string)
  nc = await connect({ servers: nats.url, name: 'timers-upgrade' })
})

afterAll(async () => {
  await nc?.close().catch(() => {})
  await nats?.destroy()
})

it('provision turns on per-message TTL on an existing timers stream; its armed schedule survives; disarm works', async () => {
  const jsm = await jetstreamManager(nc)
  // The previous release's topology: the same streams and buckets, the timers stream without per-message TTL.
  for (const config of streamConfigs) {
    const { allow_msg_ttl: _, ...previous } = config
    await jsm.streams.add(config.name === STREAM_TIMERS ? previous : config)
  }
  await ensureBuckets(nc, jsm)
  expect((await jsm.streams.info(STREAM_TIMERS)).config.allow_msg_ttl ?? false).toBe(false)
  const bus = await Bus.open(nc, { provision: false, waitMs: 5_000 })
  // Armed before the upgrade, an hour out (it cannot fire during the test).
  await bus.armTimer('upgrade', 'old', new Date(Date.now() + 3_600_000).toISOString())
  // Without the stream setting, the tombstone is refused: this is what provision must fix.
  await expect(bus.cancelTimer('upgrade', 'other')).rejects.toThrow(/ttl/i)

  await provision({ natsUrl: nats.url, consumers: [] })
  expect((await jsm.streams.info(STREAM_TIMERS)).config.allow_msg_ttl).toBe(true)
  expect(await bus.timerArmed('upgrade', 'old')).toBe(true)
  await bus.cancelTimer('upgrade', 'old')
  expect(await bus.timerArmed('upgrade', 'old')).toBe(false)
}, 60_000)
