// llama.cpp's prompt progress, asked for by the gate and taken back out (cmd/gate/progress.ts): the workload's stream
// is the engine's bytes without the progress events, at any split; a progress event is no token and no part of a
// collected answer; an event too long to be progress is passed on without being held.
import { Readable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { StreamCollector } from '../../cmd/gate/collect.js'
import { isProgress, ProgressFilter, withoutProgress } from '../../cmd/gate/progress.js'
import { TokenCounter } from '../../cmd/gate/tokens.js'

const progress = (processed: number) =>
  `data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion","prompt_progress":{"total":300,"cache":0,"processed":${processed},"time_ms":40}}\n\n`
const token = (text: string) =>
  `data: ${JSON.stringify({ choices: [{ text, index: 0, logprobs: null, finish_reason: null }], object: 'text_completion' })}\n\n`
const engine = [progress(0), progress(256), token('a "prompt_progress": b'), ':\n\n', progress(300), token('é')]
const expected = [token('a "prompt_progress": b'), ':\n\n', token('é'), 'data: [DONE]\n\n'].join('')
const bytes = Buffer.from(`${engine.join('')}data: [DONE]\n\n`)

describe('prompt progress (llamacpp profile)', () => {
  it('takes the progress events out of the stream, at any split, and leaves every other byte', () => {
    for (let cut = 0; cut <= bytes.length; cut++) {
      const f = new ProgressFilter()
      const out = Buffer.concat([f.push(bytes.subarray(0, cut)), f.push(bytes.subarray(cut)), f.end()])
      expect(out.toString()).toBe(expected)
    }
  })

  it('as a stream between the engine and the workload', async () => {
    const chunks: Buffer[] = []
    for await (const c of Readable.from([bytes.subarray(0, 100), bytes.subarray(100)]).pipe(withoutProgress()))
      chunks.push(c as Buffer)
    expect(Buffer.concat(chunks).toString()).toBe(expected)
  })

  it('passes an event too long to be progress on as it comes, and filters after it', () => {
    const f = new ProgressFilter()
    const long = token('x'.repeat(70 * 1024))
    const first = f.push(Buffer.from(long.slice(0, 66 * 1024)))
    expect(first.length).toBe(66 * 1024)
    const rest = f.push(Buffer.from(long.slice(66 * 1024) + progress(1) + token('y')))
    expect(Buffer.concat([first, rest]).toString()).toBe(long + token('y'))
  })

  it('is no token and no part of a collected answer', () => {
    expect(isProgress(progress(1).slice(6))).toBe(true)
    expect(isProgress(token('"prompt_progress": ').slice(6))).toBe(false)
    const counter = new TokenCounter()
    counter.push(bytes)
    expect([counter.tokens, counter.done]).toEqual([2, true])
    const c = new StreamCollector('completions')
    c.push(bytes)
    expect((c.result().choices as { text: string }[])[0]?.text).toBe('a "prompt_progress": bé')
  })
})
