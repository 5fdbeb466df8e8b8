// The reply subject read without nats.js's parse (pkg/transport/reply-subject.ts) against nats.js's own parse of the same
// subject (its JsMsg's `info`), for both forms the server sends: the same stream sequence, and the store time to the
// millisecond (floor), over any numbers the fields can hold.
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { type ReplyFields, readReplySubject } from '../../pkg/transport/reply-subject.js'

// nats.js's message wrapper is not exported by its package entry points; its file is loaded directly.
const require = createRequire(import.meta.url)
const jsmsgFile = join(dirname(require.resolve('@nats-io/jetstream')), 'jsmsg.js')
const { toJsMsg } = require(jsmsgFile) as {
  toJsMsg(m: { reply: string }): { info: { streamSequence: number; timestampNanos: number } }
}

const token = fc.stringMatching(/^[A-Za-z0-9_-]{1,12}$/)
const count = fc.bigInt({ min: 0n, max: 2n ** 53n - 1n })
/** Nanoseconds since the epoch: today's (19 digits) and any other from 0 up to 2^63. */
const nanos = fc.oneof(
  fc.bigInt({ min: 1_700_000_000_000_000_000n, max: 2_000_000_000_000_000_000n }),
  fc.bigInt({ min: 0n, max: 2n ** 63n - 1n }),
)

function fields(reply: string): ReplyFields | undefined {
  const into: ReplyFields = { streamSeq: 0, storedAtMs: 0 }
  return readReplySubject(reply, into) ? into : undefined
}

describe('readReplySubject', () => {
  it('reads what nats.js reads, in the old and the new form', () => {
    fc.assert(
      fc.property(
        fc.boolean(),
        fc.record({ domain: token, hash: token, stream: token, consumer: token, random: token }),
        fc.tuple(count, count, count, nanos, count),
        (newForm, t, [delivered, seq, dseq, ns, pending]) => {
          const reply = newForm
            ? `$JS.ACK.${t.domain}.${t.hash}.${t.stream}.${t.consumer}.${delivered}.${seq}.${dseq}.${ns}.${pending}.${t.random}`
            : `$JS.ACK.${t.stream}.${t.consumer}.${delivered}.${seq}.${dseq}.${ns}.${pending}`
          const info = toJsMsg({ reply }).info
          const ours = fields(reply)
          expect(ours).toBeDefined()
          expect(ours?.streamSeq).toBe(info.streamSequence)
          // nats.js reads the nanoseconds into a double (rounded to 256 ns at today's epoch, and up to the next
          // millisecond within 128 ns of it); the millisecond itself is exact here.
          expect(Math.floor(ours?.storedAtMs ?? -1)).toBe(Number(ns / 1_000_000n))
          expect(Math.abs((ours?.storedAtMs ?? 0) - info.timestampNanos / 1e6)).toBeLessThan(
            0.002 + 1e-12 * Number(ns / 1_000_000n),
          )
        },
      ),
      { numRuns: 5_000 },
    )
  })

  it('leaves what it does not know to nats.js (which says what is wrong)', () => {
    for (const reply of [
      '',
      '_INBOX.abc.def',
      '$JS.ACK.s.c.1.2.3',
      '$JS.ACK.s.c.1.x.3.4.5',
      '$JS.ACK.s.c.1.2.3.4.5.6.7.8.9.10.11',
      '$JS.ACK.s.c.1.2.3..5',
      '$JS.API.s.c.1.2.3.4.5',
    ]) {
      expect(fields(reply), reply).toBeUndefined()
    }
  })
})
