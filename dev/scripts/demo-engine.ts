// `npm run demo` on real tokens, when the test environment's engine is built: llama-server serving Gemma 3 270M
// (dev/bench/gate-engine.ts), each attempt's workload as a local process (there is no kubelet: the Job's pod is
// played) sending its requests through the attempt's gate (cmd/gate, in this process, closed by demand's preempt
// subject as in the pod), and the timeline's engine lines read from the engine itself: background tokens/s from the
// tokens its slots decoded (/slots), the foreground request's time to first token, and how long after the gate
// closed the engine's background slots were idle.
import { type ChildProcess, spawn } from 'node:child_process'
import { startGate } from '../../cmd/gate/index.js'
import { epochMs } from '../../cmd/gate/proxy.js'
import type { Logger } from '../../pkg/observability/log.js'
import { repoRoot } from '../../test/env/binaries.js'
import { streamCompletion } from '../bench/engine-sim/client.js'
import { backgroundIdleAt, builtEngine, startRealEngine } from '../bench/gate-engine.js'
import { FG_BODY, freshPrompt } from '../bench/prompts.js'

const FG_MAX_TOKENS = 8
const BG_MAX_TOKENS = 256
const isBackground = (nPredict: number) => nPredict !== FG_MAX_TOKENS

export interface DemoEngine {
  /** The attempt's pod started: its gate, then its workload through it. */
  startAttempt(job: string): Promise<void>
  /** The attempt's pod gone (its Job deleted, or finished): the workload's connections close, the gate stops. */
  stopAttempt(): Promise<void>
  /** A real foreground request, straight to the engine; its TTFT printed. */
  foreground(): Promise<void>
  /** Tokens the gates counted over the demo, and the foreground TTFTs. */
  totals(): { completed: number; discarded: number; ttftMs: number[] }
  stop(): Promise<void>
}

interface Slot {
  id: number
  id_task?: number
  is_processing: boolean
  params?: { n_predict?: number }
  next_token?: { n_decoded?: number }[]
}

/** The engine when it is built, else undefined (the demo runs without real tokens). */
export async function startDemoEngine(opts: {
  natsUrl: string
  namespace: string
  model: string
  log: Logger
  print: (line: string) => void
  at: () => string
}): Promise<DemoEngine | undefined> {
  const binaries = builtEngine()
  if (!binaries) return undefined
  const { engine, description } = await startRealEngine(binaries)
  const url = description.url
  opts.print(`Engine: ${description.build} serving ${description.model} (${description.model_file}) at ${url}`)
  const line = (text: string) => opts.print(`${opts.at()}  ${'engine'.padEnd(15)} ${text}`)
  let attempt: { gate: Awaited<ReturnType<typeof startGate>>; workload: ChildProcess } | undefined
  const totals = { completed: 0, discarded: 0, ttftMs: [] as number[] }

  // Background tokens/s from the engine's own count: tokens each background slot decoded since the last look.
  const seen = new Map<number, { task?: number; decoded: number }>()
  let lastAt = epochMs()
  let sampling = true
  const sampler = (async () => {
    while (sampling) {
      await new Promise((r) => setTimeout(r, 1_000))
      try {
        const r = await fetch(`${url}/slots`, { signal: AbortSignal.timeout(2_000) })
        const slots = (await r.json()) as Slot[]
        const now = epochMs()
        let tokens = 0
        let busy = 0
        for (const s of slots) {
          const decoded = s.next_token?.[0]?.n_decoded ?? 0
          const before = seen.get(s.id)
          seen.set(s.id, { task: s.id_task, decoded })
          if (!isBackground(s.params?.n_predict ?? -1)) continue
          if (s.is_processing) busy++
          tokens +=
            before && before.task === s.id_task ? Math.max(0, decoded - before.decoded) : s.is_processing ? decoded : 0
        }
        const rate = tokens / ((now - lastAt) / 1000)
        lastAt = now
        if (attempt || tokens > 0) line(`background ${rate.toFixed(0)} tokens/s on ${busy} of ${slots.length} slots`)
      } catch {}
    }
  })()

  const stopAttempt = async () => {
    const a = attempt
    if (!a) return
    attempt = undefined
    a.workload.kill('SIGTERM')
    await a.gate.stop()
    // Counted once every request the stop cut has ended (their upstream connections close a moment after).
    for (let i = 0; i < 50 && a.gate.gate.inFlight > 0; i++) await new Promise((r) => setTimeout(r, 20))
    const { tokens } = a.gate.gate.snapshot()
    totals.completed += tokens.completed
    totals.discarded += tokens.discarded
    line(`the attempt's gate counted ${tokens.completed} tokens completed, ${tokens.discarded} thrown away`)
  }
  return {
    stopAttempt,
    async startAttempt(job) {
      if (attempt) return
      const gate = await startGate(
        {
          natsUrl: opts.natsUrl,
          natsCredentials: {},
          upstream: url,
          namespace: opts.namespace,
          model: opts.model,
          job,
          engine: 'llamacpp',
          maxInFlight: 2,
          port: 0,
          host: '127.0.0.1',
          natsBoundMs: 2_000,
        },
        opts.log,
      )
      for (let i = 0; i < 100 && gate.gate.state !== 'open'; i++) await new Promise((r) => setTimeout(r, 50))
      const workload = spawn(process.execPath, ['--import', 'tsx', 'dev/bench/gate-job.ts'], {
        cwd: repoRoot,
        env: { ...process.env, BENCH_JOB_CONCURRENCY: '2', BENCH_JOB_FRESH: '1', BENCH_MODEL: description.model },
        stdio: ['pipe', 'ignore', 'inherit'],
      })
      workload.stdin?.write(`go ${gate.url} gate ${BG_MAX_TOKENS}\n`)
      attempt = { gate, workload }
      line(`${job}'s workload runs through its gate (${gate.gate.state}), 2 requests at a time`)
    },
    async foreground() {
      const sentAt = epochMs()
      const watching = attempt ? backgroundIdleAt(url, isBackground, 3_000) : undefined
      const r = await streamCompletion(url, {
        maxTokens: FG_MAX_TOKENS,
        model: description.model,
        prompt: freshPrompt(FG_BODY),
        extra: { ignore_eos: true },
      })
      if (r.ttftMs !== undefined) totals.ttftMs.push(r.ttftMs)
      const prompt = r.timings ? `, its prompt ${r.timings.prompt_ms.toFixed(0)} ms in the engine` : ''
      line(`foreground request: first token after ${r.ttftMs?.toFixed(0) ?? '—'} ms${prompt}`)
      const idle = await watching
      const closed = attempt?.gate.gate.lastPreemption
      // Said for the request whose preempt closed the gate; a later one finds it closed already.
      if (idle?.idleAt && closed && closed.signalAt >= sentAt)
        line(
          `background yielded: gate closed ${(closed.signalAt - sentAt).toFixed(0)} ms after the request, ` +
            `every background slot idle ${(idle.idleAt - closed.signalAt).toFixed(0)} ms after that`,
        )
    },
    totals: () => ({ ...totals, ttftMs: [...totals.ttftMs] }),
    async stop() {
      sampling = false
      await stopAttempt()
      await sampler
      await engine.stop()
    },
  }
}
