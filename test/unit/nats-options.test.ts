import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseNatsServers } from '../../clients/ts/src/connection.js'
import { natsServerOptions } from '../../pkg/jetstream/connect.js'
import { awaitProvisioned } from '../../pkg/jetstream/topology.js'

describe('natsServerOptions', () => {
  it('takes the user and password out of the URL and gives the user its own inbox prefix', () => {
    expect(natsServerOptions('nats://demand:s3cr%40t@nats.nats.svc:4222')).toEqual({
      servers: ['nats://nats.nats.svc:4222'],
      user: 'demand',
      pass: 's3cr@t',
      inboxPrefix: '_INBOX_demand',
    })
  })

  it('reads a server list as the manifests build it (nats://<fn>@$(NATS_HOST), NATS_HOST=a:4222,b:4222)', () => {
    expect(natsServerOptions('nats://demand@nats-a.nats:4222,nats-b.nats:4222')).toEqual({
      servers: ['nats://nats-a.nats:4222', 'nats-b.nats:4222'],
      user: 'demand',
      inboxPrefix: '_INBOX_demand',
    })
  })

  it('leaves an anonymous URL (local runs) on the default inbox', () => {
    expect(natsServerOptions('nats://127.0.0.1:4222,nats://127.0.0.1:4223')).toEqual({
      servers: ['nats://127.0.0.1:4222', 'nats://127.0.0.1:4223'],
    })
  })
})

// The controller and the published gateway client read NATS_URL apart (pkg/jetstream/connect.ts says why): the same
// URL must give both the same servers, user, password and credential file.
describe('the controller and the gateway client read a NATS URL alike', () => {
  // A seed of the right form (only read, never used to sign here).
  const seed = join(mkdtempSync(join(tmpdir(), 'nats-options-')), 'seed')
  writeFileSync(seed, `SU${'A'.repeat(56)}\n`)
  const urls = [
    'nats://demand:s3cr%40t@nats.nats.svc:4222',
    'nats://demand@nats-a.nats:4222,nats-b.nats:4222',
    'nats://127.0.0.1:4222,nats://127.0.0.1:4223',
    `nats://gw@host:4222?nkey_seed_file=${seed}`,
    'tls://host:4222?creds_file=/s/x.creds, nats://other:4222',
  ]
  for (const url of urls)
    it(url, () => {
      const client = parseNatsServers(url, {})
      const ours = natsServerOptions(url, {})
      expect(ours.servers).toEqual(client.servers)
      if (client.seedFile || client.credsFile) expect(ours.authenticator).toBeDefined()
      else expect({ user: ours.user, pass: ours.pass }).toEqual({ user: client.user, pass: client.pass })
    })
})

describe('awaitProvisioned', () => {
  const notFound = () => Promise.reject(new Error('stream not found'))

  it('retries while the provision step has not run, then returns what it finds', async () => {
    let calls = 0
    const found = await awaitProvisioned(
      'stream FLEXINFER_EVENTS',
      () => (++calls < 3 ? notFound() : Promise.resolve('info')),
      { waitMs: 10_000 },
    )
    expect(found).toBe('info')
    expect(calls).toBe(3)
  })

  it('gives up after waitMs with an error that says what is missing and who creates it', async () => {
    await expect(awaitProvisioned('stream FLEXINFER_EVENTS', notFound, { waitMs: 600 })).rejects.toThrow(
      /stream FLEXINFER_EVENTS does not exist yet: the provision step creates it \(FUNCTION=provision; .*model-backfill-provision Job\); gave up after/,
    )
  })

  it('waits out a stream without a leader (a lookup that times out), then returns what it finds', async () => {
    let calls = 0
    const timedOut = Object.assign(new Error('timeout'), { name: 'TimeoutError' })
    const found = await awaitProvisioned(
      'stream FLEXINFER_EVENTS',
      () => (++calls < 3 ? Promise.reject(timedOut) : Promise.resolve('info')),
      { waitMs: 10_000 },
    )
    expect(found).toBe('info')
    expect(calls).toBe(3)
  })

  it('gives up on a leaderless stream after waitMs saying that JetStream does not answer', async () => {
    const timedOut = () => Promise.reject(Object.assign(new Error('timeout'), { name: 'TimeoutError' }))
    await expect(awaitProvisioned('stream FLEXINFER_EVENTS', timedOut, { waitMs: 600 })).rejects.toThrow(
      /stream FLEXINFER_EVENTS: JetStream does not answer \(no leader: .*\); gave up after/,
    )
  })

  it('does not wait out other errors (a permission refusal is not a missing stream)', async () => {
    let calls = 0
    const refused = () => {
      calls++
      return Promise.reject(new Error('permissions violation'))
    }
    await expect(awaitProvisioned('stream FLEXINFER_EVENTS', refused, { waitMs: 10_000 })).rejects.toThrow(
      'permissions violation',
    )
    expect(calls).toBe(1)
  })
})
