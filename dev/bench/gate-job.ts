// bench:gate's background Job, in a process of its own as a Job's pod is (started once; one attempt at a time):
// `go <url> <direct|gate> <maxTokens>` on stdin starts BENCH_JOB_CONCURRENCY loops of streamed completions of
// maxTokens each against <url>; `stop` ends them at once — every connection closed, what the engine sees of a pod
// killed by SIGTERM — and prints the tokens the attempt received and the engine's decode step time per request (from
// llama.cpp's own timings, asked for on every chunk). A refused request (503/429) is retried after 100 ms: a harness
// that ignores Retry-After, the worst case for the gate. BENCH_JOB_FRESH=1: every request a prompt of its own.
import { createInterface } from 'node:readline'
import { streamCompletion } from './engine-sim/client.js'
import { BG_BODY, freshPrompt } from './prompts.js'

const concurrency = Number(process.env.BENCH_JOB_CONCURRENCY ?? 16)
const fresh = process.env.BENCH_JOB_FRESH === '1'
let attempt: { ac: AbortController; tokens: number; stepMs: number[]; loops: Promise<void>[] } | undefined

function go(url: string, direct: boolean, maxTokens: number) {
  const ac = new AbortController()
  const a = { ac, tokens: 0, stepMs: [] as number[], loops: [] as Promise<void>[] }
  // Straight to the engine the simulation cannot tell it from foreground otherwise; the gate marks its own.
  const headers = direct ? { 'x-flexinfer-workload-class': 'background' } : undefined
  for (let i = 0; i < concurrency; i++) {
    a.loops.push(
      (async () => {
        while (!ac.signal.aborted) {
          const r = await streamCompletion(url, {
            maxTokens,
            model: process.env.BENCH_MODEL,
            prompt: fresh ? freshPrompt(BG_BODY) : undefined,
            // Decode to maxTokens (a base model may stop early), and the engine's timings on every chunk.
            extra: fresh ? { ignore_eos: true, timings_per_token: true } : undefined,
            headers,
            signal: ac.signal,
            onToken: () => a.tokens++,
          })
          // A request's mean time per generated token, over a few tokens at least: its decode step.
          if (r.timings && r.timings.predicted_n >= 4) a.stepMs.push(r.timings.predicted_per_token_ms)
          if (r.status !== 200 && !ac.signal.aborted) await new Promise((res) => setTimeout(res, 100))
        }
      })(),
    )
  }
  return a
}

process.stdout.write(`${JSON.stringify({ ready: true })}\n`)
for await (const line of createInterface({ input: process.stdin })) {
  const [command, url, mode, maxTokens] = line.trim().split(' ')
  if (command === 'go' && url && !attempt) attempt = go(url, mode === 'direct', Number(maxTokens ?? 512))
  if (command === 'stop' && attempt) {
    const a = attempt
    attempt = undefined
    a.ac.abort()
    await Promise.all(a.loops)
    process.stdout.write(`${JSON.stringify({ tokens: a.tokens, stepMs: a.stepMs })}\n`)
  }
}
