// One streamed completion against an OpenAI-compatible server (the simulated engine, a gate, or a real engine): what
// the benchmark times and the tests assert on — its status, time to the first token, tokens received, and whether
// the stream was cut (the connection closed before [DONE]).
export interface StreamOutcome {
  status: number
  ttftMs?: number
  tokens: number
  cut: boolean
  /** llama.cpp's own timings of the request (its last `timings` object seen: every chunk with timings_per_token). */
  timings?: EngineTimings
}

/** The fields of llama.cpp's `timings` read here (tools/server: server_slot_stats::to_json). */
export interface EngineTimings {
  prompt_n: number
  prompt_ms: number
  predicted_n: number
  predicted_ms: number
  predicted_per_token_ms: number
}

const TIMINGS = /"timings":(\{[^{}]*\})/g

function lastTimings(text: string): EngineTimings | undefined {
  let last: string | undefined
  for (const m of text.matchAll(TIMINGS)) last = m[1]
  if (!last) return undefined
  try {
    return JSON.parse(last) as EngineTimings
  } catch {
    return undefined
  }
}

export async function streamCompletion(
  url: string,
  opts: {
    maxTokens: number
    model?: string
    prompt?: string
    signal?: AbortSignal
    headers?: Record<string, string>
    /** More body fields (llama.cpp's ignore_eos, timings_per_token). */
    extra?: Record<string, unknown>
    onToken?: () => void
  },
): Promise<StreamOutcome> {
  const start = performance.now()
  let tokens = 0
  let ttftMs: number | undefined
  let timings: EngineTimings | undefined
  try {
    const r = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...opts.headers },
      body: JSON.stringify({
        model: opts.model ?? 'sim',
        prompt: opts.prompt ?? 'x'.repeat(400),
        max_tokens: opts.maxTokens,
        stream: true,
        ...opts.extra,
      }),
      signal: opts.signal,
    })
    if (r.status !== 200 || !r.body) {
      await r.body?.cancel()
      return { status: r.status, tokens: 0, cut: false }
    }
    const decoder = new TextDecoder()
    let done = false
    for await (const chunk of r.body) {
      const text = decoder.decode(chunk as Uint8Array)
      if (text.includes('[DONE]')) done = true
      if (text.includes('"timings"')) timings = lastTimings(text) ?? timings
      const n = text.split('data: ').length - 1 - (text.includes('[DONE]') ? 1 : 0)
      if (n > 0) {
        ttftMs ??= performance.now() - start
        tokens += n
        for (let i = 0; i < n; i++) opts.onToken?.()
      }
    }
    return { status: 200, ttftMs, tokens, cut: !done, timings }
  } catch {
    return { status: 200, ttftMs, tokens, cut: true, timings }
  }
}

/** How a stream ended, for assertions: its refusal status, 'cut' or 'completed'. */
export const ending = (o: StreamOutcome) => (o.status !== 200 ? o.status : o.cut ? 'cut' : 'completed')
