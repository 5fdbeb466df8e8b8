// A function on the JetStream transport keeps pulling through the loss of a nats-server (kill -9) on a 3-server
// cluster: (1) the server leading its durable consumer dies while the function stays connected elsewhere — its
// waiting pull died with that leader and nothing tells the client; (2) the server it is connected to dies — it
// reconnects to another (every URL given, as NATS_URL carries them). Either way an event published after the kill
// is handled within a bound well below the preemption bound of the chaos oracle (10 s from the request).
import { randomBytes } from 'node:crypto'
import { jetstream } from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { STREAM_EVENTS } from '../../../events/catalog.js'
import type { InboundEvent } from '../../../events/codec.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { consumerName } from '../../../pkg/jetstream/names.js'
import { awaitReplicas } from '../../../pkg/jetstream/streams.js'
import type { Kube } from '../../../pkg/kube/client.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { ensureConsumers } from '../../../pkg/transport/consumers.js'
import type { Deps, EventFunction } from '../../../pkg/transport/function.js'
import { type RunningFunction, runOnJetStream } from '../../../pkg/transport/jetstream-adapter.js'
import { waitFor } from '../../env/exec.js'
import { type NatsOnly, startNats, waitForStreamLeader } from '../../env/nats.js'
import { configMapEvent } from '../transport/scratch-functions.js'

/** From the kill to the first event published after it being handled (measured ~2–10 s; 30 s+ without the fix). */
const BOUND_MS = 20_000
/**
 * From the stream and the consumer having leaders again (the event stored, the consumer's new leader) to that event
 * handled: the elections themselves (4-9 s on nats-server) are nobody's to shorten, what follows is the client's. Bound consumes re-pull every second (missed heartbeats); before, the client
 * checked the consumer with an info request that timed out while leaderless and slept a pull lifetime (4 s) between
 * checks: 0-9 s after the election (measured 9.8 and 14.7 s from the kill).
 */
const FROM_LEADER_BOUND_MS = 4_000

let nats: NatsOnly
const closers: (() => Promise<unknown>)[] = []

beforeAll(async () => {
  nats = await startNats({ cluster: true })
  const setup = await Bus.connect(nats.natsUrl, 'setup', { replicas: 3 })
  await setup.close()
}, 120_000)

afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => {})
  // The killed server comes back for the next test, and every stream is whole again.
  for (const s of nats.servers) if (!nats.live().includes(s)) await nats.restart(s.name)
  const bus = await Bus.connect(nats.natsUrl, 'check', { provision: false })
  await awaitReplicas(bus.jsm, STREAM_EVENTS, 3).finally(() => bus.close())
}, 90_000)

afterAll(async () => {
  await nats?.stop()
})

/** A probe function on a subject of its own; it records when each event arrived. */
function probeFunction() {
  const name = `failover-${randomBytes(4).toString('hex')}`
  const handled = new Map<string, number>()
  const fn: EventFunction = {
    name,
    subscriptions: [{ stream: STREAM_EVENTS, subjects: [`flexinfer.events.k8s.${name}.>`], deliverNew: true }],
    concurrency: 4,
    handle: async (event: InboundEvent) => {
      handled.set((event.data as { metadata: { name: string } }).metadata.name, Date.now())
    },
  }
  return { fn, name, base: `flexinfer.events.k8s.${name}`, handled }
}

/** Runs the probe on the JetStream transport, connected to `servers` (comma-separated, as NATS_URL). */
async function startProbe(probe: ReturnType<typeof probeFunction>, servers: string) {
  const bus = await Bus.connect(servers, probe.name, { replicas: 3 })
  closers.push(() => bus.close())
  // Kubernetes is never reached: the probe's handler only records.
  const deps: Deps = { kube: undefined as unknown as Kube, bus, log: createLogger('failover-test'), now: Date.now }
  const running: RunningFunction = await runOnJetStream(deps, probe.fn)
  closers.push(() => running.stop())
  return { ...probe, bus }
}

const event = (name: string) => configMapEvent(name, 'failover')

/** Publishes through the live servers until JetStream stores it (the stream may be electing a leader). */
async function publishStored(subject: string, body: string) {
  const nc = await connect({ servers: nats.live().map((s) => s.url) })
  try {
    const js = jetstream(nc, { timeout: 2_000 })
    return await waitFor(`${subject} stored`, () => js.publish(subject, body), { timeoutMs: 30_000, intervalMs: 200 })
  } finally {
    await nc.close()
  }
}

/**
 * From the kill, and from the moment it could first be delivered — stored (the stream has a leader) and the consumer
 * led again (its old leader may be the one killed) — to the first event published after the kill being handled.
 */
async function handledAfterKill(probe: Awaited<ReturnType<typeof startProbe>>, killed: string) {
  await publishStored(`${probe.base}.before`, event('before'))
  await waitFor('the probe pulling', () => probe.handled.has('before'), { timeoutMs: 15_000 })
  const consumer = consumerName(probe.name, STREAM_EVENTS)
  const leaderBefore = await waitForStreamLeader(nats.servers, STREAM_EVENTS, { consumer })
  const killedAt = Date.now()
  await nats.kill(killed)
  const elected =
    leaderBefore === killed
      ? waitForStreamLeader(nats.live(), STREAM_EVENTS, { consumer, not: killed, timeoutMs: 60_000 }).then(() =>
          Date.now(),
        )
      : Promise.resolve(killedAt)
  await publishStored(`${probe.base}.after`, event('after'))
  // Stored: the stream had a leader again by then.
  const storedAt = Date.now()
  await waitFor('the event after the kill handled', () => probe.handled.has('after'), { timeoutMs: 45_000 })
  const handledAt = probe.handled.get('after') as number
  const electedAt = await elected
  return { fromKill: handledAt - killedAt, fromLeader: handledAt - Math.max(electedAt, storedAt), leaderBefore }
}

describe('the JetStream transport through a nats-server kill', () => {
  it("keeps pulling when its consumer's leader dies (connected elsewhere)", async () => {
    // The consumer first, to learn its leader; then the probe connects to the two other servers only.
    const probe = probeFunction()
    const setup = await Bus.connect(nats.natsUrl, 'setup', { provision: false })
    await ensureConsumers({ bus: setup }, probe.fn)
    await setup.close()
    // From the servers' monitoring, polled: a consumer just created may not have elected its leader yet.
    const target = await waitForStreamLeader(nats.servers, STREAM_EVENTS, {
      consumer: consumerName(probe.name, STREAM_EVENTS),
    })
    const others = nats.servers.filter((s) => s.name !== target).map((s) => s.url)
    const running = await startProbe(probe, others.join(','))
    const ms = await handledAfterKill(running, target)
    process.stderr.write(
      `[consumer-failover] consumer leader ${target} killed: next event handled ${JSON.stringify(ms)} ms\n`,
    )
    expect(ms.leaderBefore).toBe(target)
    expect(ms.fromKill).toBeLessThan(BOUND_MS)
    expect(ms.fromLeader).toBeLessThan(FROM_LEADER_BOUND_MS)
  }, 120_000)

  it('reconnects and keeps pulling when the server it is connected to dies', async () => {
    const probe = await startProbe(probeFunction(), nats.natsUrl)
    const connectedTo = probe.bus.nc.info?.server_name as string
    const ms = await handledAfterKill(probe, connectedTo)
    process.stderr.write(
      `[consumer-failover] connected server ${connectedTo} killed: next event ${JSON.stringify(ms)} ms\n`,
    )
    expect(probe.bus.nc.info?.server_name).not.toBe(connectedTo)
    expect(ms.fromKill).toBeLessThan(BOUND_MS)
    expect(ms.fromLeader).toBeLessThan(FROM_LEADER_BOUND_MS)
  }, 120_000)
})
