// The bridge's bearer token for a Broker with sender identity on (pkg/transport/auth/sink-token.ts): sent on every POST,
// re-read when the file is swapped the way the kubelet rotates a projected token, re-read at once on a 401 (which
// is then retried, never dead-lettered), and a botched rotation (empty file) keeps the previous token.
import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify, { type FastifyInstance } from 'fastify'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { InboundEvent } from '../../events/codec.js'
import { SinkToken } from '../../pkg/transport/auth/sink-token.js'
import { createBridge } from '../../pkg/transport/bridge.js'
import { PermanentError } from '../../pkg/transport/function.js'
import { waitUntil } from '../integration/support/backfill-world.js'
import { fakeDeps } from './support/deps.js'

const event: InboundEvent = {
  type: 'ai.flexinfer.backfill.admit',
  id: 'evt-1',
  source: 'flexinfer/model-backfill',
  time: '2026-01-01T00:00:00.000Z',
  data: { namespace: 'team-a', backfill: 'nightly' },
}
let sink: FastifyInstance
let url: string
let dir: string
/** The tokens the stand-in Broker accepts right now. */
const accepted = new Set<string>()
const presented: (string | undefined)[] = []

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sink-token-'))
  sink = Fastify({ logger: false })
  sink.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => done(null, body))
  sink.post('/', async (req, reply) => {
    presented.push(req.headers.authorization)
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1]
    return reply.code(token && accepted.has(token) ? 202 : 401).send('')
  })
  url = await sink.listen({ port: 0, host: '127.0.0.1' })
})
afterAll(async () => {
  await sink.close()
  await rm(dir, { recursive: true, force: true })
})

/** The kubelet's layout for a projected volume: `token` → `..data/token`, `..data` → a timestamped directory. */
async function project(volume: string, token: string, n: number) {
  const data = join(volume, `..${n}`)
  await mkdir(data, { recursive: true })
  await writeFile(join(data, 'token'), token)
  await symlink(`..${n}`, join(volume, '..data_tmp'))
  await rename(join(volume, '..data_tmp'), join(volume, '..data')) // the atomic swap
  if (n === 1) await symlink('..data/token', join(volume, 'token'))
}

it('sends the token as a bearer, follows a kubelet-style rotation, and re-reads at once on a 401', async () => {
  const volume = join(dir, 'rotate')
  await mkdir(volume)
  await project(volume, 'jwt-one', 1)
  const token = await SinkToken.open(join(volume, 'token'), { pollMs: 60_000 })
  try {
    const bridge = createBridge({ sink: url, token })
    accepted.add('jwt-one')
    await bridge.handle(event, fakeDeps())
    expect(presented.at(-1)).toBe('Bearer jwt-one')

    // Rotated, and the old token no longer accepted, before the poll saw it: the 401 re-reads the file and the
    // event is retried (a transient error), with the new token the next time.
    await project(volume, 'jwt-two', 2)
    accepted.clear()
    accepted.add('jwt-two')
    const err = await bridge.handle(event, fakeDeps()).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Error)
    expect(err).not.toBeInstanceOf(PermanentError)
    expect(String(err)).toContain('sink token re-read')
    expect(token.current()).toBe('jwt-two')
    await bridge.handle(event, fakeDeps())
    expect(presented.at(-1)).toBe('Bearer jwt-two')
  } finally {
    token.close()
  }
})

it('polls the file for a rotation; an empty rotation keeps the previous token; an empty file refuses to start', async () => {
  const volume = join(dir, 'poll')
  await mkdir(volume)
  await project(volume, 'jwt-a', 1)
  const token = await SinkToken.open(join(volume, 'token'), { pollMs: 50 })
  try {
    await project(volume, 'jwt-b', 2)
    await waitUntil('the rotated token read', async () => (token.current() === 'jwt-b' ? true : undefined), 5_000)
    await project(volume, '  \n', 3)
    await token.reload()
    expect(token.current()).toBe('jwt-b')
  } finally {
    token.close()
  }
  await expect(SinkToken.open(join(volume, 'token'))).rejects.toThrow(/is empty/)
  await expect(SinkToken.open(join(dir, 'absent'))).rejects.toThrow()
})

it('without a token: no Authorization header, and a 401 stays permanent (dead-lettered, as before)', async () => {
  const err = await createBridge({ sink: url })
    .handle(event, fakeDeps())
    .catch((e: unknown) => e)
  expect(presented.at(-1)).toBeUndefined()
  expect(err).toBeInstanceOf(PermanentError)
})
