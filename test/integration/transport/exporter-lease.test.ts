// The exporter lease (pkg/observability/exporter-lease.ts) on a real nats-server's KV: one holder at a time, a crashed
// holder (no renewal, no release) taken over only after a whole lease unrenewed, and the new holder exporting only
// after the handover — at no moment do two processes hold it. Short lease and handover so the test takes seconds.
import { randomBytes } from 'node:crypto'
import { expect, it } from 'vitest'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { ExporterLease } from '../../../pkg/observability/exporter-lease.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

it('a crashed holder is taken over after a lease, the successor exports after the handover, never two at once', async () => {
  const bus = await Bus.open(env.nc)
  const key = `exporter-${randomBytes(4).toString('hex')}`
  const opts = { leaseMs: 900, handoverMs: 600 }
  const a = new ExporterLease(bus.kv.claims, key, { id: 'a', ...opts })
  const b = new ExporterLease(bus.kv.claims, key, { id: 'b', ...opts })
  // A first: the key never existed, so it exports at once.
  await a.tick()
  expect(a.holding()).toBe(true)
  await b.tick()
  expect(b.holding()).toBe(false)
  // A crashes: it neither renews nor releases. B keeps looking, as its loop would (every lease / 3).
  const started = Date.now()
  let tookOverAfter: number | undefined
  while (Date.now() - started < 5_000) {
    await b.tick()
    expect(a.holding() && b.holding(), 'two holders at once').toBe(false)
    if (b.holding()) {
      tookOverAfter = Date.now() - started
      break
    }
    await sleep(100)
  }
  // Not before a whole lease unrenewed plus the handover.
  expect(tookOverAfter).toBeGreaterThanOrEqual(opts.leaseMs + opts.handoverMs)
  expect(a.holding()).toBe(false)
  // A comes back (a paused process): its renewal finds the key taken and it stops for good.
  await a.tick()
  expect(a.holding()).toBe(false)
  await b.tick()
  expect(b.holding()).toBe(true)
  // B releases: the key is a tombstone, and A takes it with a handover, not at once.
  await b.stop()
  await a.tick()
  expect(a.holding()).toBe(false)
  await sleep(opts.handoverMs + 50)
  await a.tick()
  expect(a.holding()).toBe(true)
  await a.stop()
})
