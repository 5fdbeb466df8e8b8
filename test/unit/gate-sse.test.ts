// The gate's event-stream reader (cmd/gate/sse.ts), under both of its users (the token count and the collected
// answer): the data payloads in order at any split of the bytes, CRLF or LF, non-data lines left out, and a line
// longer than its bound skipped to its end without being held.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { SseDataReader } from '../../cmd/gate/sse.js'

const read = (chunks: (Uint8Array | string)[], maxLineChars = 1_000) => {
  const out: string[] = []
  const r = new SseDataReader((p) => out.push(p), maxLineChars)
  for (const c of chunks) r.push(c)
  return out
}
const enc = new TextEncoder()
const stream = 'data: {"a":"é"}\r\n\r\n: ping\n\nevent: x\ndata:{"b":"日本"}\n\ndata: [DONE]\n\n'
const payloads = ['{"a":"é"}', '{"b":"日本"}', '[DONE]']

describe('SseDataReader', () => {
  it('gives every data payload, trimmed, at any split of the bytes', () => {
    const bytes = enc.encode(stream)
    for (let cut = 0; cut <= bytes.length; cut++) {
      expect(read([bytes.subarray(0, cut), bytes.subarray(cut)])).toEqual(payloads)
    }
  })

  it('gives the same payloads whatever the chunking (property)', () => {
    const bytes = enc.encode(stream)
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 1, max: bytes.length - 1 }), { maxLength: 12 }), (cuts) => {
        const at = [0, ...cuts.sort((a, b) => a - b), bytes.length]
        const chunks = at.slice(1).map((end, i) => bytes.subarray(at[i], end))
        expect(read(chunks)).toEqual(payloads)
      }),
    )
  })

  it('takes strings too, and holds an unfinished line until its end', () => {
    const out: string[] = []
    const r = new SseDataReader((p) => out.push(p), 100)
    r.push('data: {"x"')
    expect(out).toEqual([])
    r.push(':1}\n')
    expect(out).toEqual(['{"x":1}'])
  })

  it('skips a line longer than its bound to its end and reads on after it', () => {
    const long = `data: ${'x'.repeat(50)}`
    expect(read([long.slice(0, 30), long.slice(30), '\ndata: b\n'], 20)).toEqual(['b'])
    expect(read([`${long}\ndata: c\n`], 20)).toEqual([long.slice(6), 'c'])
  })
})
