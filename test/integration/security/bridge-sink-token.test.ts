// The bridge as a sender to a Broker with sender identity on (`authentication-oidc`), with the real apiserver and
// nats-server: the bridge process reads an audience-bound ServiceAccount token (minted by TokenRequest, as the
// kubelet projects one) from a file in the kubelet's projected-volume layout, and a stand-in for the Broker's
// ingress verifies each POST's bearer token by TokenReview for the Broker's audience. Events arrive authenticated;
// after the file is rotated and the old token is no longer accepted, they still arrive, with the new token, and
// nothing is dead-lettered. (The real Broker with OIDC needs Knative's transport encryption and feature flags,
// which the Knative harness does not run.)
import { randomBytes } from 'node:crypto'
import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AuthenticationV1Api, CoreV1Api } from '@kubernetes/client-node'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { decode } from '../../../events/codec.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { type RunningBridge, startBridge } from '../../../pkg/transport/bridge.js'
import { useTestEnv } from '../../env/fixture.js'
import { waitUntil } from '../support/backfill-world.js'
import { testInstance } from '../support/runner.js'

const env = useTestEnv()
const sa = `bridge-oidc-${randomBytes(3).toString('hex')}`
let audience = ''
let sink: FastifyInstance
let bridge: RunningBridge
let bus: Bus
let volume = ''
/** Tokens the stand-in Broker no longer accepts (rotated away: as if expired). */
const retired = new Set<string>()
const arrived: { backfill: string; token: string }[] = []
let refused = 0
let sinkUrl = ''

const mint = async () =>
  (
    await env.kc.makeApiClient(CoreV1Api).createNamespacedServiceAccountToken({
      name: sa,
      namespace: env.namespace,
      body: { spec: { audiences: [audience], expirationSeconds: 600 } },
    })
  ).status?.token as string

/** The Broker ingress's check: a valid token for its audience, of an identity it knows, not retired. */
async function verified(authorization: string | undefined): Promise<string | undefined> {
  const token = /^Bearer (\S+)$/.exec(authorization ?? '')?.[1]
  if (!token || retired.has(token)) return undefined
  const review = await env.kc
    .makeApiClient(AuthenticationV1Api)
    .createTokenReview({ body: { spec: { token, audiences: [audience] } } })
  const ok =
    review.status?.authenticated &&
    review.status.audiences?.includes(audience) &&
    review.status.user?.username === `system:serviceaccount:${env.namespace}:${sa}`
  return ok ? token : undefined
}

/** The kubelet's projected-volume layout: `token` → `..data/token`, `..data` swapped atomically on rotation. */
async function project(token: string, n: number) {
  await mkdir(join(volume, `..${n}`))
  await writeFile(join(volume, `..${n}`, 'token'), token)
  await symlink(`..${n}`, join(volume, '..data_tmp'))
  await rename(join(volume, '..data_tmp'), join(volume, '..data'))
  if (n === 1) await symlink('..data/token', join(volume, 'token'))
}

beforeAll(async () => {
  audience = `eventing.knative.dev/broker/${env.namespace}/default`
  await env.kc
    .makeApiClient(CoreV1Api)
    .createNamespacedServiceAccount({ namespace: env.namespace, body: { metadata: { name: sa } } })
  volume = await mkdtemp(join(tmpdir(), 'bridge-oidc-'))
  await project(await mint(), 1)
  sink = Fastify({ logger: false })
  sink.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => done(null, body))
  sink.post('/', async (req, reply) => {
    const token = await verified(req.headers.authorization)
    if (!token) {
      refused++
      return reply.code(401).send('')
    }
    const d = decode(String(req.body))
    if (d.ok) arrived.push({ backfill: String((d.event.data as { backfill?: unknown }).backfill), token })
    return reply.code(202).send('')
  })
  sinkUrl = await sink.listen({ port: 0, host: '127.0.0.1' })
  bus = await Bus.open(env.nc)
  bridge = await startBridge({
    natsUrl: env.natsUrl,
    kubeconfig: env.kc,
    sink: sinkUrl,
    instance: testInstance(),
    namespaces: [env.namespace],
    tokenFile: join(volume, 'token'),
    // Longer than the test: the rotation is found by the 401, not by the poll.
    tokenPollMs: 600_000,
  })
})

afterAll(async () => {
  await bridge?.stop()
  await sink?.close()
  if (volume) await rm(volume, { recursive: true, force: true })
})

const admit = (backfill: string) => bus.publish('ai.flexinfer.backfill.admit', { namespace: env.namespace, backfill })
const arrival = (backfill: string) =>
  waitUntil(`${backfill} at the Broker`, async () => arrived.find((a) => a.backfill === backfill), 20_000)

it('a POST without the token is refused by the stand-in Broker (sanity)', async () => {
  const res = await fetch(sinkUrl, { method: 'POST', body: '{}' })
  expect(res.status).toBe(401)
})

it('posts with the projected token; after a rotation that retires the old token, events still arrive, none dead-lettered', async () => {
  await admit('before-rotation')
  const first = await arrival('before-rotation')
  const rotated = await mint()
  expect(rotated).not.toBe(first.token)
  await project(rotated, 2)
  retired.add(first.token)
  const refusedBefore = refused
  await admit('after-rotation')
  const second = await arrival('after-rotation')
  expect(second.token).toBe(rotated)
  // The first attempt with the old token was refused and retried (re-read at the 401), never dead-lettered.
  expect(refused).toBeGreaterThan(refusedBefore)
  expect(bridge.running.stats.deadLettered).toBe(0)
})
