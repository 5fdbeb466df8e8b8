// The JetStream adapter reads each delivery's stream sequence and store time from its reply subject itself
// (pkg/transport/reply-subject.ts), falling back to nats.js's parse for a form it does not know. On the real nats-server:
// every delivery comes in a form it reads (so the cheap path is the one taken), with what nats.js reads from it.

import { randomBytes } from 'node:crypto'
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream'
import { afterAll, expect, it } from 'vitest'
import { type ReplyFields, readReplySubject } from '../../../pkg/transport/reply-subject.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
const stream = `REPLY_${randomBytes(4).toString('hex')}`

afterAll(async () => {
  const jsm = await jetstreamManager(env.nc)
  await jsm.streams.delete(stream).catch(() => {})
})

it('reads every real delivery as nats.js does, first deliveries and redeliveries', async () => {
  const jsm = await jetstreamManager(env.nc)
  await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], max_bytes: 1 << 20 })
  const js = jetstream(env.nc)
  for (let i = 0; i < 50; i++) await js.publish(`${stream}.m`, `m${i}`)
  await jsm.consumers.add(stream, {
    durable_name: 'reader',
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
  })
  const consumer = await js.consumers.get(stream, 'reader')
  const seen: { reply: string; seq: number; ms: number; ours: ReplyFields | undefined }[] = []
  // Each message twice: naked once (a redelivery: another delivery count in its subject), then acked.
  for (let round = 0; round < 2; round++) {
    const batch = await consumer.fetch({ max_messages: 50, expires: 2_000 })
    for await (const m of batch) {
      const reply = (m as unknown as { reply: string }).reply
      const into: ReplyFields = { streamSeq: 0, storedAtMs: 0 }
      seen.push({
        reply,
        seq: m.info.streamSequence,
        ms: m.info.timestampNanos / 1e6,
        ours: readReplySubject(reply, into) ? into : undefined,
      })
      if (round === 0) m.nak()
      else m.ack()
    }
  }
  expect(seen.length).toBe(100)
  for (const s of seen) {
    expect(s.ours, s.reply).toBeDefined()
    expect(s.ours?.streamSeq, s.reply).toBe(s.seq)
    // nats.js's double rounds the nanoseconds (to 256 ns today); ours keeps the microseconds.
    expect(Math.abs((s.ours?.storedAtMs ?? 0) - s.ms), s.reply).toBeLessThan(0.002)
  }
})
