// What each item does: `info` asks the engine what it serves (the model as the engine reports it: /v1/models, and
// llama.cpp's /props for its file and settings), `probe` runs one coherence probe, `bench` one benchmark iteration.
// A model the engine does not serve, or an endpoint that cannot be reached, is recorded in its info item, and that
// model's other items record that they were skipped for it: a result, not a crash loop.
import { runIteration } from './benchmark.js'
import type { ItemRecord, ItemSpec } from './items.js'
import { type OpenAiClient, WorkloadError } from './openai.js'
import { type Probe, runProbe } from './probes.js'
import type { Settings } from './settings.js'

export interface ModelInfo {
  /** The engine's own entry for the model (id, root, owned_by, max_model_len …), as it reported it. */
  reported?: Record<string, unknown>
  /** Every id the engine listed (at most 32). */
  served?: string[]
  /** llama.cpp's /props: the model file and the default generation settings. */
  props?: Record<string, unknown>
  error?: { kind: string; message: string }
}

export interface Skipped {
  skipped: { kind: string; message: string }
}

const LLAMACPP = new Set(['llamacpp', 'llama.cpp', 'llama-cpp'])

export async function modelInfo(client: OpenAiClient, model: string, engine: string): Promise<ModelInfo> {
  try {
    const listed = (await client.getJson('/models')) as { data?: unknown }
    if (!Array.isArray(listed.data)) throw new WorkloadError('malformed', '/models: the answer has no data array')
    const entries = listed.data.filter((e): e is Record<string, unknown> => typeof e === 'object' && e !== null)
    const served = entries.map((e) => String(e.id)).slice(0, 32)
    const reported = entries.find((e) => e.id === model)
    const info: ModelInfo = { served }
    if (!reported) {
      info.error = {
        kind: 'not-served',
        message: `the endpoint does not serve "${model}" (it lists ${served.join(', ') || 'nothing'})`,
      }
      return info
    }
    info.reported = reported
    if (LLAMACPP.has(engine.toLowerCase())) {
      const props = (await client.getJson('/props', { root: true })) as Record<string, unknown>
      info.props = {
        model_path: props.model_path,
        total_slots: props.total_slots,
        default_generation_settings: props.default_generation_settings,
      }
    }
    return info
  } catch (err) {
    if (err instanceof WorkloadError && err.kind !== 'aborted')
      return { error: { kind: err.kind, message: err.message } }
    throw err
  }
}

export function executor(client: OpenAiClient, settings: Settings, probes: readonly Probe[], signal: AbortSignal) {
  const engineOf = new Map(settings.models.map((m) => [m.name, m.engine]))
  return async (item: ItemSpec, done: ReadonlyMap<string, ItemRecord>): Promise<unknown> => {
    if (item.kind === 'info') return modelInfo(client, item.model, engineOf.get(item.model) ?? 'unknown')
    const info = done.get(`${item.model}/info`)?.result as ModelInfo | undefined
    if (info?.error && (info.error.kind === 'unreachable' || info.error.kind === 'not-served'))
      return { skipped: info.error } satisfies Skipped
    if (item.kind === 'probe') {
      const probe = probes.find((p) => p.id === item.key)
      if (!probe) throw new Error(`no probe "${item.key}" in the probe set`)
      return runProbe(client, settings.api, item.model, probe)
    }
    return runIteration(client, {
      api: settings.api,
      model: item.model,
      iteration: Number(item.key),
      concurrency: settings.batchSize,
      minDurationMs: settings.minDurationMs,
      maxTokens: settings.benchMaxTokens,
      signal,
    })
  }
}
