// bench:gate's background Job, in a process of its own as a Job's pod is (started once; one attempt at a time):
// `go <url>` on stdin starts BENCH_JOB_CONCURRENCY loops of streamed completions against <url>; `stop` ends them at
// once — every connection closed, what the engine sees of a pod killed by SIGTERM — and prints the tokens the attempt
// received. A refused request (503/429) is retried after 100 ms: a harness that ignores Retry-After, the worst case
// for the gate.
import { createInterface } from 'node:readline'
import { streamCompletion } from './engine-sim/client.js'

const concurrency = Number(process.env.BENCH_JOB_CONCURRENCY ?? 16)
const maxTokens = Number(process.env.BENCH_JOB_MAX_TOKENS ?? 512)
let attempt: { ac: AbortController; tokens: number; loops: Promise<void>[] } | undefined

function go(url: string, direct: boolean) {
  const ac = new AbortController()
  const a = { ac, tokens: 0, loops: [] as Promise<void>[] }
  // Straight to the engine the simulation cannot tell it from foreground otherwise; the gate marks its own.
  const headers = direct ? { 'x-flexinfer-workload-class': 'background' } : undefined
  for (let i = 0; i < concurrency; i++) {
    a.loops.push(
      (async () => {
        while (!ac.signal.aborted) {
          const r = await streamCompletion(url, {
            maxTokens,
            model: process.env.BENCH_MODEL,
            headers,
            signal: ac.signal,
            onToken: () => a.tokens++,
          })
          if (r.status !== 200 && !ac.signal.aborted) await new Promise((res) => setTimeout(res, 100))
        }
      })(),
    )
  }
  return a
}

process.stdout.write(`${JSON.stringify({ ready: true })}\n`)
for await (const line of createInterface({ input: process.stdin })) {
  const [command, url, mode] = line.trim().split(' ')
  if (command === 'go' && url && !attempt) attempt = go(url, mode === 'direct')
  if (command === 'stop' && attempt) {
    const a = attempt
    attempt = undefined
    a.ac.abort()
    await Promise.all(a.loops)
    process.stdout.write(`${JSON.stringify({ tokens: a.tokens })}\n`)
  }
}
