// The emitter's buffer without a server: a connection that never comes up, so every request is buffered. The
// newest request per model is kept, older ones are coalesced, the least recently requested model is dropped past
// the bound, and whatever is unsent at close is reported as dropped — each counted in stats, the callback and
// the prom-client counters. (Reconnect and flush on the real nats-server: test/integration/transport/emitter-outage.)
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createForegroundEmitter, emitterConnectionOptions, type ForegroundRequest } from '@flexinfer/gateway-emitter'
import { createUser } from '@nats-io/nkeys'
import type { NatsConnection } from '@nats-io/transport-node'
import { Registry } from 'prom-client'
import { expect, it } from 'vitest'

const never = new Promise<NatsConnection>(() => {})

it('buffers the newest request per model, coalesces older ones and drops the least recently requested', async () => {
  const registry = new Registry()
  const drops: [string, string, number][] = []
  const emitter = createForegroundEmitter(never, {
    maxBuffered: 2,
    registry,
    onDrop: (r: ForegroundRequest, why) => drops.push([r.model, why, r.time?.getTime() ?? 0]),
  })
  const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s))
  const started = Date.now()
  expect(await emitter.emit({ namespace: 'ns', model: 'a', time: at(1) })).toBe('buffered')
  expect(await emitter.emit({ namespace: 'ns', model: 'b', time: at(2) })).toBe('buffered')
  expect(await emitter.emit({ namespace: 'ns', model: 'a', time: at(3) })).toBe('buffered') // coalesced: a is newest
  expect(await emitter.emit({ namespace: 'ns', model: 'c', time: at(4) })).toBe('buffered') // b dropped
  expect(await emitter.emit({ namespace: 'ns', model: 'x', workloadClass: 'background' })).toBe('background')
  expect(Date.now() - started).toBeLessThan(500)
  expect(emitter.stats).toMatchObject({ buffered: 4, coalesced: 1, dropped: 1, pending: 2, background: 1 })
  expect(drops).toEqual([['b', 'overflow', at(2).getTime()]])

  await emitter.close(50)
  // Unsent at close: a with its newest time, then c.
  expect(drops.slice(1)).toEqual([
    ['a', 'closed', at(3).getTime()],
    ['c', 'closed', at(4).getTime()],
  ])
  expect(await emitter.emit({ namespace: 'ns', model: 'd' })).toBe('dropped')
  const text = await registry.metrics()
  expect(text).toContain('flexinfer_gateway_emitter_dropped_total{reason="overflow"} 1')
  expect(text).toContain('flexinfer_gateway_emitter_dropped_total{reason="closed"} 3')
  expect(text).toContain('flexinfer_gateway_emitter_coalesced_total 1')
  expect(text).toContain('flexinfer_gateway_emitter_requests_total{outcome="buffered"} 4')
  expect(text).toContain('flexinfer_gateway_emitter_buffered_models 0')
})

it('a second emitter on the same registry shares its counters (no duplicate registration)', () => {
  const registry = new Registry()
  createForegroundEmitter(never, { registry })
  expect(() => createForegroundEmitter(never, { registry })).not.toThrow()
})

it('connection options reconnect forever, with jitter, and take credentials out of the URL', () => {
  const o = emitterConnectionOptions('nats://gateway:s3cret@127.0.0.1:4222')
  expect(o).toMatchObject({
    servers: ['nats://127.0.0.1:4222'],
    user: 'gateway',
    pass: 's3cret',
    inboxPrefix: '_INBOX_gateway',
    maxReconnectAttempts: -1,
    waitOnFirstConnect: true,
  })
  expect(o.reconnectJitter).toBeGreaterThan(0)
})

it('a namespace or model that is no Kubernetes name is refused and reported, never buffered as a subject', async () => {
  const drops: [string, string][] = []
  const emitter = createForegroundEmitter(never, { onDrop: (r, why) => drops.push([r.model, why]) })
  expect(await emitter.emit({ namespace: 'ns', model: 'a.>' })).toBe('invalid')
  expect(await emitter.emit({ namespace: 'Team A', model: 'a' })).toBe('invalid')
  expect(await emitter.emit({ namespace: 'ns', model: 'a b' })).toBe('invalid')
  expect(emitter.stats).toMatchObject({ invalid: 3, dropped: 3, buffered: 0, pending: 0 })
  expect(drops).toEqual([
    ['a.>', 'invalid'],
    ['a', 'invalid'],
    ['a b', 'invalid'],
  ])
  await emitter.close(10)
})

it('an NKey seed file names the inbox prefix from the user and is checked at start', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'emitter-seed-'))
  const seed = join(dir, 'gateway.nk')
  await writeFile(seed, new TextDecoder().decode(createUser().getSeed()))
  const o = emitterConnectionOptions('nats://gateway@127.0.0.1:4222', 'gw', { nkeySeedFile: seed })
  expect(o).toMatchObject({ servers: ['nats://127.0.0.1:4222'], inboxPrefix: '_INBOX_gateway' })
  expect(o).not.toHaveProperty('user')
  expect(o.authenticator).toBeTypeOf('function')
  await writeFile(seed, 'REPLACE-ME')
  expect(() => emitterConnectionOptions('nats://gateway@127.0.0.1:4222', 'gw', { nkeySeedFile: seed })).toThrow(
    /holds no user seed/,
  )
  await rm(dir, { recursive: true, force: true })
})
