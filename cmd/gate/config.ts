// The gate's settings, as admit sets them on the sidecar (pkg/core/gate.ts GATE_ENV) or a person sets them by hand.
import { GATE_ENGINES, GATE_ENV, GATE_PORT, type GateEngine, MAX_GATE_MAX_IN_FLIGHT } from '../../pkg/core/gate.js'
import { isObjectName } from '../../pkg/core/names.js'
import type { NatsCredentialFiles } from '../../pkg/jetstream/connect.js'

export interface GateConfig {
  natsUrl: string
  /** NATS_NKEY_SEED_FILE / NATS_CREDS_FILE: the gate's own NATS identity, mounted by admit (pkg/core/gate.ts). */
  natsCredentials: NatsCredentialFiles
  upstream: string
  namespace: string
  model: string
  job: string
  engine: GateEngine
  priority?: number
  maxInFlight: number
  port: number
  host: string
  /** The health listener (probes, /metrics) on the pod's address; undefined: none (a gate run by hand). */
  health?: { port: number; host: string }
  /** How long foreground demand may be out of sight (NATS unanswered) before the gate closes. */
  natsBoundMs: number
}

export const DEFAULT_NATS_BOUND_MS = 2_000

/** Every setting checked, each bad one named with what was expected; nothing half-configured starts. */
export function gateConfig(env: Readonly<Record<string, string | undefined>>): GateConfig {
  const problems: string[] = []
  const need = (name: string) => {
    const v = env[name]?.trim()
    if (!v) problems.push(`${name} is not set`)
    return v ?? ''
  }
  const int = (name: string, fallback: number | undefined, min: number, max: number) => {
    const raw = env[name]?.trim()
    if (!raw) return fallback
    const n = Number(raw)
    if (!Number.isInteger(n) || n < min || n > max)
      problems.push(`${name}="${raw}": expected a whole number ${min}..${max}`)
    return n
  }
  const natsUrl = need('NATS_URL')
  const upstream = need(GATE_ENV.upstream)
  let origin = ''
  if (upstream) {
    try {
      const u = new URL(upstream)
      origin = u.origin
      if (u.protocol !== 'http:' && u.protocol !== 'https:') problems.push(`${GATE_ENV.upstream}: http or https only`)
    } catch {
      problems.push(`${GATE_ENV.upstream}="${upstream}" is not a URL`)
    }
  }
  const namespace = need(GATE_ENV.namespace)
  const model = need(GATE_ENV.model)
  const job = need(GATE_ENV.job)
  for (const [name, v] of [
    [GATE_ENV.namespace, namespace],
    [GATE_ENV.model, model],
    [GATE_ENV.job, job],
  ] as const) {
    if (v && !isObjectName(v)) problems.push(`${name}="${v}" is not a Kubernetes object name`)
  }
  const engine = env[GATE_ENV.engine]?.trim() || 'vllm'
  if (!(GATE_ENGINES as readonly string[]).includes(engine))
    problems.push(`${GATE_ENV.engine}="${engine}": expected one of ${GATE_ENGINES.join(', ')}`)
  const config = {
    natsUrl,
    natsCredentials: {
      NATS_CREDS_FILE: env.NATS_CREDS_FILE || undefined,
      NATS_NKEY_SEED_FILE: env.NATS_NKEY_SEED_FILE || undefined,
    },
    upstream: origin,
    namespace,
    model,
    job,
    engine: engine as GateEngine,
    priority: int('GATE_PRIORITY', undefined, -1_000_000, 1_000_000),
    maxInFlight: int(GATE_ENV.maxInFlight, 2, 1, MAX_GATE_MAX_IN_FLIGHT) as number,
    port: int(GATE_ENV.port, GATE_PORT, 0, 65_535) as number,
    host: env.GATE_HOST?.trim() || '127.0.0.1',
    health: healthListener(int(GATE_ENV.healthPort, undefined, 0, 65_535), env[GATE_ENV.healthHost]),
    natsBoundMs: int('GATE_NATS_BOUND_MS', DEFAULT_NATS_BOUND_MS, 100, 60_000) as number,
  }
  if (problems.length) throw new Error(`gate: ${problems.join('; ')}`)
  return config
}

/** Admit sets the port and the pod's IP (the downward API); without the IP, every address of the pod. */
function healthListener(port: number | undefined, host: string | undefined) {
  if (port === undefined) return undefined
  return { port, host: host?.trim() || '0.0.0.0' }
}
