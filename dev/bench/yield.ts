// `npm run bench:yield`: how long the real engine (llama-server, Gemma 3 270M, test/env/engine.ts) goes on with
// background work after its connections close, per prompt-chunk setting (-b/-ub) — the yield bound of the gate —
// and what a smaller chunk costs a foreground request with a long prompt.
//
// One llama-server per arm's batch size, all started at once and used in turn (the arms interleaved, block after
// block, in a random order), so a shared machine's load falls on every arm alike. A trial: YIELD_BG streamed
// background requests (fresh prompts, n_predict YIELD_BG_MAX_TOKENS), all closed at a random instant in the first
// YIELD_SPREAD_MS (so some close while a prompt is processed, some while tokens are decoded) → every background slot
// idle on /slots, polled back to back. The closing is what the gate does when a preempt reaches it, without the
// gate's own microseconds. A trial is `prompt` when some stream had no token yet when it was closed. The step times
// are the engine's own: the decode step (predicted_per_token_ms of the background streams, YIELD_BG slots decoding)
// and the prompt chunk (prompt_ms of the long foreground prompt over its chunks). Then, on the idle engine, one
// foreground request with a long fresh prompt (about YIELD_FG_WORDS words): its TTFT and prompt_ms.
// An arm `<batch>p` also asks for llama.cpp's return_progress: a streamed progress chunk after every prompt chunk.
// An arm `<batch>k<K>` drives each background stream as a chain of K-token requests instead (llama.cpp's /completion
// with the prompt as token ids, so each piece reuses its slot's cached prefix): closing it stops the chain and cuts
// the piece in flight, which holds at most K steps of work. Every arm reports the background tokens/s it got
// before the close (bg_tokens_per_s), the price of a mechanism beside its yield.
// Prints the load average with the figures; one JSON object on the last line, also in dev/bench/results/yield-latest.json.
import { mkdirSync, writeFileSync } from 'node:fs'
import { loadavg } from 'node:os'
import { join } from 'node:path'
import { epochMs } from '../../cmd/gate/proxy.js'
import { type EngineOnly, engineMetrics, startEngine } from '../../test/env/engine.js'
import { type EngineTimings, type StreamOutcome, streamCompletion } from './engine-sim/client.js'
import { backgroundIdleAt, builtEngine, drained } from './gate-engine.js'
import { percentile } from './percentile.js'
import { BG_BODY, freshPrompt } from './prompts.js'
import { envNumber as num, seededRandom } from './run-settings.js'

const repoRoot = join(import.meta.dirname, '../..')
const quick = process.argv.includes('--quick')
const cfg = {
  blocks: num('YIELD_BLOCKS', quick ? 2 : 15),
  bg: num('YIELD_BG', 4),
  bgMaxTokens: num('YIELD_BG_MAX_TOKENS', 512),
  spreadMs: num('YIELD_SPREAD_MS', 900),
  fgWords: num('YIELD_FG_WORDS', 700),
  fgMaxTokens: num('YIELD_FG_MAX_TOKENS', 4),
  seed: num('YIELD_SEED', 11),
  arms: (process.env.YIELD_ARMS ?? '256,64,32').split(',').filter(Boolean),
}
interface Arm {
  name: string
  batch: number
  progress: boolean
  /** Tokens per request of a chained background stream; undefined: one streamed request. */
  piece?: number
}
const ARMS: Arm[] = cfg.arms.map((a) => {
  const m = /^(\d+)(?:(p)|k(\d+))?$/.exec(a)
  if (!m || Number(m[1]) < 1 || (m[3] !== undefined && Number(m[3]) < 1))
    throw new Error(`YIELD_ARMS: "${a}" is not a batch size (optionally with p: progress, or kK: K-token pieces)`)
  return { name: a, batch: Number(m[1]), progress: m[2] === 'p', ...(m[3] ? { piece: Number(m[3]) } : {}) }
})
if (cfg.fgMaxTokens === cfg.bgMaxTokens) throw new Error('YIELD_FG_MAX_TOKENS must differ from YIELD_BG_MAX_TOKENS')
for (const arm of ARMS)
  if (arm.piece === cfg.fgMaxTokens)
    throw new Error(`YIELD_ARMS: ${arm.name}'s pieces must differ from YIELD_FG_MAX_TOKENS`)

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const round = (n: number | undefined) => (n === undefined ? undefined : Math.round(n * 10) / 10)
const load = () => loadavg().map((l) => Math.round(l * 100) / 100)

interface ArmResult {
  yieldPrompt: number[]
  yieldDecode: number[]
  /** Steps (llama_decode calls) the engine finished between the close and every background slot idle. */
  stepsPrompt: number[]
  stepsDecode: number[]
  /** Trials whose slots were still busy at the poll's end. */
  notIdle: number
  decodeStepMs: number[]
  promptChunkMs: number[]
  fgTtftMs: number[]
  fgPromptMs: number[]
  fgPromptN: number[]
  /** Background tokens received before the close, and the milliseconds the streams were open by then. */
  bgTokens: number
  bgOpenMs: number
}
/** At most the progress chunks a background prompt of this bench streams before its first token. */
const PROGRESS_CHUNKS = 3
const isBackground = (nPredict: number) =>
  nPredict === cfg.bgMaxTokens || ARMS.some((a) => a.piece !== undefined && nPredict === a.piece)

/**
 * One background stream as a chain of `piece`-token requests, each prompt the token ids so far, until the background
 * request's length or the signal. A piece is a request of its own: the stream never has more than one in the engine.
 */
async function pieceChain(
  url: string,
  prompt: string,
  piece: number,
  signal: AbortSignal,
  onToken: () => void,
): Promise<StreamOutcome> {
  const post = async (path: string, body: unknown) => {
    const r = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal,
    })
    if (r.status !== 200) throw new Error(`${path}: HTTP ${r.status}`)
    return (await r.json()) as { tokens: number[] }
  }
  try {
    let tokens = (await post('/tokenize', { content: prompt, add_special: true })).tokens
    for (let n = 0; n < cfg.bgMaxTokens && !signal.aborted; ) {
      const out = await post('/completion', {
        prompt: tokens,
        n_predict: piece,
        ignore_eos: true,
        cache_prompt: true,
        return_tokens: true,
      })
      tokens = [...tokens, ...out.tokens]
      n += out.tokens.length
      for (let i = 0; i < out.tokens.length; i++) onToken()
    }
  } catch {
    // the close: the piece in flight cut
  }
  return { status: 200, tokens: 0, cut: true }
}

async function trial(url: string, arm: Arm, closeAfterMs: number, r: ArmResult) {
  const abort = new AbortController()
  const received = Array.from({ length: cfg.bg }, () => 0)
  const openedAt = epochMs()
  const onToken = (i: number) => () => {
    received[i] = (received[i] ?? 0) + 1
  }
  const streams = received.map((_, i) =>
    arm.piece !== undefined
      ? pieceChain(url, freshPrompt(BG_BODY), arm.piece, abort.signal, onToken(i))
      : streamCompletion(url, {
          maxTokens: cfg.bgMaxTokens,
          prompt: freshPrompt(BG_BODY),
          signal: abort.signal,
          extra: { ignore_eos: true, timings_per_token: true, ...(arm.progress ? { return_progress: true } : {}) },
          onToken: onToken(i),
        }),
  )
  await sleep(closeAfterMs)
  // A progress chunk is no token: a stream with nothing but progress is still in its prompt.
  const progressChunks = arm.progress ? PROGRESS_CHUNKS : 0
  const inPrompt = received.some((n) => n <= progressChunks)
  // The engine's count of finished llama_decode calls, read just before the close (a step in flight is not in it):
  // the steps the engine took after the close, load or no load, whatever each step's length.
  const before = (await engineMetrics(url)).n_decode_total ?? Number.NaN
  const closedAt = epochMs()
  abort.abort()
  // Progress chunks count as tokens in a streamed arm: those of the prompt's chunks are taken out.
  r.bgTokens += received.reduce((a, n) => a + Math.max(0, n - progressChunks), 0)
  r.bgOpenMs += closedAt - openedAt
  const idle = await backgroundIdleAt(url, isBackground, 10_000)
  const after = (await engineMetrics(url)).n_decode_total ?? Number.NaN
  const outcomes = await Promise.all(streams)
  if (idle.idleAt === undefined) r.notIdle++
  else {
    ;(inPrompt ? r.yieldPrompt : r.yieldDecode).push(idle.idleAt - closedAt)
    ;(inPrompt ? r.stepsPrompt : r.stepsDecode).push(after - before)
    console.log(
      `bench:yield: ${arm.name} ${inPrompt ? 'prompt' : 'decode'} yield ${Math.round(idle.idleAt - closedAt)} ms, ` +
        `${after - before} steps after the close; load ${load()[0]}`,
    )
  }
  for (const o of outcomes) {
    const t: EngineTimings | undefined = o.timings
    if (t && t.predicted_n > 1) r.decodeStepMs.push(t.predicted_per_token_ms)
  }
  await drained(url, 10_000)
}

async function foreground(url: string, arm: Arm, r: ArmResult) {
  const words = Array.from({ length: cfg.fgWords }, (_, i) => BG_BODY.split(' ')[i % 30]).join(' ')
  const o = await streamCompletion(url, {
    maxTokens: cfg.fgMaxTokens,
    prompt: freshPrompt(words),
    signal: AbortSignal.timeout(60_000),
    extra: { timings_per_token: true },
  })
  if (o.ttftMs !== undefined) r.fgTtftMs.push(o.ttftMs)
  if (o.timings) {
    r.fgPromptMs.push(o.timings.prompt_ms)
    r.fgPromptN.push(o.timings.prompt_n)
    r.promptChunkMs.push(o.timings.prompt_ms / Math.ceil(o.timings.prompt_n / arm.batch))
  }
}

function summary(r: ArmResult) {
  const all = [...r.yieldPrompt, ...r.yieldDecode]
  const p = (xs: number[], q: number) => round(xs.length ? percentile(xs, q) : undefined)
  return {
    yield_n: all.length,
    yield_p50_ms: p(all, 50),
    yield_p99_ms: p(all, 99),
    yield_max_ms: round(all.length ? Math.max(...all) : undefined),
    yield_prompt_n: r.yieldPrompt.length,
    yield_prompt_p50_ms: p(r.yieldPrompt, 50),
    yield_prompt_max_ms: round(r.yieldPrompt.length ? Math.max(...r.yieldPrompt) : undefined),
    yield_decode_n: r.yieldDecode.length,
    yield_decode_p50_ms: p(r.yieldDecode, 50),
    yield_decode_max_ms: round(r.yieldDecode.length ? Math.max(...r.yieldDecode) : undefined),
    steps_after_close_prompt: r.stepsPrompt,
    steps_after_close_decode: r.stepsDecode,
    not_idle: r.notIdle,
    decode_step_p50_ms: p(r.decodeStepMs, 50),
    prompt_chunk_p50_ms: p(r.promptChunkMs, 50),
    fg_long_ttft_p50_ms: p(r.fgTtftMs, 50),
    fg_long_prompt_ms_p50: p(r.fgPromptMs, 50),
    fg_long_prompt_n: r.fgPromptN[0],
    bg_tokens_per_s: round(r.bgOpenMs > 0 ? (r.bgTokens / r.bgOpenMs) * 1000 : undefined),
  }
}

let engines: EngineOnly[] = []
async function main() {
  const binaries = builtEngine()
  if (!binaries) throw new Error('bench:yield needs the real engine: run dev/scripts/install-binaries.sh')
  const loadBefore = load()
  const batches = [...new Set(ARMS.map((a) => a.batch))]
  engines = await Promise.all(batches.map((batchSize) => startEngine({ apis: ['completions'], binaries, batchSize })))
  const urlOf = (arm: Arm) => (engines[batches.indexOf(arm.batch)] as EngineOnly).server('completions').url
  const results = new Map<string, ArmResult>(
    ARMS.map((a) => [
      a.name,
      {
        yieldPrompt: [],
        yieldDecode: [],
        stepsPrompt: [],
        stepsDecode: [],
        notIdle: 0,
        decodeStepMs: [],
        promptChunkMs: [],
        fgTtftMs: [],
        fgPromptMs: [],
        fgPromptN: [],
        bgTokens: 0,
        bgOpenMs: 0,
      },
    ]),
  )
  // Warm-up, not measured: each server's first steps.
  for (const arm of ARMS) await foreground(urlOf(arm), arm, { ...(results.get(arm.name) as ArmResult), fgTtftMs: [] })
  for (const r of results.values())
    Object.assign(r, { promptChunkMs: [], fgPromptMs: [], fgPromptN: [], bgTokens: 0, bgOpenMs: 0 })
  console.log(
    `bench:yield: ${cfg.blocks} blocks × arms ${ARMS.map((a) => a.name).join(', ')}; ${cfg.bg} background streams, ` +
      `closed within ${cfg.spreadMs} ms; load ${loadBefore.join(' ')}`,
  )
  const random = seededRandom(cfg.seed)
  for (let b = 0; b < cfg.blocks; b++) {
    const closeAfter = random() * cfg.spreadMs
    for (const arm of [...ARMS].sort(() => random() - 0.5)) {
      const r = results.get(arm.name) as ArmResult
      await trial(urlOf(arm), arm, closeAfter, r)
      await foreground(urlOf(arm), arm, r)
    }
    console.log(`bench:yield: block ${b + 1}/${cfg.blocks}; load ${load().join(' ')}`)
  }
  const out: Record<string, unknown> = { quick, blocks: cfg.blocks, settings: cfg }
  for (const arm of ARMS) out[arm.name] = summary(results.get(arm.name) as ArmResult)
  out.load_before = loadBefore
  out.load_after = load()
  for (const arm of ARMS) console.log(`bench:yield: ${arm.name}: ${JSON.stringify(out[arm.name])}`)
  console.log(`bench:yield: load average ${(out.load_after as number[]).join(' ')} (1/5/15 min)`)
  mkdirSync(join(repoRoot, 'dev/bench/results'), { recursive: true })
  writeFileSync(
    join(repoRoot, 'dev/bench/results', quick ? 'yield-quick.json' : 'yield-latest.json'),
    `${JSON.stringify(out, null, 2)}\n`,
  )
  console.log(JSON.stringify(out))
}

// Bounded: every trial is bounded (10 s polls, 60 s foreground), and the whole run by this deadline.
const deadline = setTimeout(
  () => {
    console.error('bench:yield: over its deadline; stopping')
    void Promise.all(engines.map((e) => e.stop())).finally(() => process.exit(1))
  },
  (cfg.blocks * ARMS.length * 30 + 180) * 1000,
)
deadline.unref()
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.on(signal, () => void Promise.all(engines.map((e) => e.stop())).finally(() => process.exit(1)))
main()
  .then(() => Promise.all(engines.map((e) => e.stop())))
  .then(() => process.exit(0))
  .catch((err) => {
    console.error(err)
    void Promise.all(engines.map((e) => e.stop())).finally(() => process.exit(1))
  })
