// A function process started while NATS is down (a restart, a node drain, the chaos harness's NATS outage) waits for
// it and connects once it is back, instead of exiting — which, deployed, means a crash-loop back-off on top of the
// outage, and cancels waiting for it. A refused credential still fails at once: waiting cannot fix it.
import { type AddressInfo, createServer } from 'node:net'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { type OwnNats, startOwnNats } from './own-nats.js'

const env = useTestEnv()
let nats: OwnNats

beforeAll(async () => {
  nats = await startOwnNats(env.binaries.natsServer as string)
})
afterAll(async () => {
  await nats?.destroy()
})

it('connects once NATS is back when started during an outage', { timeout: 60_000 }, async () => {
  await nats.stop()
  let settled: 'connected' | Error | undefined
  // The connection's own account of its attempts (pkg/jetstream/connect.ts logs the first refused one, and every
  // 20th after): the event "refused, and waiting rather than failing" is what the check below is about.
  const lines: string[] = []
  const log = createLogger('start-during-outage', { write: (line: string) => lines.push(line) })
  const connecting = Bus.connect(nats.url, 'start-during-outage', { waitMs: 30_000, log }).then(
    (bus) => {
      settled = 'connected'
      return bus
    },
    (err: Error) => {
      settled = err
      throw err
    },
  )
  connecting.catch(() => {})
  await waitFor('the first attempt refused and waited out', () =>
    lines.some((l) => l.includes('NATS not reachable yet; waiting for it')),
  )
  // Still waiting, not failed: past the refusal, within the retry the log line announces.
  expect(settled).toBeUndefined()
  await nats.start()
  const bus = await connecting
  expect(settled).toBe('connected')
  // Usable: the topology was provisioned after the connection came.
  expect((await bus.jsm.streams.list().next()).length).toBeGreaterThan(0)
  await bus.close()
})

it('gives up with a specific error when NATS does not come back in time', { timeout: 30_000 }, async () => {
  await nats.stop()
  await expect(Bus.connect(nats.url, 'start-during-outage', { waitMs: 2_000 })).rejects.toThrow(
    /NATS at nats:\/\/127\.0\.0\.1:\d+ not reachable within 2 s: ConnectionError/,
  )
  await nats.start()
})

it('a connection reset while NATS comes up is waited out like a refusal', { timeout: 30_000 }, async () => {
  // A nats-server starting (or a proxy in front of it with no backend yet) can accept a connection and reset it. A
  // process started then exited with "read ECONNRESET" instead of waiting (seen in CI: a cancel process started
  // during an outage). Failed without the fix: rejected at once with that error.
  const resets = createServer((socket) => socket.resetAndDestroy())
  await new Promise<void>((resolve) => resets.listen(0, '127.0.0.1', resolve))
  const { port } = resets.address() as AddressInfo
  try {
    const started = Date.now()
    await expect(Bus.connect(`nats://127.0.0.1:${port}`, 'start-during-reset', { waitMs: 2_000 })).rejects.toThrow(
      /not reachable within 2 s: .*ECONNRESET/,
    )
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000) // it kept trying
  } finally {
    resets.close()
  }
})
