// bench:gate's background Job, in a process of its own as a Job's pod is: BENCH_JOB_CONCURRENCY loops of streamed
// completions against BENCH_JOB_URL from the line "go" on stdin until SIGTERM, which it does not handle gracefully —
// it prints the tokens it received and exits, so its connections close (what the engine sees of a killed pod). A
// refused request (503/429) is retried after 100 ms: a harness that ignores Retry-After, the worst case for the gate.
import { createInterface } from 'node:readline'
import { streamCompletion } from './engine-sim/client.js'

const url = process.env.BENCH_JOB_URL as string
const concurrency = Number(process.env.BENCH_JOB_CONCURRENCY ?? 16)
const maxTokens = Number(process.env.BENCH_JOB_MAX_TOKENS ?? 512)
const headers = process.env.BENCH_JOB_HEADER ? { [process.env.BENCH_JOB_HEADER]: 'background' } : undefined
let tokens = 0
process.on('SIGTERM', () => {
  process.stdout.write(`${JSON.stringify({ tokens })}\n`, () => process.exit(0))
})
process.stdout.write(`${JSON.stringify({ ready: true })}\n`)
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() !== 'go') continue
  for (let i = 0; i < concurrency; i++) {
    void (async () => {
      for (;;) {
        const r = await streamCompletion(url, {
          maxTokens,
          model: process.env.BENCH_MODEL,
          headers,
          onToken: () => tokens++,
        })
        if (r.status !== 200) await new Promise((res) => setTimeout(res, 100))
      }
    })()
  }
}
