// The bridge in front of a Broker that is slow to take an event, on the real nats-server. With the InMemoryChannel
// (and any channel that does not acknowledge on store) the Broker's ingress answers only once the fan-out is done,
// the subscriber's answer and the Broker's own retries included, and when the sender hangs up the delivery is
// dropped with it (Go's request context goes from the ingress to the channel to the filter). The sink below does
// both: it answers 202 after 12 s and takes the event only if the bridge is still waiting.
//
// With the bridge's former 10 s POST deadline every attempt was abandoned, sent again (each time one more fan-out
// on the already slow path) and dead-lettered after 8 deliveries: lost. Seen in the Knative broker test on a loaded
// machine: every POST to the Broker timed out, the admission timers were dead-lettered, the cases timed out.
import Fastify, { type FastifyInstance } from 'fastify'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { decode } from '../../../events/codec.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { type RunningBridge, startBridge } from '../../../pkg/transport/bridge.js'
import { useTestEnv } from '../../env/fixture.js'
import { handledAll, waitUntil } from '../support/backfill-world.js'
import { testInstance } from '../support/runner.js'

const env = useTestEnv()
/** How long the stand-in Broker takes to deliver one event (a slow fan-out on a loaded machine). */
const DELIVERY_MS = 12_000
const posts: { backfill: string; taken: boolean }[] = []
let sink: FastifyInstance
let bridge: RunningBridge
let bus: Bus

beforeAll(async () => {
  sink = Fastify({ logger: false })
  sink.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => done(null, body))
  sink.post('/', async (req, reply) => {
    const decoded = decode(String(req.body))
    const data = decoded.ok ? (decoded.event.data as { backfill?: string }) : {}
    const post = { backfill: data.backfill ?? '?', taken: false }
    posts.push(post)
    let hungUp = false
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) hungUp = true
    })
    await new Promise((resolve) => setTimeout(resolve, DELIVERY_MS)) // time is the subject: a slow Broker
    // The sender gave up: the delivery is cancelled with its request, the subscriber never gets the event.
    if (hungUp) return reply
    post.taken = true
    return reply.code(202).send()
  })
  const sinkUrl = await sink.listen({ port: 0, host: '127.0.0.1' })
  bus = await Bus.open(env.nc)
  bridge = await startBridge({
    natsUrl: env.natsUrl,
    kubeconfig: env.kc,
    sink: sinkUrl,
    instance: testInstance(),
    namespaces: [env.namespace],
  })
})

afterAll(async () => {
  await bridge?.stop()
  await sink?.close()
})

it('waits for a Broker that takes 12 s to deliver: the event is taken once, never abandoned or re-sent', async () => {
  await bus.publish('ai.flexinfer.backfill.admit', { namespace: env.namespace, backfill: 'slow-bf' })
  await waitUntil(
    'the slow Broker took the event',
    async () => (posts.some((p) => p.backfill === 'slow-bf' && p.taken) ? true : undefined),
    3 * DELIVERY_MS,
    async () => JSON.stringify(posts),
  )
  // Acked after the 202: no second POST of it follows. Once the bridge has every event it was sent acknowledged at
  // the server, none can be delivered again.
  await handledAll({ deps: bridge.deps, functions: [bridge.running] })
  expect(posts.filter((p) => p.backfill === 'slow-bf')).toEqual([{ backfill: 'slow-bf', taken: true }])
  expect(bridge.running.stats).toMatchObject({ retried: 0, deadLettered: 0 })
}, 90_000)
