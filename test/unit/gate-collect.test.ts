// The llamacpp profile's collected answers (cmd/gate/collect.ts): a non-streaming request goes upstream as a stream,
// and the event stream comes back as the one JSON answer the OpenAI API gives.
import { describe, expect, it } from 'vitest'
import { collectable, MAX_COLLECTED_BYTES, StreamCollector, streamedBody } from '../../cmd/gate/collect.js'

const sse = (...events: unknown[]) =>
  `${events.map((e) => `data: ${typeof e === 'string' ? e : JSON.stringify(e)}`).join('\n\n')}\n\n`

describe('collected answers (llamacpp profile)', () => {
  it('streams only the completion paths, and only requests that did not ask for a stream', () => {
    expect(collectable('/v1/chat/completions')).toBe('chat')
    expect(collectable('/v1/completions?x=1')).toBe('completions')
    expect(collectable('/v1/embeddings')).toBeUndefined()
    expect(streamedBody({ prompt: 'a', stream: true })).toBeUndefined()
    expect(streamedBody({ prompt: 'a', stream_options: { other: 1 } })).toEqual({
      prompt: 'a',
      stream: true,
      stream_options: { other: 1, include_usage: true },
    })
  })

  it('collects a chat stream, split anywhere, into one message with its usage', () => {
    const c = new StreamCollector('chat')
    const text = sse(
      { id: 'c1', model: 'm', created: 5, choices: [{ index: 0, delta: { role: 'assistant', content: null } }] },
      { id: 'c1', choices: [{ index: 0, delta: { content: 'Hel' } }] },
      { id: 'c1', choices: [{ index: 0, delta: { content: 'lo' }, finish_reason: null }] },
      { id: 'c1', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
      { id: 'c1', choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } },
      '[DONE]',
    )
    for (let i = 0; i < text.length; i += 7) expect(c.push(text.slice(i, i + 7))).toBe(true)
    expect(c.done).toBe(true)
    expect(c.result()).toEqual({
      id: 'c1',
      model: 'm',
      created: 5,
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: 'Hello' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
    })
  })

  it('keeps a character the socket split between two chunks whole', () => {
    const bytes = Buffer.from(sse({ choices: [{ index: 0, text: 'café 日本' }] }, '[DONE]'))
    for (let cut = 0; cut <= bytes.length; cut++) {
      const c = new StreamCollector('completions')
      c.push(bytes.subarray(0, cut))
      c.push(bytes.subarray(cut))
      expect((c.result().choices as { text: string }[])[0]?.text).toBe('café 日本')
    }
  })

  it('collects text completions per choice and tool calls by index', () => {
    const t = new StreamCollector('completions')
    t.push(
      sse(
        { choices: [{ index: 1, text: 'b' }] },
        { choices: [{ index: 0, text: 'a', finish_reason: 'length' }] },
        { choices: [{ index: 1, text: 'c', finish_reason: 'stop' }] },
        '[DONE]',
      ),
    )
    expect(t.result().choices).toEqual([
      { index: 0, text: 'a', logprobs: null, finish_reason: 'length' },
      { index: 1, text: 'bc', logprobs: null, finish_reason: 'stop' },
    ])
    const tools = new StreamCollector('chat')
    tools.push(
      sse(
        {
          choices: [{ delta: { tool_calls: [{ index: 0, id: 't1', function: { name: 'get', arguments: '{"a"' } }] } }],
        },
        {
          choices: [
            { delta: { tool_calls: [{ index: 0, function: { arguments: ':1}' } }] }, finish_reason: 'tool_calls' },
          ],
        },
        '[DONE]',
      ),
    )
    expect(tools.result().choices).toEqual([
      {
        index: 0,
        message: {
          role: 'assistant',
          content: null,
          tool_calls: [{ type: 'function', id: 't1', function: { name: 'get', arguments: '{"a":1}' } }],
        },
        finish_reason: 'tool_calls',
      },
    ])
  })

  it('keeps an error the engine sent in the stream, ignores lines that are not events, and bounds what it holds', () => {
    const c = new StreamCollector('chat')
    c.push(': ping\n\ndata: not json\n\n')
    c.push(sse({ error: { message: 'context full', code: 400 } }))
    expect(c.error).toEqual({ message: 'context full', code: 400 })
    expect(c.done).toBe(false)
    const big = new StreamCollector('completions')
    expect(big.push(Buffer.alloc(MAX_COLLECTED_BYTES + 1, 32))).toBe(false)
  })
})
