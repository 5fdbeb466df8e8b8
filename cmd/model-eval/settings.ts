// model-eval's settings: read once from the environment at start, each bad value named, nothing half-configured
// runs. The names are the model-eval-gauntlet template's (the user guide's `spec.env` specialises them).

import { z } from 'zod'
import type { GateProfile } from './gate-profile.js'

export const GAUNTLET_APIS = ['chat', 'completions'] as const
export type GauntletApi = (typeof GAUNTLET_APIS)[number]

export interface ModelTarget {
  /** The OpenAI `model` of every request: the name the endpoint serves it under. */
  name: string
  /** The engine kind as the template names it (vllm, sglang, llamacpp, …): provenance, and which /props to read. */
  engine: string
}

export interface Settings {
  baseUrl: string
  /** Sent as a Bearer token when set (a gateway in front may want one). */
  apiKey?: string
  models: ModelTarget[]
  api: GauntletApi
  /** The readiness word the readiness probe expects back (FlexInfer's gauntlet takes it the same way). */
  expect: string
  batchSize: number
  iters: number
  minDurationMs: number
  /** Tokens asked per benchmark request. */
  benchMaxTokens: number
  requestTimeoutMs: number
  maxRetries: number
  workloadClass: string
  runId: string
  /** Whether the run identity came from the controller (FLEXINFER_RUN_ID); without it, nothing resumes. */
  runIdFromController: boolean
  attempt: number
  /** The PostgreSQL connection string (DATABASE_URL, from a Secret); absent: the ConfigMaps only. */
  databaseUrl?: string
  /** Whether to use the Kubernetes ConfigMaps (progress without PostgreSQL, the latest benchmark value). */
  configMaps: boolean
  namespace?: string
  terminationLogPath: string
  /** Not read from the environment: the gate found in front of the endpoint at start (./gate-profile.ts). */
  gate?: GateProfile
}

/** `MODELS`: `name=engine[,name=engine…]`, as the user guide's example (`gemma4-26b-a4b-gptq-5930k=vllm`). */
export function parseModels(raw: string): ModelTarget[] {
  const out: ModelTarget[] = []
  for (const part of raw.split(',')) {
    const entry = part.trim()
    if (!entry) continue
    const eq = entry.indexOf('=')
    const name = (eq < 0 ? entry : entry.slice(0, eq)).trim()
    const engine = (eq < 0 ? 'unknown' : entry.slice(eq + 1)).trim()
    if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(name) || name.length > 200)
      throw new Error(`"${name}" is not a model name usable in a ConfigMap name (lowercase letters, digits, - and .)`)
    if (!/^[a-z0-9][-a-z0-9._]*$/i.test(engine)) throw new Error(`"${engine}" is not an engine kind`)
    if (out.some((m) => m.name === name)) throw new Error(`model "${name}" is listed twice`)
    out.push({ name, engine })
  }
  if (out.length === 0) throw new Error('no model listed')
  if (out.length > MAX_MODELS) throw new Error(`${out.length} models listed; at most ${MAX_MODELS}`)
  return out
}

export const MAX_MODELS = 8
export const MAX_ITERS = 100

/** `30s`, `2m`, `500ms` or a number of seconds. */
export function parseDurationMs(raw: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(raw.trim())
  if (!m) throw new Error(`"${raw}" is not a duration (e.g. 30s, 2m, 500ms)`)
  const n = Number(m[1])
  const unit = m[2] ?? 's'
  return Math.round(n * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[unit as 'ms'])
}

const int = (min: number, max: number, fallback: number) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return fallback
      const n = Number(v)
      if (!Number.isInteger(n) || n < min || n > max) {
        ctx.addIssue({ code: 'custom', message: `expected a whole number ${min}..${max}, got "${v}"` })
        return z.NEVER
      }
      return n
    })

const duration = (fallback: string, minMs: number, maxMs: number) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      try {
        const ms = parseDurationMs(v?.trim() ? v : fallback)
        if (ms < minMs || ms > maxMs) throw new Error(`"${v}" is outside ${minMs} ms..${maxMs} ms`)
        return ms
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message })
        return z.NEVER
      }
    })

const url = z
  .string({ error: 'is not set (the OpenAI-compatible endpoint, e.g. the gate: http://127.0.0.1:8000/v1)' })
  .trim()
  .refine((v) => {
    try {
      const u = new URL(v)
      return u.protocol === 'http:' || u.protocol === 'https:'
    } catch {
      return false
    }
  }, 'is not an http(s) URL')
  .transform((v) => v.replace(/\/+$/, ''))

const schema = z.object({
  OPENAI_BASE_URL: url,
  OPENAI_API_KEY: z.string().optional(),
  MODELS: z.string({ error: 'is not set (name=engine, e.g. gemma4-26b-a4b-gptq-5930k=vllm)' }).transform((v, ctx) => {
    try {
      return parseModels(v)
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message })
      return z.NEVER
    }
  }),
  GAUNTLET_API: z.enum(GAUNTLET_APIS, { error: 'expected chat or completions' }).optional().default('chat'),
  GAUNTLET_EXPECT: z
    .string()
    .optional()
    .transform((v) => (v?.trim() ? v.trim() : 'READY'))
    .refine((v) => v.length <= 64 && !/\s/.test(v), 'expected one word of at most 64 characters'),
  BATCH_SIZE: int(1, 1024, 64),
  ITERS: int(1, MAX_ITERS, 3),
  MIN_DURATION: duration('30s', 100, 3_600_000),
  BENCH_MAX_TOKENS: int(1, 4096, 64),
  REQUEST_TIMEOUT: duration('120s', 1000, 600_000),
  MAX_RETRIES: int(0, 10, 4),
  FLEXINFER_WORKLOAD_CLASS: z
    .string()
    .optional()
    .transform((v) => (v?.trim() ? v.trim().toLowerCase() : 'background'))
    .refine((v) => v === 'background', 'model-eval runs only as background work (expected background)'),
  FLEXINFER_RUN_ID: z
    .string()
    .optional()
    .refine((v) => v === undefined || v === '' || /^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/.test(v), {
      message: 'expected a Kubernetes name of at most 63 characters',
    }),
  FLEXINFER_ATTEMPT: int(1, 1_000_000, 1),
  DATABASE_URL: z
    .string()
    .optional()
    .refine((v) => !v || /^postgres(ql)?:\/\//.test(v), 'expected a postgres:// or postgresql:// connection string'),
  RESULT_CONFIGMAPS: z
    .enum(['true', 'false'], { error: 'expected true or false' })
    .optional()
    .transform((v) => v !== 'false'),
  POD_NAMESPACE: z.string().optional(),
  TERMINATION_MESSAGE_PATH: z.string().optional().default('/dev/termination-log'),
})

/** Every setting checked; throws one Error naming each bad one. `randomId` names a run that has no identity. */
export function readSettings(env: Readonly<Record<string, string | undefined>>, randomId: () => string): Settings {
  const parsed = schema.safeParse(env)
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `${i.path.join('.') || 'environment'} ${i.message}`)
    throw new Error(`model-eval settings:\n  ${lines.join('\n  ')}`)
  }
  const e = parsed.data
  if (!e.RESULT_CONFIGMAPS && !e.DATABASE_URL)
    throw new Error('model-eval settings:\n  RESULT_CONFIGMAPS=false needs DATABASE_URL: the result has nowhere to go')
  const runId = e.FLEXINFER_RUN_ID || `local-${randomId()}`
  return {
    baseUrl: e.OPENAI_BASE_URL,
    apiKey: e.OPENAI_API_KEY || undefined,
    models: e.MODELS,
    api: e.GAUNTLET_API,
    expect: e.GAUNTLET_EXPECT,
    batchSize: e.BATCH_SIZE,
    iters: e.ITERS,
    minDurationMs: e.MIN_DURATION,
    benchMaxTokens: e.BENCH_MAX_TOKENS,
    requestTimeoutMs: e.REQUEST_TIMEOUT,
    maxRetries: e.MAX_RETRIES,
    workloadClass: e.FLEXINFER_WORKLOAD_CLASS,
    runId,
    runIdFromController: Boolean(e.FLEXINFER_RUN_ID),
    attempt: e.FLEXINFER_ATTEMPT,
    databaseUrl: e.DATABASE_URL || undefined,
    configMaps: e.RESULT_CONFIGMAPS,
    namespace: e.POD_NAMESPACE?.trim() || undefined,
    terminationLogPath: e.TERMINATION_MESSAGE_PATH,
  }
}
