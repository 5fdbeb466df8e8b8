// NATS JetStream on the real nats-server of the environment: streams, KV compare-and-set, the NATS CLI, and
// message schedules (nats-server ≥ 2.12), which the backfill timers rely on.
import { randomBytes } from 'node:crypto'
import { AckPolicy, type JsMsg, jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { headers } from '@nats-io/transport-node'
import { describe, expect, it } from 'vitest'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
const unique = () => randomBytes(4).toString('hex')

describe('JetStream', () => {
  it('stores a published message and delivers it once to a durable consumer, which acks it', async () => {
    const id = unique()
    const jsm = await jetstreamManager(env.nc)
    const js = jetstream(env.nc)
    const stream = `RT_${id}`
    await jsm.streams.add({ name: stream, subjects: [`rt.${id}.>`], storage: StorageType.File })
    try {
      const ack = await js.publish(`rt.${id}.hello`, 'hello world', { msgID: 'first' })
      expect(ack).toMatchObject({ stream, seq: 1, duplicate: false })
      // Same Nats-Msg-Id: deduplicated by the server, not stored twice.
      const again = await js.publish(`rt.${id}.hello`, 'hello world', { msgID: 'first' })
      expect(again).toMatchObject({ seq: 1, duplicate: true })
      expect((await jsm.streams.info(stream)).state.messages).toBe(1)

      await jsm.consumers.add(stream, { durable_name: 'reader', ack_policy: AckPolicy.Explicit })
      const consumer = await js.consumers.get(stream, 'reader')
      const msg = await consumer.next({ expires: 5_000 })
      expect(msg?.subject).toBe(`rt.${id}.hello`)
      expect(msg?.string()).toBe('hello world')
      expect(await msg?.ackAck()).toBe(true)
      const info = await consumer.info()
      expect(info.delivered.stream_seq).toBe(1)
      expect(info.num_ack_pending).toBe(0)
      expect(info.num_pending).toBe(0)
    } finally {
      await jsm.streams.delete(stream)
    }
  })

  it('fires a scheduled message (Nats-Schedule @at) on its target subject at the time, not before', async () => {
    const id = unique()
    const jsm = await jetstreamManager(env.nc)
    const js = jetstream(env.nc)
    const stream = `SCHED_${id}`
    // allow_msg_schedules is in @nats-io/jetstream 3.4's StreamConfig typing; no cast needed.
    await jsm.streams.add({
      name: stream,
      subjects: [`sched.${id}.>`, `fired.${id}.>`],
      storage: StorageType.File,
      allow_msg_schedules: true,
    })
    try {
      const consumer = await js.consumers.get(stream, { filter_subjects: [`fired.${id}.x`] })
      const fired: { msg: JsMsg; at: number }[] = []
      const messages = await consumer.consume()
      const done = (async () => {
        for await (const msg of messages) {
          fired.push({ msg, at: Date.now() })
          break
        }
      })()

      // Whole seconds: the schedule is RFC 3339 at second precision. At least 2s ahead.
      const due = Math.ceil((Date.now() + 2_000) / 1_000) * 1_000
      const h = headers()
      h.set('Nats-Schedule', `@at ${new Date(due).toISOString().replace(/\.\d{3}Z$/, 'Z')}`)
      h.set('Nats-Schedule-Target', `fired.${id}.x`)
      await js.publish(`sched.${id}.x`, 'wake up', { headers: h })

      // Before the due time: the schedule is stored, nothing has been produced on the target.
      await new Promise((r) => setTimeout(r, Math.max(0, due - Date.now() - 500)))
      expect(fired).toHaveLength(0)
      const before = await jsm.streams.info(stream, { subjects_filter: `fired.${id}.>` })
      expect(before.state.subjects?.[`fired.${id}.x`] ?? 0).toBe(0)

      await Promise.race([done, new Promise((r) => setTimeout(r, due - Date.now() + 5_000))])
      messages.stop()
      expect(fired).toHaveLength(1)
      const [first] = fired
      expect(first?.msg.string()).toBe('wake up')
      expect(first?.msg.subject).toBe(`fired.${id}.x`)
      expect(first?.at).toBeGreaterThanOrEqual(due)
      expect(first?.at).toBeLessThan(due + 3_000)
      // The server marks what it produced with the schedule it came from.
      expect(first?.msg.headers?.get('Nats-Scheduler')).toBe(`sched.${id}.x`)
    } finally {
      await jsm.streams.delete(stream)
    }
  })
})

describe('JetStream KV', () => {
  it('compare-and-set: an update with the current revision wins, one with a stale revision is refused', async () => {
    const kvm = new Kvm(env.nc)
    const bucket = `cas_${unique()}`
    const kv = await kvm.create(bucket)
    try {
      const r1 = await kv.create('lease', 'holder-a')
      await expect(kv.create('lease', 'holder-b')).rejects.toThrow(/wrong last sequence/)
      const r2 = await kv.update('lease', 'holder-a-renewed', r1)
      expect(r2).toBeGreaterThan(r1)
      // A writer that read before the renewal loses.
      await expect(kv.update('lease', 'holder-c', r1)).rejects.toThrow(/wrong last sequence/)
      const entry = await kv.get('lease')
      expect(entry?.string()).toBe('holder-a-renewed')
      expect(entry?.revision).toBe(r2)
    } finally {
      await kv.destroy()
    }
  })

  it('the NATS CLI reads a KV key written by the client', async () => {
    const kvm = new Kvm(env.nc)
    const bucket = `cli_${unique()}`
    const kv = await kvm.create(bucket)
    try {
      await kv.put('models.gemma', 'warm')
      const got = await env.nats(['kv', 'get', bucket, 'models.gemma', '--raw'])
      expect(got.stderr).toBe('')
      expect(got.code).toBe(0)
      expect(got.stdout.trim()).toBe('warm')
      const missing = await env.nats(['kv', 'get', bucket, 'models.nope', '--raw'])
      expect(missing.code).not.toBe(0)
    } finally {
      await kv.destroy()
    }
  })
})

describe('the environment', () => {
  it('runs nats-server ≥ 2.12 with JetStream on a file store, monitored over HTTP', async () => {
    const varz = (await (await fetch(`${env.natsMonitorUrl}/varz`)).json()) as {
      version: string
      jetstream?: { config?: { store_dir?: string } }
    }
    const [major = 0, minor = 0] = varz.version.split('.').map(Number)
    expect(major * 100 + minor).toBeGreaterThanOrEqual(212)
    expect(varz.jetstream?.config?.store_dir).toMatch(/nats/)
    const health = await fetch(`${env.natsMonitorUrl}/healthz`)
    expect(await health.json()).toEqual({ status: 'ok' })
  })
})
