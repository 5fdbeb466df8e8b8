// The gate's token count (cmd/gate/tokens.ts) over event streams cut at every byte: chunks with a choice are tokens,
// the usage chunk and [DONE] are not, and a line longer than the bound is skipped without holding it.
import { describe, expect, it } from 'vitest'
import { TokenCounter } from '../../cmd/gate/tokens.js'

const enc = new TextEncoder()
const stream = [
  'data: {"choices":[{"text":"a","index":0}]}\n\n',
  'data: {"id":"x","choices":[{"delta":{"content":"é"}}]}\n\n',
  ': a comment\n\n',
  'data: {"choices":[],"usage":{"completion_tokens":2}}\n\n',
  'data: [DONE]\n\n',
].join('')

describe('TokenCounter', () => {
  it('counts the chunks that carry a choice, at any split', () => {
    const bytes = enc.encode(stream)
    for (let cut = 0; cut <= bytes.length; cut++) {
      const c = new TokenCounter()
      c.push(bytes.subarray(0, cut))
      c.push(bytes.subarray(cut))
      expect([c.tokens, c.done]).toEqual([2, true])
    }
  })

  it('a stream cut before [DONE] is not done', () => {
    const c = new TokenCounter()
    c.push(enc.encode('data: {"choices":[{"text":"a"}]}\n\ndata: {"choi'))
    expect([c.tokens, c.done]).toEqual([1, false])
  })

  it('skips a line longer than its bound and counts on after it', () => {
    const c = new TokenCounter()
    c.push(enc.encode(`data: {"choices":[{"text":"${'x'.repeat(1024 * 1024 + 10)}`))
    c.push(enc.encode('"}]}\n\ndata: {"choices":[{"text":"b"}]}\n\n'))
    expect(c.tokens).toBe(1)
  })
})
