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
import { DEFAULT_BACKOFF_MAX_MS, DEFAULT_BACKOFF_MS, DEFAULT_MAX_DELIVER } from '../../pkg/transport/consumers.js'
import type { ProcessOptions } from '../../pkg/transport/deps.js'
import type { Settings } from '../../pkg/transport/function.js'
import {
  blank,
  type Env,
  httpUrl,
  int,
  isProblem,
  nonEmpty,
  oneOf,
  optionalPositive,
  type Parse,
  problem,
  text,
  thrown,
  unlessFalse,
} from './config-parse.js'

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

/** One setting: its variable, what it is for, the functions that read it, its default as shown, and its parse. */
interface Setting {
  env: string
  doc: string
  /** The functions (or transports) that read it: `all`, or names such as `cancel`, `http`. */
  who: string
  /** The default as people read it; test/unit/settings-doc.test.ts checks it against what the parse gives. */
  shown?: string
  parse: Parse<unknown>
}

/**
 * Every setting: its variable, what it means, who reads it, and how it is parsed (with its default). `--help`
 * (main.ts, usage.ts renderUsage) and docs/reference/settings.md (dev/tools/docs/generate.ts) are rendered from this
 * table.
 */
export const SETTINGS = {
  natsUrl: {
    doc: 'NATS servers, comma-separated. Required. The user in the URL only names the reply inbox prefix, `_INBOX_<user>`.',
    who: 'all',
    env: 'NATS_URL',
    parse: nonEmpty,
  },
  function: {
    doc: 'Which function this process runs: `all`, one of `source`, `demand`, `admit`, `cancel`, `lifecycle`, or `ingress`, `bridge`, `provision`, `gate`. Comma-separated runs several in one process.',
    who: 'all',
    shown: 'all',
    env: 'FUNCTION',
    parse: text,
  },
  natsProvision: {
    doc: '`true` creates the streams, buckets and consumers at start. `false` only binds to what `FUNCTION=provision` made. Deployed functions run with `false`: their NATS users may not create them.',
    who: 'all',
    shown: 'true',
    env: 'NATS_PROVISION',
    parse: unlessFalse,
  },
  natsReplicas: {
    doc: 'Replicas of the streams, KV buckets and consumers that provisioning creates or updates: 1 for one nats-server, 3 for a JetStream cluster.',
    who: 'provision',
    shown: '1',
    env: 'NATS_REPLICAS',
    parse: thrown((raw) => natsReplicas({ NATS_REPLICAS: raw })),
  },
  natsConnectWaitMs: {
    doc: 'How long a process started while NATS is unreachable waits for it, in milliseconds.',
    who: 'all',
    shown: '120000',
    env: 'NATS_CONNECT_WAIT_MS',
    parse: int(DEFAULT_CONNECT_WAIT_MS, 1, undefined, 'a positive integer')('NATS_CONNECT_WAIT_MS'),
  },
  natsCredsFile: {
    doc: "The process's NATS identity as a JWT `.creds` file. Re-read at every reconnect.",
    who: 'all',
    env: 'NATS_CREDS_FILE',
    parse: nonEmpty,
  },
  natsNkeySeedFile: {
    doc: "The process's NATS identity as an NKey seed file, a mounted Secret. Re-read at every reconnect.",
    who: 'all',
    env: 'NATS_NKEY_SEED_FILE',
    parse: nonEmpty,
  },
  provisionConsumers: {
    doc: 'Whose durable consumers provisioning creates, comma-separated: the five functions by default, `bridge` under Knative.',
    who: 'provision',
    shown: 'source,demand,admit,cancel,lifecycle',
    env: 'PROVISION_CONSUMERS',
    parse: (raw: string | undefined) =>
      raw
        ?.split(',')
        .map((n) => n.trim())
        .filter(Boolean),
  },
  demandAckAll: {
    doc: "`explicit` or `all`. `all` makes demand's consumers ack in batches. Only for demand as one replica. Set it on provision, which migrates the consumers, and on demand alike.",
    who: 'demand, provision',
    shown: 'explicit',
    env: 'DEMAND_ACK_POLICY',
    parse: (raw: string | undefined, env: Env) => {
      const v = oneOf(['explicit', 'all'] as const, 'explicit')('DEMAND_ACK_POLICY')(raw, env)
      return isProblem(v) ? v : v === 'all'
    },
  },
  kSink: {
    doc: "Where the bridge POSTs JetStream's events: the Broker. Knative's SinkBinding sets it.",
    who: 'bridge',
    env: 'K_SINK',
    parse: nonEmpty,
  },
  bridgeSinkTokenFile: {
    doc: "The Broker's OIDC token for the bridge, sent as a bearer token and re-read when it changes. The knative overlay points it at the token Knative mounts.",
    who: 'bridge',
    env: 'BRIDGE_SINK_TOKEN_FILE',
    parse: nonEmpty,
  },
  transport: {
    doc: '`jetstream`: pull consumers, as under KEDA. `http`: one function served as a Knative Service.',
    who: 'all',
    shown: 'jetstream',
    env: 'TRANSPORT',
    parse: oneOf(['jetstream', 'http'] as const, 'jetstream')('TRANSPORT'),
  },
  port: {
    doc: 'HTTP port for metrics and health, and for CloudEvents on `POST /` with `TRANSPORT=http`, the ingress and the bridge. Default 9464 for pull consumers, 8080 over HTTP.',
    who: 'all',
    env: 'PORT',
    parse: (raw: string | undefined, env: Env) =>
      blank(raw) ? undefined : int(0, 0, 65_535, 'a port number 0..65535')('PORT')(raw, env),
  },
  host: {
    doc: 'HTTP listen address. Default 127.0.0.1 for pull consumers, 0.0.0.0 over HTTP.',
    who: 'all',
    env: 'HOST',
    parse: text,
  },
  watch: {
    doc: "Run the local stand-in for Knative's ApiServerSource. On by default only when running all functions.",
    who: 'all',
    env: 'WATCH',
    parse: (raw: string | undefined) => (raw ? raw !== 'false' : undefined),
  },
  watchNamespaces: {
    doc: 'Namespaces to manage, comma-separated, at most 64. Unset: the whole cluster.',
    who: 'all',
    env: 'WATCH_NAMESPACES',
    parse: thrown(parseWatchNamespaces),
  },
  ingressToken: {
    doc: "The ingress's bearer token. Empty, short or placeholder values stop the process.",
    who: 'ingress',
    env: 'INGRESS_TOKEN',
    parse: text,
  },
  ingressTokenFile: {
    doc: "The ingress's bearer token as a mounted Secret, re-read when it changes. The ingress needs this or `INGRESS_TOKEN`.",
    who: 'ingress',
    env: 'INGRESS_TOKEN_FILE',
    parse: nonEmpty,
  },
  httpAuthToken: {
    doc: 'The bearer token `TRANSPORT=http` requires on `POST /`.',
    who: 'http',
    env: 'HTTP_AUTH_TOKEN',
    parse: text,
  },
  httpAuthTokenFile: {
    doc: 'The same token as a mounted Secret.',
    who: 'http',
    env: 'HTTP_AUTH_TOKEN_FILE',
    parse: nonEmpty,
  },
  httpToken: {
    doc: 'An older name of `HTTP_AUTH_TOKEN`.',
    who: 'http',
    env: 'HTTP_TOKEN',
    parse: text,
  },
  httpTokenFile: {
    doc: 'An older name of `HTTP_AUTH_TOKEN_FILE`.',
    who: 'http',
    env: 'HTTP_TOKEN_FILE',
    parse: nonEmpty,
  },
  httpAuth: {
    doc: "`token`, `kubernetes` or `none`. `kubernetes` verifies Knative's OIDC sender tokens by TokenReview. `none` is for development only.",
    who: 'http',
    shown: 'token',
    env: 'HTTP_AUTH',
    parse: oneOf(['token', 'kubernetes', 'none'] as const, 'token')('HTTP_AUTH'),
  },
  httpAuthAudience: {
    doc: 'With `HTTP_AUTH=kubernetes`: the audience the tokens must carry.',
    who: 'http',
    env: 'HTTP_AUTH_AUDIENCE',
    parse: (raw: string | undefined) => raw ?? '',
  },
  httpAuthAllowed: {
    doc: "With `HTTP_AUTH=kubernetes`: the identities allowed, comma-separated usernames or prefixes ending in `*`. Default: this namespace's ServiceAccounts.",
    who: 'http',
    env: 'HTTP_AUTH_ALLOWED',
    parse: text,
  },
  httpBodyLimitBytes: {
    doc: 'Largest request body; 413 above it. Default 1 MiB, 256 KiB on the ingress.',
    who: 'http, ingress',
    env: 'HTTP_BODY_LIMIT_BYTES',
    parse: optionalPositive('HTTP_BODY_LIMIT_BYTES'),
  },
  httpRequestTimeoutMs: {
    doc: 'Time to receive a whole request; 408 after it. Default 10000.',
    who: 'http, ingress',
    env: 'HTTP_REQUEST_TIMEOUT_MS',
    parse: optionalPositive('HTTP_REQUEST_TIMEOUT_MS'),
  },
  kubeRequestTimeoutMs: {
    doc: 'Deadline of every Kubernetes API request, answer included. One that runs out fails as a transient error and its event is retried. Watches are exempt.',
    who: 'all',
    shown: '10000',
    env: 'KUBE_REQUEST_TIMEOUT_MS',
    parse: thrown((raw) => kubeRequestTimeoutMs({ KUBE_REQUEST_TIMEOUT_MS: raw })),
  },
  gateImage: {
    doc: "The background gate's image, which admit injects into the Jobs of backfills that opt in. Set with `GATE_NATS_URL`.",
    who: 'admit',
    env: 'GATE_IMAGE',
    parse: (raw: string | undefined) => raw?.trim() || undefined,
  },
  gateNatsUrl: {
    doc: "NATS as the gate sidecars reach it from the users' namespaces.",
    who: 'admit',
    env: 'GATE_NATS_URL',
    parse: (raw: string | undefined) => raw?.trim() || undefined,
  },
  failSafeBlindMs: {
    doc: 'Foreground demand unobservable for longer than this and cancel deletes every running backfill Job through Kubernetes alone. At least 1000.',
    who: 'cancel',
    shown: '5000',
    env: 'FAILSAFE_BLIND_MS',
    parse: int(
      FAILSAFE_BLIND_MS,
      1_000,
      undefined,
      'a whole number of milliseconds, at least 1000',
    )('FAILSAFE_BLIND_MS'),
  },
  ingressReadyUrl: {
    doc: "The gateway ingress's `/readyz` through its Service. An ingress that cannot publish counts as unobservable foreground demand. Unset: no ingress is watched.",
    who: 'admit, cancel',
    env: 'INGRESS_READY_URL',
    parse: httpUrl('INGRESS_READY_URL', "the gateway ingress's http(s) /readyz URL"),
  },
  metricsHandoverMs: {
    doc: 'How long a cancel instance taking over the exporter lease waits before it exports the cluster-wide series. Keep it longer than the scrape interval.',
    who: 'cancel',
    shown: '45000',
    env: 'METRICS_HANDOVER_MS',
    parse: int(HANDOVER_MS, 0, undefined, 'whole milliseconds ≥ 0')('METRICS_HANDOVER_MS'),
  },
  resyncMs: {
    doc: "The resync sweep's period. At least 1000; 0 turns it off.",
    who: 'lifecycle',
    shown: '30000',
    env: 'RESYNC_MS',
    parse: (raw: string | undefined) => {
      if (raw === undefined || raw === '') return RESYNC_MS
      const ms = Number(raw)
      if (!Number.isFinite(ms) || ms < 0) return problem(`RESYNC_MS must be a number of milliseconds, not "${raw}"`)
      // 0 turns the sweep off; anything else is at least a second.
      return ms === 0 ? 0 : Math.max(1000, Math.round(ms))
    },
  },
  cancelDeletePods: {
    doc: "`false` leaves a cancelled attempt's pods to the garbage collector instead of deleting them at once.",
    who: 'cancel',
    shown: 'true',
    env: 'CANCEL_DELETE_PODS',
    parse: unlessFalse,
  },
  maxDeliver: {
    doc: 'Deliveries of a failing event before it is dead-lettered.',
    who: 'all',
    shown: '8',
    env: 'MAX_DELIVER',
    parse: int(DEFAULT_MAX_DELIVER, 1, undefined, 'a positive integer')('MAX_DELIVER'),
  },
  retryBackoffMs: {
    doc: 'First delay between deliveries of a failing event, doubled each time.',
    who: 'all',
    shown: '250',
    env: 'RETRY_BACKOFF_MS',
    parse: int(DEFAULT_BACKOFF_MS, 1, undefined, 'a positive integer')('RETRY_BACKOFF_MS'),
  },
  retryBackoffMaxMs: {
    doc: 'Longest delay between deliveries of a failing event.',
    who: 'all',
    shown: '30000',
    env: 'RETRY_BACKOFF_MAX_MS',
    parse: int(DEFAULT_BACKOFF_MAX_MS, 1, undefined, 'a positive integer')('RETRY_BACKOFF_MAX_MS'),
  },
  logLevel: {
    doc: 'Log level: `fatal`, `error`, `warn`, `info`, `debug`, `trace` or `silent`.',
    who: 'all',
    shown: 'info',
    env: 'LOG_LEVEL',
    parse: oneOf(LOG_LEVELS, 'info')('LOG_LEVEL'),
  },
  /** The pod's name (Kubernetes sets it): who holds the exporter lease, who reported an Event. */
  hostname: {
    doc: "This pod's name; Kubernetes sets it. Names the exporter lease's holder and the reporter of Events.",
    who: 'all',
    shown: 'local',
    env: 'HOSTNAME',
    parse: (raw: string | undefined) => raw ?? 'local',
  },
  otelServiceName: {
    doc: 'With tracing on: the `service.name`. Default `model-backfill-<FUNCTION>`.',
    who: 'all',
    env: 'OTEL_SERVICE_NAME',
    parse: text,
  },
} as const satisfies Record<string, Setting>

type Parsed<P> = P extends (...args: never[]) => infer R ? Exclude<R, { problem: string }> : never
export type Config = { -readonly [K in keyof typeof SETTINGS]: Parsed<(typeof SETTINGS)[K]['parse']> } & {
  /** OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT: whether to load the SDK. */
  tracing: boolean
  /** GATE_IMAGE and GATE_NATS_URL together: the background gate admit injects. */
  gate?: GateDeployment
}

/** Variables named in `--help` and the reference that other code reads: the Kubernetes client, the SDK, the gate. */
export const OTHER_SETTINGS: readonly { env: string; doc: string; who: string }[] = [
  { env: 'KUBECONFIG', doc: 'The kubeconfig. In a pod: its ServiceAccount.', who: 'all' },
  {
    env: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    doc: 'Turns tracing on and names the collector. The OpenTelemetry SDK reads its other `OTEL_*` variables itself.',
    who: 'all',
  },
  {
    env: 'GATE_UPSTREAM, GATE_NAMESPACE, GATE_MODEL, GATE_JOB, GATE_ENGINE',
    doc: 'The background gate sidecar, `FUNCTION=gate`. admit sets them from the ModelBackfill and its annotations; see docs/gate.md.',
    who: 'gate',
  },
  {
    env: 'GATE_MAX_IN_FLIGHT, GATE_PORT, GATE_HEALTH_PORT, GATE_HEALTH_HOST, GATE_PRIORITY, GATE_NATS_BOUND_MS',
    doc: "The gate sidecar's limits, ports (the proxy's on loopback; the probes' and metrics' on the pod's IP), engine priority and how long NATS may go unanswered before it closes; see docs/gate.md.",
    who: 'gate',
  },
]

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
