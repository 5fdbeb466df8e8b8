// The test environment's inference engine: llama.cpp's llama-server (dev/scripts/install-binaries.sh builds it from
// the llama.cpp vendored in llama-cpp-python's sdist), serving two small real models, one process per model so each
// API has its own slots, /slots and /metrics:
//   chat         SmolLM2 135M Instruct: an instruction-tuned model with its chat template, on /v1/chat/completions
//   completions  Gemma 3 270M: a base model with no chat template (the server would fall back to ChatML without
//                saying so), on /v1/completions only, as the user guide's troubleshooting table says of base models
// Each server binds to loopback; with a node, a relay (test/env/forwarder.ts) also serves it on the node's bridge
// address, where a backfill Job's pods (its workload and its gate) reach it, as they would reach an engine in a
// cluster.
import { randomBytes } from 'node:crypto'
import { mkdir } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Binaries, ensureBinaries } from './binaries.js'
import { waitFor } from './exec.js'
import { forwarderCommand } from './forwarder.js'
import { freePorts, httpGet, LOOPBACK } from './net.js'
import { Reaper, type ServerProcess, startServer, whileRunning } from './supervisor.js'

export type EngineApi = 'chat' | 'completions'
export const ENGINE_APIS: readonly EngineApi[] = ['chat', 'completions']

/** The model name each server answers to (`model` in a request; `--alias`). */
export const ENGINE_MODEL_NAMES: Record<EngineApi, string> = {
  chat: 'smollm2-135m-instruct',
  completions: 'gemma-3-270m',
}

/** The OpenAI path each model is served on. */
export const ENGINE_PATHS: Record<EngineApi, string> = { chat: '/v1/chat/completions', completions: '/v1/completions' }

export interface EngineOptions {
  /** Which models to serve. Default: both. */
  apis?: readonly EngineApi[]
  /**
   * Threads per server. Default 1: on two shared cores a second thread waits for a busy core at every step (and with
   * OpenMP's default spin-wait burns it), so one thread per server is faster beside anything else running.
   */
  threads?: number
  /** Slots (sequences decoded together) per server. Default 4. */
  slots?: number
  /** Context per slot in tokens. Default 2048. */
  ctxPerSlot?: number
  /** The prompt cache's cap in MiB (-cram): without it the cache grows with every distinct prompt. Default 64. */
  cacheRamMiB?: number
  /**
   * Largest prompt chunk one step takes (-b/-ub). A cancelled slot is let go only between steps, and a request closed
   * while its prompt is processed is seen closed at the progress event after the chunk in flight (the gate asks for
   * them, cmd/gate/progress.ts): the chunk is what a closed prompt still holds the engine for. Default 256; 32 halves
   * the yield and costs a long foreground prompt about 15 % (dev/bench/README.md, bench:yield).
   */
  batchSize?: number
  /** How long to wait for /health. Default 120 s (the model is read and its weights repacked at start). */
  readyTimeoutMs?: number
}

/** One llama-server of the environment (JSON-serializable). */
export interface EngineServerInfo {
  api: EngineApi
  /** Process name in the environment: `llama-server-chat`, `llama-server-completions`. */
  name: string
  /** What `model` a request names. */
  model: string
  modelPath: string
  /** The server's origin on loopback (e.g. http://127.0.0.1:12345). */
  url: string
  /** The same server on the node's bridge address (a relay), when the environment has a node. */
  nodeUrl?: string
  port: number
  logPath: string
}

export interface EngineInfo {
  /** What was built (the manifest's engine.build), for reports. */
  build: string
  binary: string
  threads: number
  slots: number
  /** The prompt chunk one step takes (-b/-ub). */
  batchSize: number
  servers: EngineServerInfo[]
}

const DEFAULTS = { threads: 1, slots: 4, ctxPerSlot: 2048, cacheRamMiB: 64, batchSize: 256, readyTimeoutMs: 120_000 }

/** The environment variables every engine process runs with. */
export function engineProcessEnv(base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  // Idle OpenMP threads sleep instead of spinning: a spinning thread holds a core the other server (or anything else
  // on two cores) needs, and generation collapses when the cores are shared.
  return { ...base, OMP_WAIT_POLICY: 'PASSIVE' }
}

/** The command line of one server. */
export function engineArgs(server: EngineServerInfo, opts: EngineOptions = {}): string[] {
  // An option named but undefined takes its default (a spread would pass the undefined on to the command line).
  const set = Object.fromEntries(Object.entries(opts).filter(([, v]) => v !== undefined))
  const o = { ...DEFAULTS, ...set }
  return [
    '--model',
    server.modelPath,
    '--alias',
    server.model,
    '--host',
    LOOPBACK,
    '--port',
    String(server.port),
    '--threads',
    String(o.threads),
    '--threads-batch',
    String(o.threads),
    '--parallel',
    String(o.slots),
    '--ctx-size',
    String(o.slots * o.ctxPerSlot),
    '--batch-size',
    String(o.batchSize),
    '--ubatch-size',
    String(o.batchSize),
    '--cache-ram',
    String(o.cacheRamMiB),
    '--slots',
    '--metrics',
    '--no-webui',
    // Never fetch anything: the models are local files.
    '--offline',
    // Gemma's GGUF has no chat template: never guess one; the chat model's own template is Jinja.
    ...(server.api === 'chat' ? ['--jinja'] : []),
  ]
}

/** Ready: /health answers 200 (503 while the model loads). */
export async function engineHealthy(url: string): Promise<true> {
  const r = await httpGet(`${url}/health`, {}, 2_000)
  if (r.status !== 200) throw new Error(`/health ${r.status}: ${r.body.slice(0, 200)}`)
  return true
}

/** One slot as GET /slots reports it (the fields read here). */
export interface EngineSlot {
  id: number
  is_processing: boolean
  id_task?: number
  n_ctx?: number
  /** Prompt tokens of the request the engine has taken into its steps so far. */
  n_prompt_tokens_processed?: number
  next_token?: { n_decoded?: number }[]
}

/** The server's slots (GET /slots; the server runs with --slots), within a deadline. */
export async function engineSlots(url: string, timeoutMs = 2_000): Promise<EngineSlot[]> {
  const r = await httpGet(`${url}/slots`, {}, timeoutMs)
  if (r.status !== 200) throw new Error(`GET ${url}/slots: ${r.status} ${r.body.slice(0, 200)}`)
  return JSON.parse(r.body) as EngineSlot[]
}

/** How many slots are decoding or processing a prompt now. */
export async function busySlots(url: string, timeoutMs = 2_000): Promise<number> {
  return (await engineSlots(url, timeoutMs)).filter((s) => s.is_processing).length
}

/**
 * The server's `llamacpp:*` Prometheus values (GET /metrics; the server runs with --metrics), by name without the
 * prefix: counters such as `prompt_tokens_total`, `tokens_predicted_total`, `n_decode_total` (a request's tokens are
 * counted when its slot is released) and gauges such as `requests_processing`.
 */
export async function engineMetrics(url: string, timeoutMs = 2_000): Promise<Record<string, number>> {
  const r = await httpGet(`${url}/metrics`, {}, timeoutMs)
  if (r.status !== 200) throw new Error(`GET ${url}/metrics: ${r.status} ${r.body.slice(0, 200)}`)
  const out: Record<string, number> = {}
  for (const line of r.body.split('\n')) {
    const m = /^llamacpp:(\w+) (\S+)$/.exec(line.trim())
    if (m?.[1] && m[2] !== undefined) out[m[1]] = Number(m[2])
  }
  return out
}

/** Ports and paths of the engine's servers; nothing is started. */
export async function planEngine(
  binaries: Pick<Binaries, 'engine'>,
  logs: string,
  opts: EngineOptions = {},
): Promise<EngineInfo> {
  const apis = opts.apis ?? ENGINE_APIS
  if (apis.length === 0) throw new Error('engine: no model to serve (apis is empty)')
  const ports = await freePorts(apis.length)
  const servers = apis.map((api, i): EngineServerInfo => {
    const port = ports[i] as number
    const name = `llama-server-${api}`
    return {
      api,
      name,
      model: ENGINE_MODEL_NAMES[api],
      modelPath: api === 'chat' ? binaries.engine.chatModel : binaries.engine.completionsModel,
      url: `http://${LOOPBACK}:${port}`,
      port,
      logPath: join(logs, `${name}.log`),
    }
  })
  return {
    build: binaries.engine.build,
    binary: binaries.engine.llamaServer,
    threads: opts.threads ?? DEFAULTS.threads,
    slots: opts.slots ?? DEFAULTS.slots,
    batchSize: opts.batchSize ?? DEFAULTS.batchSize,
    servers,
  }
}

type Start = (name: string, command: string, args: string[], env?: NodeJS.ProcessEnv) => ServerProcess

/** Starts every planned server; resolves once each answers /health (or rejects with its log when one dies). */
export async function launchEngine(
  info: EngineInfo,
  start: Start,
  opts: EngineOptions = {},
): Promise<Map<string, ServerProcess>> {
  const procs = new Map<string, ServerProcess>()
  const timeoutMs = opts.readyTimeoutMs ?? DEFAULTS.readyTimeoutMs
  await Promise.all(
    info.servers.map((server) => {
      const p = start(server.name, info.binary, engineArgs(server, opts), engineProcessEnv())
      procs.set(server.name, p)
      return whileRunning(
        p,
        waitFor(`${server.name} /health`, () => engineHealthy(server.url), { timeoutMs, intervalMs: 200 }),
      )
    }),
  )
  return procs
}

/**
 * With a node: a relay on its bridge address for each server (same port), so pods reach the engine; waits until
 * each answers /health through it. Sets each server's nodeUrl.
 */
export async function relayEngineToNode(info: EngineInfo, hostIp: string, start: Start): Promise<void> {
  await Promise.all(
    info.servers.map((server) => {
      const p = start(`${server.name}-relay`, ...forwarderCommand(hostIp, server.port, LOOPBACK))
      const nodeUrl = `http://${hostIp}:${server.port}`
      return whileRunning(
        p,
        waitFor(`${server.name} through the node relay`, () => engineHealthy(nodeUrl), {
          timeoutMs: 30_000,
          intervalMs: 100,
        }),
      ).then(() => {
        server.nodeUrl = nodeUrl
      })
    }),
  )
}

/** The env.sh lines (ENGINE_CHAT_URL, ENGINE_COMPLETIONS_URL; the _NODE_URL ones with a node). */
export function engineShellExports(info: EngineInfo, quote: (s: string) => string): string[] {
  return info.servers.flatMap((s) => {
    const key = `ENGINE_${s.api.toUpperCase()}`
    return [
      `export ${key}_URL=${quote(s.url)}`,
      `export ${key}_MODEL=${quote(s.model)}`,
      ...(s.nodeUrl ? [`export ${key}_NODE_URL=${quote(s.nodeUrl)}`] : []),
    ]
  })
}

/** The engine alone (no Kubernetes, no NATS), for tests and benchmarks about it: seconds to start. */
export interface EngineOnly extends EngineInfo {
  dir: string
  /** The server of one API (throws when it was not started). */
  server(api: EngineApi): EngineServerInfo
  /** kill -9 of one server (the engine going away mid-request); waits until it is gone. */
  kill(api: EngineApi): Promise<void>
  stop(): Promise<void>
}

export async function startEngine(
  opts: EngineOptions & { log?: (line: string) => void; binaries?: Pick<Binaries, 'engine'> } = {},
): Promise<EngineOnly> {
  const started = Date.now()
  const dir = join(tmpdir(), `modelbackfill-engine-${randomBytes(6).toString('hex')}`)
  const reaper = new Reaper()
  reaper.removeDir(dir)
  try {
    const logs = join(dir, 'logs')
    await mkdir(logs, { recursive: true, mode: 0o700 })
    const info = await planEngine(opts.binaries ?? ensureBinaries(), logs, opts)
    const start: Start = (name, command, args, env) =>
      startServer(reaper, name, command, args, { cwd: dir, logPath: join(logs, `${name}.log`), env })
    const procs = await launchEngine(info, start, opts)
    opts.log?.(
      `${info.servers.map((s) => `${s.name} (${s.model}) at ${s.url}`).join(', ')} ready in ${Date.now() - started} ms`,
    )
    const server = (api: EngineApi) => {
      const s = info.servers.find((x) => x.api === api)
      if (!s) throw new Error(`the engine was started without its ${api} model (apis: ${opts.apis?.join(', ')})`)
      return s
    }
    return {
      ...info,
      dir,
      server,
      async kill(api) {
        const p = procs.get(server(api).name)
        if (!p || p.hasExited()) return
        process.kill(-p.pid, 'SIGKILL')
        await p.exited
        reaper.forgetGroup(p.pid)
      },
      stop: () => reaper.reap(),
    }
  } catch (err) {
    await reaper.reap()
    throw err
  }
}
