// Provision runs as a Job while a cluster may be moving a stream's leader (it has just scaled it, or a server is
// rolling). Between the old leader stepping down and the new one subscribing, nothing answers a publish to the
// stream: nats.js reports "no responders". Provision's one publish (the resync schedule) must wait that out within a
// deadline, not fail the install.
import { jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { RESYNC_SCHEDULE_SUBJECT, STREAM_TIMERS } from '../../../events/catalog.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { lastBySubject } from '../../../pkg/jetstream/streams.js'
import { waitFor } from '../../env/exec.js'
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

// A server of the cluster crashes while provision runs (a node drained, an OOM kill): when it led the JetStream meta
// group, no stream can be created or even looked up until the others have elected a new leader, which takes them
// several seconds — longer than one management request's deadline. Provision must ride that out, not fail the
// install (the CI saw a stream create time out on a busy machine the same way).
it('provisions every stream and bucket across the loss of the JetStream meta leader', async () => {
  const leader = await metaLeader()
  await nats.kill(leader)
  const restarted = (async () => {
    await new Promise((r) => setTimeout(r, 1_000))
    await nats.restart(leader)
  })()
  const started = Date.now()
  const bus = await Bus.open(nc, { replicas: 3 })
  await restarted
  console.log(`provisioned ${Date.now() - started} ms after the meta leader ${leader} was killed`)
  expect(await bus.armResync(30_000)).toBe(true)
}, 180_000)

// A function starts (KEDA scales it from zero, a pod is rescheduled) while the cluster has lost its quorum: two of
// three servers are down, and every stream lookup goes unanswered until one is back. Binding the streams and buckets
// provision made must wait that out, as it waits for a provision that has not run yet, not crash the pod on the
// first request's timeout.
it('binds the provisioned streams and buckets across a loss of quorum (two servers of three down)', async () => {
  await Bus.open(nc, { replicas: 3 })
  const [survivor, back, other] = nats.live()
  if (!survivor || !back || !other) throw new Error('the cluster has not three servers')
  const down = [back, other]
  const conn = await connect({ servers: [survivor.url] })
  try {
    for (const s of down) await nats.kill(s.name)
    const restarted = (async () => {
      await new Promise((r) => setTimeout(r, 8_000))
      await nats.restart(back.name)
    })()
    const started = Date.now()
    const bound = await Bus.open(conn, { provision: false }).finally(() => restarted)
    console.log(`bound ${Date.now() - started} ms after quorum was lost`)
    expect(bound.kv.claims).toBeDefined()
  } finally {
    await conn.close()
    for (const s of nats.servers) if (!nats.live().includes(s)) await nats.restart(s.name)
  }
}, 180_000)

async function metaLeader(): Promise<string> {
  return waitFor(
    'a JetStream meta leader',
    async () => {
      for (const s of nats.live()) {
        const r = await fetch(`${s.monitorUrl}/jsz`, { signal: AbortSignal.timeout(2_000) }).catch(() => undefined)
        const leader = r?.ok
          ? ((await r.json()) as { meta_cluster?: { leader?: string } }).meta_cluster?.leader
          : undefined
        if (leader) return leader
      }
      return undefined
    },
    { timeoutMs: 30_000 },
  )
}

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
