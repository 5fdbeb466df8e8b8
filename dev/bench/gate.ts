// `npm run bench:gate`: what a foreground user feels while a backfill Job shares the engine. On the real engine when
// it is built (llama-server serving Gemma 3 270M on the completions API, test/env/engine.ts; four slots, one
// thread), else — or with `--sim` — on the SIMULATED engine (dev/bench/engine-sim: scheduling behaviour, not speed);
// BENCH_ENGINE_URL names another OpenAI-compatible server (then also BENCH_MODEL, BENCH_GATE_ENGINE);
// BENCH_ENGINE_BATCH sets the real engine's prompt chunk (-b/-ub; default test/env/engine.ts's).
//
// The arms run interleaved: BENCH_BLOCKS blocks, each one cycle of every arm in a random order. A cycle is a quiet
// period (BENCH_QUIET_MS; an attempt's gate starts with it, its Job's requests BENCH_IDLE_FOR_MS in) then a busy one:
// BENCH_FG_PER_CYCLE foreground requests BENCH_FG_GAP_MS apart (± a jitter), spaced so the engine serves each alone,
// every prompt fresh. The first of them is the preempting one: it arrives while background runs. Arms:
//   none        no background at all;
//   job_delete  a background Job (BENCH_BG_CONCURRENCY streams, straight to the engine) preempted only by its
//               deletion: its connections close BENCH_KILL_DELAY_MS after the foreground request;
//   gate        the same Job through the background gate (FUNCTION=gate, its own process; BENCH_GATE_MAX_IN_FLIGHT),
//               closed by demand's preempt subject (a real demand process and nats-server, the claim in KV);
//   gate_cap1   the gate capped at one background request in flight;
//   gate_short  the gate, the Job's requests bounded to BENCH_SHORT_MAX_TOKENS each;
//   gate_hold   the gate, and the preempting request held at the gateway stand-in until the engine's /slots shows
//               no background slot processing, at most BENCH_HOLD_MAX_MS (the hold is part of its TTFT).
// BENCH_ARMS picks arms (comma-separated). Per preemption: published → preempt received by the gate → last
// background connection closed (the gate's times) → every background slot idle (/slots polled back to back). The
// engine's step time comes from its own timings (timings_per_token on the Job's requests; the foreground alone).
// demand and the gates run from the esbuild bundle of cmd/manager/main.ts (what the image runs).
// Prints the load average before and after; one JSON object on the last line, also in dev/bench/results/gate-latest.json
// (gate-quick.json with --quick).
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { Kvm } from '@nats-io/kv'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { epochMs } from '../../cmd/gate/proxy.js'
import { foregroundSubject } from '../../events/catalog.js'
import { encode } from '../../events/codec.js'
import { modelKey } from '../../pkg/core/names.js'
import { toKv } from '../../pkg/core/state.js'
import { startNats } from '../../test/env/nats.js'
import { streamCompletion } from './engine-sim/client.js'
import {
  backgroundIdleAt,
  builtEngine,
  drained,
  type EngineDescription,
  engineProps,
  startRealEngine,
} from './gate-engine.js'
import { type ArmResult, armKeys, armLine, emptyArm, type FgSample, ratios, stepKeys } from './gate-report.js'
import { FG_BODY, freshPrompt } from './prompts.js'
import { envNumber as num, seededRandom } from './run-settings.js'

const repoRoot = join(import.meta.dirname, '../..')
const quick = process.argv.includes('--quick')
const wantSim = process.argv.includes('--sim')
const builtReal = wantSim || process.env.BENCH_ENGINE_URL ? undefined : builtEngine()
const sim = !builtReal && !process.env.BENCH_ENGINE_URL
const cfg = {
  blocks: num('BENCH_BLOCKS', quick ? 2 : 50),
  quietMs: num('BENCH_QUIET_MS', 3_000),
  idleForMs: num('BENCH_IDLE_FOR_MS', 700),
  fgPerCycle: num('BENCH_FG_PER_CYCLE', 4),
  fgGapMs: num('BENCH_FG_GAP_MS', 600),
  fgJitterMs: num('BENCH_FG_JITTER_MS', 200),
  fgMaxTokens: num('BENCH_FG_MAX_TOKENS', 4),
  bgConcurrency: num('BENCH_BG_CONCURRENCY', sim ? 16 : 4),
  bgMaxTokens: num('BENCH_BG_MAX_TOKENS', 512),
  shortMaxTokens: num('BENCH_SHORT_MAX_TOKENS', 32),
  killDelayMs: num('BENCH_KILL_DELAY_MS', 1_500),
  gateMaxInFlight: num('BENCH_GATE_MAX_IN_FLIGHT', 2),
  holdMaxMs: num('BENCH_HOLD_MAX_MS', 100),
  seed: num('BENCH_SEED', 7),
  arms: (process.env.BENCH_ARMS ?? 'none,job_delete,gate,gate_cap1,gate_short,gate_hold').split(',').filter(Boolean),
  gateEngine: process.env.BENCH_GATE_ENGINE ?? (sim ? 'vllm' : 'llamacpp'),
  /** The real engine's prompt chunk (-b/-ub); 0: the test environment's default. */
  engineBatch: num('BENCH_ENGINE_BATCH', 0),
}
const NS = 'bench'
const MODEL = 'llm'

interface ArmSpec {
  background: 'none' | 'direct' | 'gate'
  maxInFlight?: number
  bgMaxTokens?: number
  hold?: boolean
}
const ARM_SPECS: Record<string, ArmSpec> = {
  none: { background: 'none' },
  job_delete: { background: 'direct' },
  gate: { background: 'gate' },
  gate_cap1: { background: 'gate', maxInFlight: 1 },
  gate_short: { background: 'gate', bgMaxTokens: cfg.shortMaxTokens },
  gate_hold: { background: 'gate', hold: true },
}
for (const arm of cfg.arms) if (!ARM_SPECS[arm]) throw new Error(`BENCH_ARMS: unknown arm "${arm}"`)
if ([cfg.bgMaxTokens, cfg.shortMaxTokens].includes(cfg.fgMaxTokens))
  throw new Error('BENCH_FG_MAX_TOKENS must differ from the background max tokens: /slots tells them apart by it')

const children: ChildProcess[] = []
/** The real engine's servers, stopped on every way out (they are not children of this process's group). */
let stopEngine: (() => Promise<void>) | undefined
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** A process of ours, its stdout lines to `onLine`; killed at exit. */
function spawnChild(
  args: string[],
  env: Record<string, string>,
  onLine?: (line: string) => void,
  stdin: 'ignore' | 'pipe' = 'ignore',
) {
  const child = spawn(process.execPath, args, {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: [stdin, 'pipe', 'inherit'],
  })
  children.push(child)
  let buffered = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    buffered += chunk.toString()
    let nl = buffered.indexOf('\n')
    while (nl >= 0) {
      onLine?.(buffered.slice(0, nl))
      buffered = buffered.slice(nl + 1)
      nl = buffered.indexOf('\n')
    }
  })
  return child
}

function waitLine(child: ChildProcess, match: (obj: Record<string, unknown>) => unknown, what: string, ms = 60_000) {
  return new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: not seen within ${ms} ms`)), ms)
    child.on('exit', (code) => reject(new Error(`${what}: process exited ${code}`)))
    let buffered = ''
    child.stdout?.on('data', (chunk: Buffer) => {
      buffered += chunk.toString()
      for (const line of buffered.split('\n').slice(0, -1)) {
        try {
          const obj = JSON.parse(line)
          if (match(obj)) {
            clearTimeout(timer)
            resolve(obj)
          }
        } catch {}
      }
      buffered = buffered.slice(buffered.lastIndexOf('\n') + 1)
    })
  })
}

/** The background Job's process (dev/bench/gate-job.ts): one attempt at a time, `go` to `stop`. */
async function spawnJob(model: string) {
  let onStop: ((o: { tokens: number; stepMs: number[] }) => void) | undefined
  const child = spawnChild(
    ['--import', 'tsx', 'dev/bench/gate-job.ts'],
    {
      BENCH_JOB_CONCURRENCY: String(cfg.bgConcurrency),
      BENCH_MODEL: model,
      BENCH_JOB_FRESH: sim ? '0' : '1',
    },
    (line) => {
      try {
        const o = JSON.parse(line)
        if (typeof o.tokens === 'number') onStop?.(o)
      } catch {}
    },
    'pipe',
  )
  await waitLine(child, (o) => o.ready, 'background job ready')
  return {
    go: (url: string, direct: boolean, maxTokens: number) =>
      child.stdin?.write(`go ${url} ${direct ? 'direct' : 'gate'} ${maxTokens}\n`),
    /** The pod killed: its connections closed; resolves with the tokens the attempt received and its step times. */
    stop: () =>
      new Promise<{ tokens: number; stepMs: number[] }>((resolve) => {
        onStop = resolve
        child.stdin?.write('stop\n')
      }),
  }
}

interface GateState {
  lastPreemption?: { signalAt: number; lastAbortAt: number; aborted: number }
  tokens?: { completed: number; discarded: number }
}

/** The gate's /flexinfer-gate/state, within a deadline; {} when it does not answer (the sample goes without it). */
async function gateState(url: string): Promise<GateState> {
  try {
    const r = await fetch(`${url}/flexinfer-gate/state`, { signal: AbortSignal.timeout(2_000) })
    return (await r.json()) as GateState
  } catch {
    return {}
  }
}

/** The simulated engine's last background disconnect after `since` (epoch ms), within the kill delay. */
async function simIdle(url: string, since: number): Promise<{ idleAt?: number; lastBusyAt?: number }> {
  try {
    const r = await fetch(`${url}/sim/aborts`, { signal: AbortSignal.timeout(2_000) })
    const aborts = (await r.json()) as { klass: string; seenAt: number }[]
    const mine = aborts.filter(
      (x) => x.klass === 'background' && x.seenAt >= since - 1 && x.seenAt <= since + cfg.killDelayMs,
    )
    return mine.length ? { idleAt: Math.max(...mine.map((x) => x.seenAt)) } : {}
  } catch {
    return {}
  }
}

async function main() {
  const loadBefore = loadavg()
  console.log(`bench:gate: load average ${loadBefore.map((l) => l.toFixed(2)).join(' ')} (1/5/15 min)`)
  // demand and the gates run as the image runs them (the esbuild bundle of cmd/manager/main.ts): a gate starts in a
  // fraction of a second, as in its pod, instead of compiling TypeScript on a machine the engine shares.
  const bundleDir = mkdtempSync(join(tmpdir(), 'bench-gate-'))
  const built = spawnSync(process.execPath, ['dev/scripts/bundle.mjs', bundleDir], { cwd: repoRoot, stdio: 'inherit' })
  if (built.status !== 0) throw new Error(`dev/scripts/bundle.mjs failed (${built.status})`)
  const entry = join(bundleDir, 'main.js')

  let engineUrl: string
  let model: string
  let description: EngineDescription
  if (builtReal) {
    const real = await startRealEngine(builtReal, cfg.engineBatch || undefined)
    stopEngine = () => real.engine.stop()
    description = real.description
    engineUrl = description.url
    model = description.model as string
    console.log(`bench:gate: real engine ${JSON.stringify(description)}`)
  } else if (sim) {
    const child = spawnChild(['--import', 'tsx', 'dev/bench/engine-sim/main.ts'], {})
    engineUrl = (await waitLine(child, (o) => o.url, 'engine-sim')).url as string
    model = 'sim'
    description = { kind: 'simulated', url: engineUrl }
    console.log(`bench:gate: SIMULATED engine at ${engineUrl} (dev/bench/engine-sim: scheduling behaviour, not speed)`)
  } else {
    engineUrl = process.env.BENCH_ENGINE_URL as string
    model = process.env.BENCH_MODEL ?? 'sim'
    const props = await engineProps(engineUrl)
    description = { kind: 'external', url: engineUrl, model, build_info: props?.build_info }
    console.log(`bench:gate: engine ${engineUrl} (model ${model})`)
  }
  const real = !sim
  const isBackground = (nPredict: number) => nPredict !== cfg.fgMaxTokens

  const nats = process.env.BENCH_NATS_URL ? undefined : await startNats({ cluster: false })
  const natsUrl = process.env.BENCH_NATS_URL ?? (nats?.natsUrl as string)
  const demand = spawnChild([entry], { FUNCTION: 'demand', NATS_URL: natsUrl, PORT: '0', LOG_LEVEL: 'info' })
  await waitLine(demand, (o) => String(o.msg ?? '').includes('metrics at'), 'demand started')
  const nc: NatsConnection = await connect({ servers: natsUrl, name: 'bench-gate' })
  const claims = await new Kvm(nc).open('flexinfer-claims')
  const bg = await spawnJob(model)
  const fg = (prompt: string | undefined) =>
    streamCompletion(engineUrl, {
      maxTokens: cfg.fgMaxTokens,
      model,
      prompt,
      extra: real ? { ignore_eos: true } : undefined,
    })

  let attempt = 0
  /** The attempt's gate, started before its claim exists, as the sidecar starts with the pod. */
  async function startGateProcess(job: string, maxInFlight: number) {
    const gate = spawnChild([entry], {
      FUNCTION: 'gate',
      NATS_URL: natsUrl,
      GATE_UPSTREAM: engineUrl,
      GATE_NAMESPACE: NS,
      GATE_MODEL: MODEL,
      GATE_JOB: job,
      GATE_ENGINE: cfg.gateEngine,
      GATE_MAX_IN_FLIGHT: String(maxInFlight),
      GATE_PORT: '0',
      LOG_LEVEL: 'info',
    })
    const listening = waitLine(gate, (o) => o.msg === 'gate listening', 'gate listening')
    const open = waitLine(gate, (o) => o.msg === 'gate open', 'gate open')
    open.catch(() => {})
    const url = (await listening).url as string
    await open
    return { gate, url }
  }

  /** One cycle of one arm: quiet (an attempt starts), then busy (its first request preempts it). */
  async function cycle(arm: string, block: number, offsets: number[], r: ArmResult) {
    const spec = ARM_SPECS[arm] as ArmSpec
    const t0 = performance.now()
    const at = (offset: number) => sleep(Math.max(0, offset - (performance.now() - t0)))
    const job = `bench-${++attempt}-00000000`
    const gate =
      spec.background === 'gate' ? await startGateProcess(job, spec.maxInFlight ?? cfg.gateMaxInFlight) : undefined
    let running = false
    if (spec.background !== 'none') {
      // A gate that took most of the quiet period to start would start its attempt late: skipped, counted.
      if (performance.now() - t0 > cfg.quietMs - 800) r.skipped++
      else {
        await at(cfg.idleForMs)
        const now = new Date().toISOString()
        await claims.put(
          `model.${modelKey(NS, MODEL)}`,
          toKv({ namespace: NS, backfill: 'bench', attempt, jobName: job, claimedAt: now, idleSince: now }),
        )
        bg.go(gate?.url ?? engineUrl, !gate, spec.bgMaxTokens ?? cfg.bgMaxTokens)
        running = true
        r.attempts++
      }
    }
    await at(cfg.quietMs)
    const requests: Promise<void>[] = []
    let background: Promise<void> = Promise.resolve()
    for (const [k, offset] of offsets.entries()) {
      await at(cfg.quietMs + offset)
      const preempting = k === 0 && (running || spec.background === 'none')
      const publishedAt = epochMs()
      const p0 = performance.now()
      // What a gateway does per request: publish it (core NATS onto the per-model subject), then serve it.
      nc.publish(
        foregroundSubject(NS, MODEL),
        encode('ai.flexinfer.foreground.request', { namespace: NS, model: MODEL }),
      )
      // The engine's own view from the preempting request on, in every arm alike (the polls cost the engine the same).
      const idle =
        k === 0 && real
          ? backgroundIdleAt(engineUrl, isBackground, cfg.killDelayMs + 2_000)
          : Promise.resolve(undefined)
      requests.push(
        (async () => {
          if (k === 0 && spec.hold && running) await Promise.race([idle, sleep(cfg.holdMaxMs)])
          const heldMs = performance.now() - p0
          const out = await fg(real ? freshPrompt(FG_BODY) : undefined)
          if (out.ttftMs === undefined) return
          const sample: FgSample = { ttftMs: out.ttftMs + heldMs, preempting, heldMs, k, block }
          if (out.timings) {
            sample.promptMs = out.timings.prompt_ms
            if (out.timings.predicted_n > 1) sample.stepMs = out.timings.predicted_per_token_ms
          }
          r.fg.push(sample)
        })(),
      )
      if (k === 0 && running)
        background = (async () => {
          // The Job's deletion reaches its pod later; the gate (if any) has closed long before.
          await sleep(cfg.killDelayMs)
          const state = gate ? await gateState(gate.url) : undefined
          const stopped = await bg.stop()
          r.bgTokens += stopped.tokens
          r.bgStepMs.push(...stopped.stepMs)
          // The simulated engine has no /slots: it frees a sequence at the disconnect it records.
          const seen = real ? await idle : await simIdle(engineUrl, publishedAt)
          const p = state?.lastPreemption
          r.preemptions.push({
            publishedAt,
            signalAt: p?.signalAt,
            lastAbortAt: p?.lastAbortAt,
            idleAt: seen?.idleAt,
            lastBusyAt: seen?.lastBusyAt,
          })
          if (gate) {
            // The gate's counts once its last request has ended (the Job stopped).
            const after = await gateState(gate.url)
            r.gateTokens.completed += after.tokens?.completed ?? 0
            r.gateTokens.discarded += after.tokens?.discarded ?? 0
          }
        })()
      else if (k === 0) requests.push(idle.then(() => undefined))
    }
    await Promise.all([...requests, background])
    // The closed gate's process ends now; its exit is no part of what a foreground user waits for.
    gate?.gate.kill('SIGTERM')
    // Nothing carries over into the next cycle.
    if (real) await drained(engineUrl, 5_000)
    else await sleep(300)
  }

  // Warm-up, not measured: connections, JIT and the engine's first steps would otherwise land on the first cycles.
  for (let i = 0; i < 6; i++) await fg(real ? freshPrompt(FG_BODY) : undefined)
  const results: Record<string, ArmResult> = Object.fromEntries(cfg.arms.map((a) => [a, emptyArm()]))
  const cycleMs = cfg.quietMs + cfg.fgPerCycle * cfg.fgGapMs + 1_500
  console.log(
    `bench:gate: ${cfg.blocks} blocks × ${cfg.arms.length} arms (${cfg.arms.join(', ')}), ${cfg.fgPerCycle} foreground ` +
      `requests a cycle (${cfg.blocks * cfg.fgPerCycle} per arm, ${cfg.blocks} preempting); about ` +
      `${Math.round((cfg.blocks * cfg.arms.length * cycleMs) / 60_000)} min`,
  )
  const random = seededRandom(cfg.seed)
  const started = Date.now()
  for (let b = 0; b < cfg.blocks; b++) {
    // The same foreground offsets for every arm of a block; the arms in a random order.
    const offsets = Array.from(
      { length: cfg.fgPerCycle },
      (_, k) => k * cfg.fgGapMs + (k === 0 ? 0 : (random() - 0.5) * cfg.fgJitterMs),
    )
    const order = [...cfg.arms].sort(() => random() - 0.5)
    for (const arm of order) await cycle(arm, b, offsets, results[arm] as ArmResult)
    if ((b + 1) % 5 === 0 || b === cfg.blocks - 1)
      console.log(`bench:gate: block ${b + 1}/${cfg.blocks} done (${Math.round((Date.now() - started) / 1000)} s)`)
  }

  const out: Record<string, unknown> = { engine: description, quick, blocks: cfg.blocks, arms: cfg.arms }
  for (const arm of cfg.arms) armKeys(out, arm, results[arm] as ArmResult)
  ratios(out, cfg.arms)
  stepKeys(out, results)
  out.settings = {
    bg_concurrency: cfg.bgConcurrency,
    bg_max_tokens: cfg.bgMaxTokens,
    short_max_tokens: cfg.shortMaxTokens,
    gate_max_in_flight: cfg.gateMaxInFlight,
    hold_max_ms: cfg.holdMaxMs,
    kill_delay_ms: cfg.killDelayMs,
    fg_max_tokens: cfg.fgMaxTokens,
  }
  out.load_before = loadBefore.map((l) => Math.round(l * 100) / 100)
  out.load_after = loadavg().map((l) => Math.round(l * 100) / 100)
  for (const arm of cfg.arms) console.log(`bench:gate: ${armLine(arm, out)}`)
  console.log(`bench:gate: load average ${(out.load_after as number[]).join(' ')} (1/5/15 min)`)
  await nc.close()
  for (const c of children) c.kill('SIGTERM')
  await nats?.stop()
  await stopEngine?.()
  stopEngine = undefined
  rmSync(bundleDir, { recursive: true, force: true })
  mkdirSync(join(repoRoot, 'dev/bench/results'), { recursive: true })
  const file = quick ? 'gate-quick.json' : 'gate-latest.json'
  writeFileSync(join(repoRoot, 'dev/bench/results', file), `${JSON.stringify(out, null, 2)}\n`)
  console.log(JSON.stringify(out))
}

// Bounded by the run it was asked for: its cycles at half again their planned length, and the start.
const plannedMs = cfg.blocks * cfg.arms.length * (cfg.quietMs + cfg.fgPerCycle * cfg.fgGapMs + 1_500) * 1.5 + 3 * 60_000
const deadline = setTimeout(() => {
  console.error(`bench:gate: over its ${Math.round(plannedMs / 60_000)}-minute deadline; stopping`)
  for (const c of children) c.kill('SIGKILL')
  void (stopEngine?.() ?? Promise.resolve()).finally(() => process.exit(1))
}, plannedMs)
deadline.unref()
main()
  .then(() => process.exit(0))
  .catch((err) => {
    console.error(err)
    for (const c of children) c.kill('SIGKILL')
    void (stopEngine?.() ?? Promise.resolve()).finally(() => process.exit(1))
  })
