// The process's configuration, read from the environment once, at start, here in the composition root and nowhere
// else: every variable a function, an adapter or a connection reads is listed in SETTINGS with its default and its
// validation, and the rooms below receive the parsed values (ProcessOptions, Deps.settings, function factories).
// A bad value stops the process at start with every bad variable named at once; nothing half-configured starts.
//
// The gate sidecar's own settings (FUNCTION=gate: GATE_UPSTREAM, GATE_MODEL, ...) are parsed by gateConfig()
// (cmd/gate/config.ts), called with this same environment by main.ts; the OpenTelemetry SDK reads its own
// OTEL_* variables itself (exporter endpoint, headers): only whether tracing is on is decided here.

import { FAILSAFE_BLIND_MS } from '../../pkg/core/fail-safe.js'
import type { GateDeployment } from '../../pkg/core/gate.js'
import { RESYNC_MS } from '../../pkg/core/resync.js'
import { DEFAULT_CONNECT_WAIT_MS, type NatsCredentialFiles } from '../../pkg/jetstream/connect.js'
import { natsReplicas } from '../../pkg/jetstream/topology.js'
import { kubeRequestTimeoutMs } from '../../pkg/kube/deadline.js'
import { parseWatchNamespaces } from '../../pkg/kube/scope.js'
import { HANDOVER_MS } from '../../pkg/observability/exporter-lease.js'
import { type TracingOptions, tracingConfigured } from '../../pkg/observability/tracing.js'
import type { ProcessOptions } from '../../pkg/transport/deps.js'
import type { Settings } from '../../pkg/transport/function.js'
import {
  DEFAULT_BACKOFF_MAX_MS,
  DEFAULT_BACKOFF_MS,
  DEFAULT_MAX_DELIVER,
} from '../../pkg/transport/jetstream-adapter.js'

export type Env = Readonly<Record<string, string | undefined>>

/** One variable: its raw value (undefined when unset) to its parsed value, or a problem (a string) to report. */
type Parse<T> = (raw: string | undefined, env: Env) => T | { problem: string }

const problem = (text: string) => ({ problem: text })
const isProblem = (v: unknown): v is { problem: string } =>
  typeof v === 'object' && v !== null && 'problem' in v && Object.keys(v).length === 1
/** Unset and empty are the same: a manifest that sets `VALUE: ""` means "the default". */
const blank = (raw: string | undefined) => raw === undefined || raw.trim() === ''

/** A whole number in [min, max]; `fallback` when unset or empty. */
const int =
  (fallback: number, min: number, max = Number.MAX_SAFE_INTEGER, what = `a whole number from ${min}`) =>
  (name: string): Parse<number> =>
  (raw) => {
    if (blank(raw)) return fallback
    const n = Number((raw as string).trim())
    return Number.isInteger(n) && n >= min && n <= max ? n : problem(`${name} must be ${what}, not "${raw}"`)
  }
const optionalPositive =
  (name: string): Parse<number | undefined> =>
  (raw) => {
    if (blank(raw)) return undefined
    const n = Number(raw)
    return Number.isInteger(n) && n > 0 ? n : problem(`${name} must be a positive integer, not "${raw}"`)
  }
const oneOf =
  <T extends string>(values: readonly T[], fallback: T) =>
  (name: string): Parse<T> =>
  (raw) => {
    if (blank(raw)) return fallback
    const v = (raw as string).trim()
    return (values as readonly string[]).includes(v)
      ? (v as T)
      : problem(`${name} must be one of ${values.join(' | ')}, not "${raw}"`)
  }
/** A flag that is on unless set to exactly "false" (as every such flag has always been read). */
const unlessFalse = (raw: string | undefined) => raw !== 'false'
const text = (raw: string | undefined) => raw
const nonEmpty = (raw: string | undefined) => raw || undefined
const httpUrl =
  (name: string, what: string): Parse<string | undefined> =>
  (raw) => {
    if (blank(raw)) return undefined
    const value = (raw as string).trim()
    let url: URL | undefined
    try {
      url = new URL(value)
    } catch {
      url = undefined
    }
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:'))
      return problem(`${name} must be ${what}, not "${value}"`)
    return url.href
  }
const thrown =
  <T>(parse: (raw: string | undefined) => T): Parse<T> =>
  (raw) => {
    try {
      return parse(raw)
    } catch (err) {
      return problem((err as Error).message)
    }
  }

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

/**
 * Every setting: its variable, what it means, and how it is parsed (with its default). The usage text of `--help`
 * (main.ts) and docs/operating.md describe them; test/unit/config.test.ts checks that the documented names are these.
 */
export const SETTINGS = {
  natsUrl: { env: 'NATS_URL', parse: nonEmpty },
  function: { env: 'FUNCTION', parse: text },
  natsProvision: { env: 'NATS_PROVISION', parse: unlessFalse },
  natsReplicas: { env: 'NATS_REPLICAS', parse: thrown((raw) => natsReplicas({ NATS_REPLICAS: raw })) },
  natsConnectWaitMs: {
    env: 'NATS_CONNECT_WAIT_MS',
    parse: int(DEFAULT_CONNECT_WAIT_MS, 1, undefined, 'a positive integer')('NATS_CONNECT_WAIT_MS'),
  },
  natsCredsFile: { env: 'NATS_CREDS_FILE', parse: nonEmpty },
  natsNkeySeedFile: { env: 'NATS_NKEY_SEED_FILE', parse: nonEmpty },
  provisionConsumers: {
    env: 'PROVISION_CONSUMERS',
    parse: (raw: string | undefined) =>
      raw
        ?.split(',')
        .map((n) => n.trim())
        .filter(Boolean),
  },
  demandAckAll: {
    env: 'DEMAND_ACK_POLICY',
    parse: (raw: string | undefined, env: Env) => {
      const v = oneOf(['explicit', 'all'] as const, 'explicit')('DEMAND_ACK_POLICY')(raw, env)
      return isProblem(v) ? v : v === 'all'
    },
  },
  kSink: { env: 'K_SINK', parse: nonEmpty },
  bridgeSinkTokenFile: { env: 'BRIDGE_SINK_TOKEN_FILE', parse: nonEmpty },
  transport: { env: 'TRANSPORT', parse: oneOf(['jetstream', 'http'] as const, 'jetstream')('TRANSPORT') },
  port: {
    env: 'PORT',
    parse: (raw: string | undefined, env: Env) =>
      blank(raw) ? undefined : int(0, 0, 65_535, 'a port number 0..65535')('PORT')(raw, env),
  },
  host: { env: 'HOST', parse: text },
  watch: { env: 'WATCH', parse: (raw: string | undefined) => (raw ? raw !== 'false' : undefined) },
  watchNamespaces: { env: 'WATCH_NAMESPACES', parse: thrown(parseWatchNamespaces) },
  ingressToken: { env: 'INGRESS_TOKEN', parse: text },
  ingressTokenFile: { env: 'INGRESS_TOKEN_FILE', parse: nonEmpty },
  httpAuthToken: { env: 'HTTP_AUTH_TOKEN', parse: text },
  httpAuthTokenFile: { env: 'HTTP_AUTH_TOKEN_FILE', parse: nonEmpty },
  httpToken: { env: 'HTTP_TOKEN', parse: text },
  httpTokenFile: { env: 'HTTP_TOKEN_FILE', parse: nonEmpty },
  httpAuth: { env: 'HTTP_AUTH', parse: oneOf(['token', 'kubernetes', 'none'] as const, 'token')('HTTP_AUTH') },
  httpAuthAudience: { env: 'HTTP_AUTH_AUDIENCE', parse: (raw: string | undefined) => raw ?? '' },
  httpAuthAllowed: { env: 'HTTP_AUTH_ALLOWED', parse: text },
  httpBodyLimitBytes: { env: 'HTTP_BODY_LIMIT_BYTES', parse: optionalPositive('HTTP_BODY_LIMIT_BYTES') },
  httpRequestTimeoutMs: { env: 'HTTP_REQUEST_TIMEOUT_MS', parse: optionalPositive('HTTP_REQUEST_TIMEOUT_MS') },
  kubeRequestTimeoutMs: {
    env: 'KUBE_REQUEST_TIMEOUT_MS',
    parse: thrown((raw) => kubeRequestTimeoutMs({ KUBE_REQUEST_TIMEOUT_MS: raw })),
  },
  gateImage: { env: 'GATE_IMAGE', parse: (raw: string | undefined) => raw?.trim() || undefined },
  gateNatsUrl: { env: 'GATE_NATS_URL', parse: (raw: string | undefined) => raw?.trim() || undefined },
  failSafeBlindMs: {
    env: 'FAILSAFE_BLIND_MS',
    parse: int(
      FAILSAFE_BLIND_MS,
      1_000,
      undefined,
      'a whole number of milliseconds, at least 1000',
    )('FAILSAFE_BLIND_MS'),
  },
  ingressReadyUrl: {
    env: 'INGRESS_READY_URL',
    parse: httpUrl('INGRESS_READY_URL', "the gateway ingress's http(s) /readyz URL"),
  },
  metricsHandoverMs: {
    env: 'METRICS_HANDOVER_MS',
    parse: int(HANDOVER_MS, 0, undefined, 'whole milliseconds ≥ 0')('METRICS_HANDOVER_MS'),
  },
  resyncMs: {
    env: 'RESYNC_MS',
    parse: (raw: string | undefined) => {
      if (raw === undefined || raw === '') return RESYNC_MS
      const ms = Number(raw)
      if (!Number.isFinite(ms) || ms < 0) return problem(`RESYNC_MS must be a number of milliseconds, not "${raw}"`)
      // 0 turns the sweep off; anything else is at least a second.
      return ms === 0 ? 0 : Math.max(1000, Math.round(ms))
    },
  },
  cancelDeletePods: { env: 'CANCEL_DELETE_PODS', parse: unlessFalse },
  maxDeliver: {
    env: 'MAX_DELIVER',
    parse: int(DEFAULT_MAX_DELIVER, 1, undefined, 'a positive integer')('MAX_DELIVER'),
  },
  retryBackoffMs: {
    env: 'RETRY_BACKOFF_MS',
    parse: int(DEFAULT_BACKOFF_MS, 1, undefined, 'a positive integer')('RETRY_BACKOFF_MS'),
  },
  retryBackoffMaxMs: {
    env: 'RETRY_BACKOFF_MAX_MS',
    parse: int(DEFAULT_BACKOFF_MAX_MS, 1, undefined, 'a positive integer')('RETRY_BACKOFF_MAX_MS'),
  },
  logLevel: { env: 'LOG_LEVEL', parse: oneOf(LOG_LEVELS, 'info')('LOG_LEVEL') },
  /** The pod's name (Kubernetes sets it): who holds the exporter lease, who reported an Event. */
  hostname: { env: 'HOSTNAME', parse: (raw: string | undefined) => raw ?? 'local' },
  otelServiceName: { env: 'OTEL_SERVICE_NAME', parse: text },
} as const satisfies Record<string, { env: string; parse: Parse<unknown> }>

type Parsed<P> = P extends (...args: never[]) => infer R ? Exclude<R, { problem: string }> : never
export type Config = { -readonly [K in keyof typeof SETTINGS]: Parsed<(typeof SETTINGS)[K]['parse']> } & {
  /** OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT: whether to load the SDK. */
  tracing: boolean
  /** GATE_IMAGE and GATE_NATS_URL together: the background gate admit injects. */
  gate?: GateDeployment
}

/** The variables read, as the deployment manifests and the docs spell them. */
export const SETTING_NAMES: readonly string[] = Object.values(SETTINGS).map((s) => s.env)

export class ConfigError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`bad configuration: ${problems.join('; ')}`)
    this.name = 'ConfigError'
  }
}

/** Parses every setting; throws a ConfigError naming every bad variable at once. */
export function loadConfig(env: Env): Config {
  // A plain copy: process.env is an exotic object, and a caller's later change must not reach this parse.
  const vars: Env = { ...env }
  const problems: string[] = []
  const out: Record<string, unknown> = {}
  for (const [key, setting] of Object.entries(SETTINGS)) {
    const value = (setting.parse as Parse<unknown>)(vars[setting.env], vars)
    if (isProblem(value)) problems.push(value.problem)
    else out[key] = value
  }
  const config = out as Config
  if (Boolean(config.gateImage) !== Boolean(config.gateNatsUrl))
    problems.push('GATE_IMAGE and GATE_NATS_URL enable the background gate together; one is unset')
  else if (config.gateImage && config.gateNatsUrl)
    config.gate = { image: config.gateImage, natsUrl: config.gateNatsUrl }
  config.tracing = tracingConfigured(vars)
  if (problems.length) throw new ConfigError(problems)
  return config
}

/**
 * What the rooms below get from the configuration when a process opens its connections (pkg/transport/deps.ts
 * ProcessOptions): the functions' and the adapter's settings, NATS's connect wait, credentials and replicas, the
 * Kubernetes client's deadline and this pod's name, the background gate.
 */
export function processSettings(config: Config) {
  const settings: Settings = {
    maxDeliver: config.maxDeliver,
    retryBackoffMs: config.retryBackoffMs,
    retryBackoffMaxMs: config.retryBackoffMaxMs,
    demandAckAll: config.demandAckAll,
    cancelDeletePods: config.cancelDeletePods,
    failSafeBlindMs: config.failSafeBlindMs,
    ingressReadyUrl: config.ingressReadyUrl,
    resyncMs: config.resyncMs,
  }
  return {
    settings,
    gate: config.gate,
    connectWaitMs: config.natsConnectWaitMs,
    natsCredentials: natsCredentials(config),
    replicas: config.natsReplicas,
    kubeRequestTimeoutMs: config.kubeRequestTimeoutMs,
    hostname: config.hostname,
  } satisfies Partial<ProcessOptions>
}

/** NATS_CREDS_FILE and NATS_NKEY_SEED_FILE as pkg/jetstream/connect.ts natsServerOptions takes them. */
export const natsCredentials = (config: Config): NatsCredentialFiles => ({
  NATS_CREDS_FILE: config.natsCredsFile,
  NATS_NKEY_SEED_FILE: config.natsNkeySeedFile,
})

/**
 * How tracing is started (pkg/observability/tracing.ts startTracing) when the OpenTelemetry variables turn it on, else
 * undefined: service.name is OTEL_SERVICE_NAME, else `model-backfill-<FUNCTION>` (`model-backfill` for all).
 */
export function tracingOptions(config: Config): TracingOptions | undefined {
  if (!config.tracing) return undefined
  const fn = config.function
  return { serviceName: config.otelServiceName ?? (fn ? `model-backfill-${fn}` : 'model-backfill') }
}
