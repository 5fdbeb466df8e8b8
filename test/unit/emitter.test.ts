// The emitter's buffer without a server: a connection that never comes up, so every request is buffered. The
// newest request per model is kept, older ones are coalesced, the least recently requested model is dropped past
// the bound, and whatever is unsent at close is reported as dropped — each counted in stats, the callback and
// the prom-client counters. (Reconnect and flush on the real nats-server: test/integration/transport/emitter-outage.)
import type { NatsConnection } from '@nats-io/transport-node'
import { Registry } from 'prom-client'
import { expect, it } from 'vitest'
import { createForegroundEmitter, emitterConnectionOptions, type ForegroundRequest } from '@flexinfer/gateway-emitter'

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
