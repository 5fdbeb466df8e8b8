// The OpenAI-compatible side of model-eval: every request marked background (the header the gateway clients and the
// gate read: clients/ts/src/contract.ts), a deadline on each, bounded retries on 429/503 that wait what the server's
// Retry-After asks (capped), and every failure named by what it means for the result: an endpoint that cannot be
// reached, a model it does not serve, an answer that is not what the API promises. An abort (SIGTERM) ends a
// request at once and is never retried.
import { GATE_STATE_HEADER } from '../../pkg/core/gate.js'
import { gateClosed } from './gate-profile.js'
import type { GauntletApi } from './settings.js'

export const WORKLOAD_CLASS_HEADER = 'x-flexinfer-workload-class'

export type FailureKind = 'unreachable' | 'not-served' | 'malformed' | 'refused' | 'timeout' | 'aborted'

export class WorkloadError extends Error {
  constructor(
    readonly kind: FailureKind,
    message: string,
  ) {
    super(message)
    this.name = 'WorkloadError'
  }
}

export interface ClientOptions {
  baseUrl: string
  apiKey?: string
  workloadClass: string
  requestTimeoutMs: number
  maxRetries: number
  /** The longest Retry-After honoured; a longer one waits this long (a preempted gate answers 503 for a while). */
  maxRetryWaitMs?: number
  /** Ends every request: the attempt is stopping. */
  signal: AbortSignal
  /**
   * The background gate is in front of the endpoint: a failure while it says it is closed is the attempt's end (a
   * preemption), reported through onGateClosed and thrown as `aborted`, never recorded as the item's result.
   */
  gate?: { onGateClosed(): void }
  fetch?: typeof fetch
}

export interface Completion {
  text: string
  outputTokens: number
  /** ms from sending to the first content (streamed requests), else to the whole answer. */
  ttftMs: number
  latencyMs: number
}

export const DEFAULT_MAX_RETRY_WAIT_MS = 10_000
const MAX_BODY_BYTES = 4 << 20

/** Retry-After in ms: seconds or an HTTP date; absent or unreadable: undefined. */
export function retryAfterMs(value: string | null, now = Date.now()): number | undefined {
  if (!value) return undefined
  const seconds = Number(value.trim())
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const at = Date.parse(value)
  return Number.isNaN(at) ? undefined : Math.max(0, at - now)
}

export class OpenAiClient {
  private readonly fetch: typeof fetch
  constructor(private readonly opts: ClientOptions) {
    this.fetch = opts.fetch ?? fetch
  }

  /** GET a JSON path of the endpoint (`/models`, or `/props` beside `/v1`). */
  getJson(path: string, { root = false } = {}): Promise<unknown> {
    return this.guarded(async () => {
      const base = root ? this.opts.baseUrl.replace(/\/v1$/, '') : this.opts.baseUrl
      const res = await this.send(`${base}${path}`, { method: 'GET' })
      return this.readJson(res, path)
    })
  }

  /** One deterministic completion (temperature 0) over `api`, waited for whole. */
  complete(api: GauntletApi, model: string, prompt: string, maxTokens: number): Promise<Completion> {
    return this.guarded(() => this.completeOnce(api, model, prompt, maxTokens))
  }

  /** One streamed completion: the time to its first content and the tokens (chunks, or the usage if sent). */
  stream(api: GauntletApi, model: string, prompt: string, maxTokens: number): Promise<Completion> {
    return this.guarded(() => this.streamOnce(api, model, prompt, maxTokens))
  }

  /** A failure through a gate that has closed is the attempt ending: `aborted`, and the owner is told. */
  private async guarded<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call()
    } catch (err) {
      if (!this.opts.gate || (err instanceof WorkloadError && err.kind === 'aborted')) throw err
      if (!(await gateClosed(this.opts.baseUrl, this.fetch))) throw err
      this.opts.gate.onGateClosed()
      throw new WorkloadError('aborted', 'the background gate closed: foreground has the model')
    }
  }

  private async completeOnce(api: GauntletApi, model: string, prompt: string, maxTokens: number): Promise<Completion> {
    const started = performance.now()
    const res = await this.send(...this.request(api, model, prompt, maxTokens, false))
    const body = (await this.readJson(res, api)) as Record<string, unknown>
    const choice = (body.choices as Record<string, unknown>[] | undefined)?.[0]
    const text = api === 'chat' ? (choice?.message as { content?: unknown } | undefined)?.content : choice?.text
    if (typeof text !== 'string')
      throw new WorkloadError(
        'malformed',
        `the ${api} answer has no ${api === 'chat' ? 'choices[0].message.content' : 'choices[0].text'}`,
      )
    const usage = body.usage as { completion_tokens?: unknown } | undefined
    const latencyMs = performance.now() - started
    return {
      text,
      outputTokens: typeof usage?.completion_tokens === 'number' ? usage.completion_tokens : 0,
      ttftMs: latencyMs,
      latencyMs,
    }
  }

  private async streamOnce(api: GauntletApi, model: string, prompt: string, maxTokens: number): Promise<Completion> {
    const started = performance.now()
    const res = await this.send(...this.request(api, model, prompt, maxTokens, true))
    if (!res.body) throw new WorkloadError('malformed', 'a streamed answer without a body')
    let ttftMs: number | undefined
    let chunks = 0
    let usageTokens: number | undefined
    let text = ''
    let buffered = ''
    const decoder = new TextDecoder()
    const onEvent = (data: string) => {
      if (data === '[DONE]') return
      let event: Record<string, unknown>
      try {
        event = JSON.parse(data)
      } catch {
        throw new WorkloadError('malformed', `a stream event that is not JSON: ${data.slice(0, 80)}`)
      }
      const choice = (event.choices as Record<string, unknown>[] | undefined)?.[0]
      const piece = api === 'chat' ? (choice?.delta as { content?: unknown } | undefined)?.content : choice?.text
      if (typeof piece === 'string' && piece.length > 0) {
        ttftMs ??= performance.now() - started
        chunks++
        if (text.length < 1024) text += piece
      }
      const usage = event.usage as { completion_tokens?: unknown } | undefined
      if (typeof usage?.completion_tokens === 'number') usageTokens = usage.completion_tokens
    }
    try {
      for await (const part of res.body as AsyncIterable<Uint8Array>) {
        buffered += decoder.decode(part, { stream: true })
        if (buffered.length > MAX_BODY_BYTES) throw new WorkloadError('malformed', 'a stream event larger than 4 MiB')
        let end = buffered.indexOf('\n\n')
        while (end >= 0) {
          for (const line of buffered.slice(0, end).split('\n'))
            if (line.startsWith('data:')) onEvent(line.slice(5).trim())
          buffered = buffered.slice(end + 2)
          end = buffered.indexOf('\n\n')
        }
      }
    } catch (err) {
      throw this.explain(err, api)
    }
    if (ttftMs === undefined) throw new WorkloadError('malformed', `the ${api} stream ended without any content`)
    return { text, outputTokens: usageTokens ?? chunks, ttftMs, latencyMs: performance.now() - started }
  }

  private request(
    api: GauntletApi,
    model: string,
    prompt: string,
    maxTokens: number,
    stream: boolean,
  ): [string, RequestInit] {
    const body: Record<string, unknown> = { model, max_tokens: maxTokens, temperature: 0, seed: 0, stream }
    if (api === 'chat') body.messages = [{ role: 'user', content: prompt }]
    else body.prompt = prompt
    if (stream) body.stream_options = { include_usage: true }
    return [
      `${this.opts.baseUrl}${api === 'chat' ? '/chat/completions' : '/completions'}`,
      { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } },
    ]
  }

  /** The request with its deadline and the bounded retries on 429/503; a non-2xx left over is an WorkloadError. */
  private async send(url: string, init: RequestInit): Promise<Response> {
    const path = new URL(url).pathname
    for (let attempt = 0; ; attempt++) {
      if (this.opts.signal.aborted) throw new WorkloadError('aborted', 'the attempt is stopping')
      const signal = AbortSignal.any([this.opts.signal, AbortSignal.timeout(this.opts.requestTimeoutMs)])
      const headers: Record<string, string> = {
        ...(init.headers as Record<string, string>),
        [WORKLOAD_CLASS_HEADER]: this.opts.workloadClass,
      }
      if (this.opts.apiKey) headers.authorization = `Bearer ${this.opts.apiKey}`
      let res: Response
      try {
        res = await this.fetch(url, { ...init, headers, signal })
      } catch (err) {
        throw this.explain(err, path)
      }
      if (res.ok) return res
      const detail = (await res.text().catch(() => '')).slice(0, 300)
      // A closed gate does not reopen: waiting out its Retry-After would only delay the attempt's end.
      const closed = res.headers.get(GATE_STATE_HEADER) === 'closed'
      if (!closed && (res.status === 429 || res.status === 503) && attempt < this.opts.maxRetries) {
        const wait = Math.min(
          retryAfterMs(res.headers.get('retry-after')) ?? 250 * 2 ** attempt,
          this.opts.maxRetryWaitMs ?? DEFAULT_MAX_RETRY_WAIT_MS,
        )
        await this.sleep(wait)
        continue
      }
      if (res.status === 404 && /model/i.test(detail))
        throw new WorkloadError('not-served', `${path}: ${res.status} the endpoint does not serve the model: ${detail}`)
      throw new WorkloadError(
        'refused',
        `${path}: HTTP ${res.status}${attempt ? ` after ${attempt} retries` : ''}: ${detail}`,
      )
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer)
        this.opts.signal.removeEventListener('abort', done)
        resolve()
      }
      const timer = setTimeout(done, ms)
      this.opts.signal.addEventListener('abort', done, { once: true })
    })
  }

  private async readJson(res: Response, what: string): Promise<unknown> {
    let text: string
    try {
      text = await res.text()
    } catch (err) {
      throw this.explain(err, what)
    }
    try {
      return JSON.parse(text)
    } catch {
      throw new WorkloadError('malformed', `${what}: the answer is not JSON: ${text.slice(0, 120)}`)
    }
  }

  private explain(err: unknown, what: string): WorkloadError {
    if (err instanceof WorkloadError) return err
    if (this.opts.signal.aborted) return new WorkloadError('aborted', 'the attempt is stopping')
    const e = err as { name?: string; message?: string; cause?: { code?: string; message?: string } }
    if (e.name === 'TimeoutError' || e.name === 'AbortError')
      return new WorkloadError('timeout', `${what}: no answer within ${this.opts.requestTimeoutMs} ms`)
    const cause = e.cause?.code ?? e.cause?.message ?? e.message
    return new WorkloadError('unreachable', `${what}: ${this.opts.baseUrl} cannot be reached (${cause})`)
  }
}
