// One streamed completion against an OpenAI-compatible server (the simulated engine, a gate, or a real engine): what
// the benchmark times and the tests assert on — its status, time to the first token, tokens received, and whether
// the stream was cut (the connection closed before [DONE]).
export interface StreamOutcome {
  status: number
  ttftMs?: number
  tokens: number
  cut: boolean
}

export async function streamCompletion(
  url: string,
  opts: {
    maxTokens: number
    model?: string
    prompt?: string
    signal?: AbortSignal
    headers?: Record<string, string>
    onToken?: () => void
  },
): Promise<StreamOutcome> {
  const start = performance.now()
  let tokens = 0
  let ttftMs: number | undefined
  try {
    const r = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...opts.headers },
      body: JSON.stringify({
        model: opts.model ?? 'sim',
        prompt: opts.prompt ?? 'x'.repeat(400),
        max_tokens: opts.maxTokens,
        stream: true,
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
      const n = text.split('data: ').length - 1 - (text.includes('[DONE]') ? 1 : 0)
      if (n > 0) {
        ttftMs ??= performance.now() - start
        tokens += n
        for (let i = 0; i < n; i++) opts.onToken?.()
      }
    }
    return { status: 200, ttftMs, tokens, cut: !done }
  } catch {
    return { status: 200, ttftMs, tokens, cut: true }
  }
}

/** How a stream ended, for assertions: its refusal status, 'cut' or 'completed'. */
export const ending = (o: StreamOutcome) => (o.status !== 200 ? o.status : o.cut ? 'cut' : 'completed')
