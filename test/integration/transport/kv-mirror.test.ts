// A KV mirror follows a bucket without a consumer (the republished subjects, pkg/jetstream/kv-mirror.ts). Core NATS does not
// replay what was published while a subscriber was disconnected: on a nats-server of the test's own, changes made
// while the mirror is reconnecting (a put and a delete it cannot hear) are picked up by the reload after reconnect.
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { KvMirror } from '../../../pkg/jetstream/kv-mirror.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { type OwnNats, startOwnNats } from './own-nats.js'

const env = useTestEnv()
let nats: OwnNats
let follower: NatsConnection | undefined

beforeAll(async () => {
  nats = await startOwnNats(env.binaries.natsServer as string)
})

afterAll(async () => {
  await follower?.close().catch(() => {})
  await nats?.destroy()
})

it('a mirror reloads after a reconnect: changes it could not hear (a put, a delete) are there', async () => {
  const writer = await Bus.connect(nats.url, 'kv-mirror-writer') // provisions: buckets with republish
  await writer.kv.claims.put('model.ns.kept', JSON.stringify({ v: 1 }))
  await writer.kv.claims.put('model.ns.removed', JSON.stringify({ v: 1 }))
  await writer.close()

  // The follower reconnects only after a few seconds: the writer below gets in first.
  follower = await connect({
    servers: nats.url,
    reconnectTimeWait: 4_000,
    reconnectJitter: 0,
    maxReconnectAttempts: -1,
  })
  const bus = await Bus.open(follower, { provision: false, waitMs: 5_000 })
  const mirror = new KvMirror<{ v: number }>()
  await mirror.start(follower, bus.kv.claims, 'model.>')
  expect([...mirror.values.keys()].sort()).toEqual(['model.ns.kept', 'model.ns.removed'])

  await nats.stop()
  await nats.start()
  const late = await Bus.connect(nats.url, 'kv-mirror-late-writer')
  await late.kv.claims.put('model.ns.kept', JSON.stringify({ v: 2 }))
  await late.kv.claims.put('model.ns.added', JSON.stringify({ v: 1 }))
  await late.kv.claims.delete('model.ns.removed')
  await late.close()
  // Not heard: the follower is still disconnected.
  expect(mirror.values.get('model.ns.kept')).toEqual({ v: 1 })

  // The reload after the reconnect is the only way v2 can arrive; it applies every key at once (after its
  // snapshot, with no await in between), so the whole map is checked the moment v2 shows.
  await waitFor('the reload after the reconnect', () => mirror.values.get('model.ns.kept')?.v === 2, {
    timeoutMs: 20_000,
  })
  expect(Object.fromEntries(mirror.values)).toEqual({ 'model.ns.kept': { v: 2 }, 'model.ns.added': { v: 1 } })
  // And it follows live changes again.
  const again = await Bus.connect(nats.url, 'kv-mirror-writer-again')
  await again.kv.claims.put('model.ns.live', JSON.stringify({ v: 3 }))
  await again.close()
  await waitFor('the live change', () => mirror.values.has('model.ns.live'), { timeoutMs: 10_000 })
  expect(mirror.values.get('model.ns.live')).toEqual({ v: 3 })
  await mirror.stop()
}, 90_000)

// A process starting while NATS goes away (the chaos harness's NATS restart): the mirror's start flushes while
// disconnected, and the first failed reconnect rejects that PING as "connection disconnected" — the watcher and admit
// exited with exit code 1 on it in a chaos run. Seen failing without the fix: the start rejected with that error.
it('a mirror started while NATS is away waits for it, then loads', async () => {
  const writer = await Bus.connect(nats.url, 'kv-mirror-writer-2')
  await writer.kv.claims.put('model.ns.waited', JSON.stringify({ v: 7 }))
  await writer.close()
  const nc = await connect({ servers: nats.url, reconnectTimeWait: 250, reconnectJitter: 0, maxReconnectAttempts: -1 })
  try {
    const bus = await Bus.open(nc, { provision: false, waitMs: 5_000 })
    await nats.stop()
    const mirror = new KvMirror<{ v: number }>()
    let settled: 'loaded' | Error | undefined
    const starting = mirror.start(nc, bus.kv.claims, 'model.>', 60_000).then(
      () => {
        settled = 'loaded'
      },
      (err: Error) => {
        settled = err
      },
    )
    // Failed reconnect attempts reject the load's flush (the bug: the first one rejected the start); two survived.
    await waitFor('two failed loads', () => mirror.failedLoads >= 2, { timeoutMs: 20_000 })
    expect(settled).toBeUndefined()
    await nats.start()
    await starting
    expect(settled).toBe('loaded')
    expect(mirror.values.get('model.ns.waited')).toEqual({ v: 7 })
    expect(mirror.failedLoads).toBeGreaterThan(0)
    await mirror.stop()
  } finally {
    await nc.close().catch(() => {})
  }
}, 90_000)
