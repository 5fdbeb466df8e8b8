// A non-streaming OpenAI request sent to the engine as a stream, and the stream collected back into the one JSON
// answer the workload asked for. The gate does this where the engine notices a closed connection only while it is
// writing to it: llama.cpp's server checks a waiting non-streaming request's connection only after a second with no
// result for any request (tools/server/server-queue.cpp: recv_with_timeout restarts its wait on every result, and
// server_response_reader::next asks should_stop only when that wait times out), so beside a streaming foreground
// request a disconnected background request decodes on to its end. A streamed one fails at its next write — a token,
// or in its prompt the progress event after the chunk in flight (progress.ts) — and is cancelled at a step boundary.
//
// What is collected: per choice, the text (completions) or the message's role, content, reasoning_content and
// tool_calls (chat), the finish_reason; the id, model, created and system_fingerprint; the usage (asked for with
// stream_options.include_usage) and llama.cpp's timings. Anything else in the chunks is left out.

import { isProgress } from './progress.js'
import { SseDataReader } from './sse.js'

/** Chat completions and text completions: the paths whose non-streaming requests are collected. */
export function collectable(path: string): 'chat' | 'completions' | undefined {
  const p = path.split('?')[0] ?? ''
  if (p.endsWith('/chat/completions')) return 'chat'
  if (p.endsWith('/completions')) return 'completions'
  return undefined
}

/** The request body, streamed with usage; undefined when the workload asked for a stream itself. */
export function streamedBody(body: Record<string, unknown>): Record<string, unknown> | undefined {
  if (body.stream === true) return undefined
  const options = body.stream_options && typeof body.stream_options === 'object' ? body.stream_options : {}
  return { ...body, stream: true, stream_options: { ...options, include_usage: true } }
}

interface ToolCall {
  id?: string
  type?: string
  function: { name: string; arguments: string }
}

interface Choice {
  index: number
  text: string
  role?: string
  content?: string
  reasoning?: string
  toolCalls: ToolCall[]
  finishReason: string | null
}

type Json = Record<string, unknown>
const str = (v: unknown) => (typeof v === 'string' ? v : undefined)
const obj = (v: unknown): Json | undefined =>
  v && typeof v === 'object' && !Array.isArray(v) ? (v as Json) : undefined

/** Most choices one answer may carry (`n`), and the longest answer collected: both bound the memory held. */
const MAX_CHOICES = 128
export const MAX_COLLECTED_BYTES = 16 * 1024 * 1024

export class StreamCollector {
  private bytes = 0
  private readonly reader = new SseDataReader((payload) => this.data(payload), MAX_COLLECTED_BYTES)
  private readonly choices = new Map<number, Choice>()
  private head: Json = {}
  private usage?: unknown
  private timings?: unknown
  /** An error the engine sent inside the stream (its `error` object). */
  error?: Json
  done = false

  constructor(private readonly kind: 'chat' | 'completions') {}

  /** Feeds bytes of the event stream; false once the answer grew past MAX_COLLECTED_BYTES. */
  push(chunk: Buffer | string): boolean {
    this.bytes += chunk.length
    if (this.bytes > MAX_COLLECTED_BYTES) return false
    this.reader.push(chunk)
    return true
  }

  private data(data: string) {
    if (data === '[DONE]') {
      this.done = true
      return
    }
    // The prompt progress the gate asked for (progress.ts): no part of the answer.
    if (isProgress(data)) return
    let event: Json | undefined
    try {
      event = obj(JSON.parse(data))
    } catch {
      return
    }
    if (!event) return
    const error = obj(event.error)
    if (error) {
      this.error = error
      return
    }
    for (const key of ['id', 'model', 'created', 'system_fingerprint']) {
      if (event[key] !== undefined && this.head[key] === undefined) this.head[key] = event[key]
    }
    if (event.usage) this.usage = event.usage
    if (event.timings) this.timings = event.timings
    const choices = Array.isArray(event.choices) ? event.choices : []
    for (const raw of choices) {
      const c = obj(raw)
      if (!c) continue
      const index = typeof c.index === 'number' ? c.index : 0
      let choice = this.choices.get(index)
      if (!choice) {
        if (this.choices.size >= MAX_CHOICES) continue
        choice = { index, text: '', toolCalls: [], finishReason: null }
        this.choices.set(index, choice)
      }
      if (typeof c.finish_reason === 'string') choice.finishReason = c.finish_reason
      const text = str(c.text)
      if (text) choice.text += text
      const delta = obj(c.delta)
      if (!delta) continue
      const role = str(delta.role)
      if (role) choice.role = role
      const content = str(delta.content)
      if (content) choice.content = (choice.content ?? '') + content
      const reasoning = str(delta.reasoning_content)
      if (reasoning) choice.reasoning = (choice.reasoning ?? '') + reasoning
      for (const rawCall of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
        const call = obj(rawCall)
        if (!call) continue
        const at = typeof call.index === 'number' ? call.index : choice.toolCalls.length
        if (at < 0 || at >= MAX_CHOICES) continue
        const fn = obj(call.function)
        const into = choice.toolCalls[at] ?? { function: { name: '', arguments: '' } }
        choice.toolCalls[at] = into
        if (str(call.id)) into.id = str(call.id)
        if (str(call.type)) into.type = str(call.type)
        into.function.name += str(fn?.name) ?? ''
        into.function.arguments += str(fn?.arguments) ?? ''
      }
    }
  }

  /** The non-streaming answer, in the shape the OpenAI API gives one. */
  result(): Json {
    const choices = [...this.choices.values()]
      .sort((a, b) => a.index - b.index)
      .map((c) =>
        this.kind === 'completions'
          ? { index: c.index, text: c.text, logprobs: null, finish_reason: c.finishReason }
          : {
              index: c.index,
              message: {
                role: c.role ?? 'assistant',
                content: c.content ?? (c.toolCalls.length ? null : ''),
                ...(c.reasoning !== undefined ? { reasoning_content: c.reasoning } : {}),
                ...(c.toolCalls.length
                  ? { tool_calls: c.toolCalls.filter(Boolean).map((t) => ({ type: 'function', ...t })) }
                  : {}),
              },
              finish_reason: c.finishReason,
            },
      )
    return {
      ...this.head,
      object: this.kind === 'chat' ? 'chat.completion' : 'text_completion',
      choices,
      ...(this.usage !== undefined ? { usage: this.usage } : {}),
      ...(this.timings !== undefined ? { timings: this.timings } : {}),
    }
  }
}
