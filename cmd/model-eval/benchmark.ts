// One benchmark iteration: BATCH_SIZE streamed requests kept in flight for at least MIN_DURATION (each worker sends
// its next request as the last one ends, and none starts after the duration), measured per request: the time to
// the first token, the whole latency, the output tokens. Samples are bounded (a reservoir) so an iteration's memory
// is fixed whatever its length; only the summary is recorded.
import { type OpenAiClient, WorkloadError } from './openai.js'
import type { GauntletApi } from './settings.js'

export interface IterationResult {
  iteration: number
  concurrency: number
  requests: number
  failed: number
  durationMs: number
  outputTokens: number
  outputTokensPerSecond: number
  ttftMs: { p50: number; p99: number }
  latencyMs: { p50: number; p99: number }
  /** The first failures, by kind, with one message each (unreachable, not served, malformed …). */
  errors: Record<string, { count: number; message: string }>
}

export const MAX_SAMPLES = 4096
const BENCH_PROMPT = 'Write a short paragraph about the history of the printing press.'
const BENCH_COMPLETION_PROMPT = 'The history of the printing press begins'

/** The q-quantile (0..1) of the values by nearest rank; 0 for none. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return 0
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
  return sorted[rank] as number
}

class Reservoir {
  readonly values: number[] = []
  private seen = 0
  add(v: number) {
    this.seen++
    if (this.values.length < MAX_SAMPLES) this.values.push(v)
    else {
      const i = Math.floor(Math.random() * this.seen)
      if (i < MAX_SAMPLES) this.values[i] = v
    }
  }
}

export async function runIteration(
  client: OpenAiClient,
  opts: {
    api: GauntletApi
    model: string
    iteration: number
    concurrency: number
    minDurationMs: number
    maxTokens: number
    signal: AbortSignal
  },
): Promise<IterationResult> {
  const ttft = new Reservoir()
  const latency = new Reservoir()
  const errors: IterationResult['errors'] = {}
  let requests = 0
  let failed = 0
  let tokens = 0
  const started = performance.now()
  const prompt = opts.api === 'chat' ? BENCH_PROMPT : BENCH_COMPLETION_PROMPT
  const worker = async () => {
    while (performance.now() - started < opts.minDurationMs && !opts.signal.aborted) {
      requests++
      try {
        const c = await client.stream(opts.api, opts.model, prompt, opts.maxTokens)
        ttft.add(c.ttftMs)
        latency.add(c.latencyMs)
        tokens += c.outputTokens
      } catch (err) {
        if (opts.signal.aborted) return
        failed++
        const kind = err instanceof WorkloadError ? err.kind : 'error'
        const e = errors[kind]
        if (e) e.count++
        else errors[kind] = { count: 1, message: String((err as Error).message).slice(0, 300) }
        // The endpoint is gone or does not serve the model: more requests only say it again.
        if (kind === 'unreachable' || kind === 'not-served') return
      }
    }
  }
  await Promise.all(Array.from({ length: opts.concurrency }, worker))
  if (opts.signal.aborted) throw new WorkloadError('aborted', 'the attempt is stopping')
  const durationMs = performance.now() - started
  const round = (n: number) => Math.round(n * 10) / 10
  return {
    iteration: opts.iteration,
    concurrency: opts.concurrency,
    requests,
    failed,
    durationMs: Math.round(durationMs),
    outputTokens: tokens,
    outputTokensPerSecond: round(tokens / (durationMs / 1000)),
    ttftMs: { p50: round(quantile(ttft.values, 0.5)), p99: round(quantile(ttft.values, 0.99)) },
    latencyMs: { p50: round(quantile(latency.values, 0.5)), p99: round(quantile(latency.values, 0.99)) },
    errors,
  }
}
