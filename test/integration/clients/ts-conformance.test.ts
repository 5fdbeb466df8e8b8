// The TypeScript client (clients/ts) against the shared conformance scenarios (clients/conformance/emitter.json)
// on a real nats-server running deploy/nats/auth.conf, logged in as the gateway user with its NKey: publish, background
// and invalid requests, throttling, the newest request per model buffered through a server restart, overflow.
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type EmitOutcome, type EmitterOptions, openForegroundEmitter } from '@flexinfer/gateway-emitter'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { useTestEnv } from '../../env/fixture.js'
import { type ClientHarness, type RecordedEvent, startClientHarness } from './harness.js'

interface Scenario {
  name: string
  options: { source: string; throttleMs?: number; maxBuffered?: number }
  steps: (
    | { emit: { namespace: string; model: string; workloadClass?: string; time: string } }
    | { down: true }
    | { up: true }
    | { sleep: number }
  )[]
  outcomes: EmitOutcome[]
  events: { subject: string; time: string; data: Record<string, string> }[]
  drops: [string, string][]
}

const env = useTestEnv()
let harness: ClientHarness
let dir: string
const { scenarios } = JSON.parse(await readFile('clients/conformance/emitter.json', 'utf8')) as {
  scenarios: Scenario[]
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'clients-ts-'))
  harness = await startClientHarness(env.binaries.natsServer as string, dir)
})
afterAll(async () => {
  await harness?.stop()
  await rm(dir, { recursive: true, force: true })
})

const byStoredOrder = (a: { subject: string; time: string }, b: { subject: string; time: string }) =>
  a.subject.localeCompare(b.subject) || a.time.localeCompare(b.time)

/** The events stored once the expected count is reached (bounded), plus a quiet moment to catch extra ones. */
async function settle(expected: number): Promise<RecordedEvent[]> {
  const deadline = Date.now() + 20_000
  while (harness.events().length < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
  await new Promise((r) => setTimeout(r, 700))
  return harness.events()
}

describe('conformance (clients/conformance/emitter.json)', () => {
  for (const scenario of scenarios) {
    it(scenario.name, { timeout: 60_000 }, async () => {
      harness.reset()
      const drops: [string, string][] = []
      const options: EmitterOptions = {
        ...scenario.options,
        credentials: { nkeySeedFile: harness.gatewaySeedFile },
        onDrop: (r, why) => drops.push([r.model, why]),
      }
      const emitter = openForegroundEmitter(harness.gatewayUrl, options)
      try {
        const connected = Date.now() + 10_000
        while (!emitter.connected && Date.now() < connected) await new Promise((r) => setTimeout(r, 50))
        expect(emitter.connected).toBe(true)
        const outcomes: EmitOutcome[] = []
        let slowest = 0
        for (const step of scenario.steps) {
          if ('emit' in step) {
            const started = Date.now()
            const { time, workloadClass, ...target } = step.emit
            outcomes.push(
              await emitter.emit({
                ...target,
                time: new Date(time),
                workloadClass: workloadClass as 'foreground' | 'background' | undefined,
              }),
            )
            slowest = Math.max(slowest, Date.now() - started)
          } else if ('down' in step) await harness.nats.stop()
          else if ('up' in step) await harness.nats.start()
          else await new Promise((r) => setTimeout(r, step.sleep))
        }
        expect(outcomes).toEqual(scenario.outcomes)
        // Never holds a request handler longer than the publish timeout (1 s), whatever the server does.
        expect(slowest).toBeLessThanOrEqual(1_200)
        const stored = await settle(scenario.events.length)
        const got = stored
          .map((r) => ({ subject: r.subject, time: r.event.time as string, data: r.event.data }))
          .sort(byStoredOrder)
        expect(got).toEqual([...scenario.events].sort(byStoredOrder))
        for (const r of stored) {
          expect(r.rejected).toBeUndefined()
          expect(r.event).toMatchObject({
            specversion: '1.0',
            type: 'ai.flexinfer.foreground.request',
            datacontenttype: 'application/json',
            source: scenario.options.source,
          })
          expect(typeof r.event.id === 'string' && r.event.id.length > 0).toBe(true)
        }
        expect(new Set(stored.map((r) => r.event.id)).size).toBe(stored.length)
        expect(drops).toEqual(scenario.drops)
      } finally {
        await emitter.close(1000)
      }
    })
  }
})
