// `npm run bench:gate`: what a foreground user feels while a backfill Job shares the engine, in three arms back to
// back on the same foreground trace:
//   none        no background at all;
//   job_delete  a background Job (a greedy eval harness: BENCH_BG_CONCURRENCY streaming requests, straight to the
//               engine) preempted only by its deletion: its connections close BENCH_KILL_DELAY_MS after the
//               foreground request (Job DELETE, garbage collector, kubelet, SIGTERM; "100 ms to seconds" measured);
//   gate        the same Job through the background gate (FUNCTION=gate, its own process): requests marked
//               background, at most BENCH_GATE_MAX_IN_FLIGHT in flight, closed by demand's preempt subject (demand
//               runs as its own process against a real nats-server, the attempt's claim in KV as admit writes it).
// A background attempt starts BENCH_IDLE_FOR_MS into each quiet period and runs until the next foreground request.
// demand and the gates run from the esbuild bundle of cmd/manager/main.ts (what the image runs); the Job is one process
// (dev/bench/gate-job.ts) running one attempt at a time.
// Reports fg_ttft_ms_p50/p99_<arm> (time to the first streamed token), gate_abort_ms_p50/p99 (foreground published →
// the engine saw the last background request disconnect; with BENCH_ENGINE_URL, → the gate's last abort), and
// bg_tokens_<arm> (background tokens streamed back: the harvest). The engine is the SIMULATED one
// (dev/bench/engine-sim) unless BENCH_ENGINE_URL names a real OpenAI-compatible server (then also BENCH_MODEL).
// Prints the load average before and after; one JSON object on the last line, also in dev/bench/results/gate-latest.json.
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
import { percentile } from './percentile.js'

const repoRoot = join(import.meta.dirname, '../..')
const num = (name: string, fallback: number) => {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const n = Number(raw)
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name}="${raw}": expected a non-negative number`)
  return n
}
const quick = process.argv.includes('--quick')
const cfg = {
  armSeconds: num('BENCH_ARM_SECONDS', quick ? 14 : 40),
  busyMs: num('BENCH_BUSY_MS', 5_000),
  quietMs: num('BENCH_QUIET_MS', 4_000),
  idleForMs: num('BENCH_IDLE_FOR_MS', 1_000),
  fgRatePerS: num('BENCH_FG_RATE', 6),
  fgMaxTokens: num('BENCH_FG_MAX_TOKENS', 32),
  bgConcurrency: num('BENCH_BG_CONCURRENCY', 16),
  bgMaxTokens: num('BENCH_BG_MAX_TOKENS', 512),
  killDelayMs: num('BENCH_KILL_DELAY_MS', 1_500),
  gateMaxInFlight: num('BENCH_GATE_MAX_IN_FLIGHT', 2),
  seed: num('BENCH_SEED', 7),
  engineUrl: process.env.BENCH_ENGINE_URL,
  model: process.env.BENCH_MODEL ?? 'sim',
  engine: process.env.BENCH_GATE_ENGINE ?? 'vllm',
}
const NS = 'bench'
const MODEL = 'llm'
const ARMS = ['none', 'job_delete', 'gate'] as const
type Arm = (typeof ARMS)[number]

const children: ChildProcess[] = []
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** A deterministic PRNG (mulberry32): the same foreground trace in every arm. */
function rng(seed: number) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}

/** Foreground request offsets (ms from the arm's start): Poisson arrivals in busy periods, none in quiet ones. */
function foregroundTrace(): { offsets: number[]; quiet: { from: number; to: number }[] } {
  const random = rng(cfg.seed)
  const offsets: number[] = []
  const quiet: { from: number; to: number }[] = []
  const end = cfg.armSeconds * 1000
  for (let t0 = 0; t0 < end; t0 += cfg.busyMs + cfg.quietMs) {
    let t = t0
    for (;;) {
      t += -Math.log(1 - random()) * (1000 / cfg.fgRatePerS)
      if (t >= Math.min(end, t0 + cfg.busyMs)) break
      offsets.push(t)
    }
    quiet.push({ from: t0 + cfg.busyMs, to: Math.min(end, t0 + cfg.busyMs + cfg.quietMs) })
  }
  return { offsets, quiet }
}

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
async function spawnJob() {
  let onTokens: ((n: number) => void) | undefined
  const child = spawnChild(
    ['--import', 'tsx', 'dev/bench/gate-job.ts'],
    {
      BENCH_JOB_CONCURRENCY: String(cfg.bgConcurrency),
      BENCH_JOB_MAX_TOKENS: String(cfg.bgMaxTokens),
      BENCH_MODEL: cfg.model,
    },
    (line) => {
      try {
        const o = JSON.parse(line)
        if (typeof o.tokens === 'number') onTokens?.(o.tokens)
      } catch {}
    },
    'pipe',
  )
  await waitLine(child, (o) => o.ready, 'background job ready')
  return {
    go: (url: string, direct: boolean) => child.stdin?.write(`go ${url}${direct ? ' direct' : ''}\n`),
    /** The pod killed: its connections closed; resolves with the tokens the attempt received. */
    stop: () =>
      new Promise<number>((resolve) => {
        onTokens = resolve
        child.stdin?.write('stop\n')
      }),
  }
}

interface ArmResult {
  ttfts: number[]
  bgTokens: number
  /** Foreground published → last background request aborted (at the engine, or in the gate with a real engine). */
  aborts: number[]
  /** Inside the gate: preempt received → last upstream connection closed. */
  inGate: number[]
  /** Background attempts started, and skipped because their gate was not up before the quiet period ended. */
  attempts: number
  skipped: number
  /** The three slowest foreground requests: [ttft ms, offset in the trace ms], to see where a tail comes from. */
  slowest: [number, number][]
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
  const sim = !cfg.engineUrl
  let engineUrl = cfg.engineUrl as string
  if (sim) {
    const child = spawnChild(['--import', 'tsx', 'dev/bench/engine-sim/main.ts'], {})
    engineUrl = (await waitLine(child, (o) => o.url, 'engine-sim')).url as string
    console.log(`bench:gate: SIMULATED engine at ${engineUrl} (dev/bench/engine-sim: scheduling behaviour, not speed)`)
  } else console.log(`bench:gate: engine ${engineUrl} (model ${cfg.model})`)

  const nats = process.env.BENCH_NATS_URL ? undefined : await startNats({ cluster: false })
  const natsUrl = process.env.BENCH_NATS_URL ?? (nats?.natsUrl as string)
  const demand = spawnChild([entry], {
    FUNCTION: 'demand',
    NATS_URL: natsUrl,
    PORT: '0',
    LOG_LEVEL: 'info',
  })
  await waitLine(demand, (o) => String(o.msg ?? '').includes('metrics at'), 'demand started')
  const nc: NatsConnection = await connect({ servers: natsUrl, name: 'bench-gate' })
  const claims = await new Kvm(nc).open('flexinfer-claims')
  const bg = await spawnJob()
  const trace = foregroundTrace()
  console.log(
    `bench:gate: ${trace.offsets.length} foreground requests per arm over ${cfg.armSeconds} s; ` +
      `${trace.quiet.length} quiet periods; background ${cfg.bgConcurrency} streams; kill delay ${cfg.killDelayMs} ms`,
  )

  let attempt = 0
  /**
   * The attempt's gate, started before its claim exists, as the sidecar starts with the pod; at the start of a quiet
   * period, so no earlier attempt's preemption (demand sends one per foreground request while a claim stands) hits it.
   */
  async function startGateProcess(job: string) {
    const gate = spawnChild([entry], {
      FUNCTION: 'gate',
      NATS_URL: natsUrl,
      GATE_UPSTREAM: engineUrl,
      GATE_NAMESPACE: NS,
      GATE_MODEL: MODEL,
      GATE_JOB: job,
      GATE_ENGINE: cfg.engine,
      GATE_MAX_IN_FLIGHT: String(cfg.gateMaxInFlight),
      GATE_PORT: '0',
      LOG_LEVEL: 'info',
    })
    const listening = waitLine(gate, (o) => o.msg === 'gate listening', 'gate listening')
    const open = waitLine(gate, (o) => o.msg === 'gate open', 'gate open')
    const url = (await listening).url as string
    await open
    return { gate, url }
  }

  /** One background attempt: its claim (so demand preempts it, as admit writes it), then its Job's requests. */
  async function startAttempt(job: string, url: string) {
    const now = new Date().toISOString()
    await claims.put(
      `model.${modelKey(NS, MODEL)}`,
      toKv({ namespace: NS, backfill: 'bench', attempt, jobName: job, claimedAt: now, idleSince: now }),
    )
    bg.go(url, url === engineUrl)
  }

  async function runArm(arm: Arm): Promise<ArmResult> {
    const t0 = performance.now()
    const at = (offset: number) => sleep(Math.max(0, offset - (performance.now() - t0)))
    const result: ArmResult = { ttfts: [], bgTokens: 0, aborts: [], inGate: [], slowest: [], attempts: 0, skipped: 0 }
    const pending: Promise<unknown>[] = []
    // Background: an attempt in each quiet period, from idleFor in until the next foreground request.
    const background = (async () => {
      if (arm === 'none') return
      const retired: ChildProcess[] = []
      for (const q of trace.quiet) {
        if (q.to - q.from <= cfg.idleForMs) continue
        await at(q.from)
        for (const g of retired.splice(0)) g.kill('SIGTERM')
        const job = `bench-${++attempt}-00000000`
        const gate = arm === 'gate' ? await startGateProcess(job) : undefined
        // A gate that took the whole quiet period to start (a loaded machine) would start their attempt inside the
        // next busy period: no attempt in this window, counted, rather than one started under foreground.
        if (performance.now() - t0 > q.to - 500) {
          result.skipped++
          gate?.gate.kill('SIGTERM')
          continue
        }
        await at(q.from + cfg.idleForMs)
        await startAttempt(job, gate?.url ?? engineUrl)
        result.attempts++
        const next = trace.offsets.find((o) => o >= q.to)
        await at(next ?? q.to)
        const publishedAt = epochMs()
        // The Job's deletion reaches its pod later; the gate (if any) has closed long before.
        await sleep(cfg.killDelayMs)
        if (gate) {
          const state = (await (await fetch(`${gate.url}/flexinfer-gate/state`)).json()) as {
            lastPreemption?: { signalAt: number; lastAbortAt: number; aborted: number }
          }
          const p = state.lastPreemption
          if (p) result.inGate.push(p.lastAbortAt - p.signalAt)
          if (sim) {
            const aborts = (await (await fetch(`${engineUrl}/sim/aborts`)).json()) as {
              klass: string
              seenAt: number
            }[]
            const mine = aborts.filter((x) => x.klass === 'background' && x.seenAt >= publishedAt - 1)
            const seen = mine.filter((x) => x.seenAt <= publishedAt + cfg.killDelayMs)
            if (seen.length) result.aborts.push(Math.max(...seen.map((x) => x.seenAt)) - publishedAt)
          } else if (state.lastPreemption) result.aborts.push(state.lastPreemption.lastAbortAt - publishedAt)
        }
        result.bgTokens += await bg.stop()
        // The closed gate's process ends once the busy period is over: its exit is CPU on this machine, which the
        // simulated engine shares, and no part of what a foreground user waits for.
        if (gate) retired.push(gate.gate)
      }
      return retired
    })()
    for (const offset of trace.offsets) {
      await at(offset)
      // What a gateway does per request: publish it (core NATS onto the per-model subject), then serve it.
      nc.publish(
        foregroundSubject(NS, MODEL),
        encode('ai.flexinfer.foreground.request', { namespace: NS, model: MODEL }),
      )
      pending.push(
        streamCompletion(engineUrl, { maxTokens: cfg.fgMaxTokens, model: cfg.model }).then((r) => {
          if (r.ttftMs !== undefined) {
            result.ttfts.push(r.ttftMs)
            result.slowest.push([r.ttftMs, offset])
            result.slowest = result.slowest.sort((a, b) => b[0] - a[0]).slice(0, 3)
          }
        }),
      )
    }
    await Promise.all(pending)
    const retiredAtEnd = await background
    for (const g of retiredAtEnd ?? []) g.kill('SIGTERM')
    return result
  }

  // Warm-up, not measured: connections, JIT and the engine's first steps would otherwise land on the first arm only.
  await Promise.all(
    Array.from({ length: 20 }, (_, i) =>
      sleep(i * 50).then(() => streamCompletion(engineUrl, { maxTokens: cfg.fgMaxTokens, model: cfg.model })),
    ),
  )
  const results = {} as Record<Arm, ArmResult>
  for (const arm of ARMS) {
    // Nothing carries over: the engine drains between arms.
    await sleep(1_000)
    results[arm] = await runArm(arm)
    const r = results[arm]
    console.log(
      `bench:gate: arm ${arm}: fg ttft p50 ${percentile(r.ttfts, 50)} / p99 ${percentile(r.ttfts, 99)} ms ` +
        `(${r.ttfts.length}; slowest ${r.slowest.map(([t, o]) => `${t.toFixed(0)} ms at +${(o / 1000).toFixed(1)} s`).join(', ')}), bg tokens ${r.bgTokens} in ${r.attempts} attempt(s)${r.skipped ? ` (${r.skipped} skipped: gate not up in time)` : ''}${arm === 'gate' ? `, aborts ${r.aborts.map((a) => a.toFixed(1)).join(' ')} ms` : ''}`,
    )
  }
  const out: Record<string, number | string | number[]> = {
    engine: sim ? 'simulated' : (engineUrl as string),
  }
  for (const arm of ARMS) {
    out[`fg_ttft_ms_p50_${arm}`] = percentile(results[arm].ttfts, 50)
    out[`fg_ttft_ms_p99_${arm}`] = percentile(results[arm].ttfts, 99)
    out[`bg_tokens_${arm}`] = results[arm].bgTokens
    out[`bg_attempts_${arm}`] = results[arm].attempts
  }
  out.gate_abort_ms_p50 = percentile(results.gate.aborts, 50)
  out.gate_abort_ms_p99 = percentile(results.gate.aborts, 99)
  out.gate_abort_samples = results.gate.aborts.length
  out.gate_internal_abort_ms_max = Math.round(Math.max(...results.gate.inGate, 0) * 1000) / 1000
  out.gate_p99_vs_none =
    Math.round(((out.fg_ttft_ms_p99_gate as number) / (out.fg_ttft_ms_p99_none as number)) * 1000) / 1000
  out.load_before = loadBefore.map((l) => Math.round(l * 100) / 100)
  out.load_after = loadavg().map((l) => Math.round(l * 100) / 100)
  console.log(
    `bench:gate: load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} (1/5/15 min)`,
  )
  await nc.close()
  for (const c of children) c.kill('SIGTERM')
  await nats?.stop()
  rmSync(bundleDir, { recursive: true, force: true })
  mkdirSync(join(repoRoot, 'dev/bench/results'), { recursive: true })
  writeFileSync(join(repoRoot, 'dev/bench/results/gate-latest.json'), `${JSON.stringify(out, null, 2)}\n`)
  console.log(JSON.stringify(out))
}

const deadline = setTimeout(() => {
  console.error('bench:gate: over its 5-minute deadline; stopping')
  for (const c of children) c.kill('SIGKILL')
  process.exit(1)
}, 5 * 60_000)
deadline.unref()
main()
  .then(() => process.exit(0))
  .catch((err) => {
    console.error(err)
    for (const c of children) c.kill('SIGKILL')
    process.exit(1)
  })
