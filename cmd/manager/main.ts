// `npm start` (every function, the local watcher and the metrics endpoint in one process) and the container
// entry point: `FUNCTION=admit` runs one function on its JetStream consumer (KEDA); with `TRANSPORT=http` it is
// served over HTTP instead (Knative); `FUNCTION=ingress` is the authenticated HTTP ingress for gateways; `FUNCTION=gate`
// is the background gate sidecar admit injects into opted-in Jobs (cmd/gate, docs/gate.md);
// `FUNCTION=bridge` forwards JetStream's events to the Knative Broker at K_SINK (pkg/transport/bridge.ts);
// `FUNCTION=provision` creates the NATS topology and exits (cmd/manager/provision.ts).

import { readFileSync } from 'node:fs'
// Only what every mode needs is imported here; each mode loads its own modules below (await import), so a function
// that scales to zero does not pay at start for fastify, the bridge or the provision step (cold start). The registry
// is names and loaders only: it imports no function's code.
import { FUNCTION_NAMES, functionLoaders, loadFunction } from '../../functions/registry.js'
import { createLogger, setLogLevel } from '../../pkg/observability/log.js'
import { type Config, loadConfig, processSettings, tracingOptions } from './config.js'

// As cmd/manager/provision.ts names them (not imported from there: its imports are the provision step's).
const DEFAULT_CONSUMER_OWNERS = FUNCTION_NAMES
const CONSUMER_OWNERS = [...FUNCTION_NAMES, 'bridge']

const usage = (DEFAULT_REQUEST_TIMEOUT_MS: number) => `model-backfill: event functions for opportunistic model backfill

usage: node dist/bundle/main.js [function]         (or: npm start)

environment:
  NATS_URL            NATS server (required)
  KUBECONFIG          kubeconfig (in a pod: its ServiceAccount)
  FUNCTION            all (default) | ${FUNCTION_NAMES.join(' | ')} | ingress | bridge | provision | gate
                      (comma-separated: several functions in one process)
  NATS_PROVISION      true (default): create the streams, buckets and consumers at start; false: only bind to what
                      FUNCTION=provision made (deployed: the functions' NATS users may not create them)
  NATS_REPLICAS       replicas of the streams, KV buckets and consumers that provisioning creates or updates
                      (default 1: one nats-server; 3 on a JetStream cluster)
  PROVISION_CONSUMERS FUNCTION=provision: whose durable consumers to create (default ${DEFAULT_CONSUMER_OWNERS.join(',')};
                      known: ${CONSUMER_OWNERS.join(',')})
  DEMAND_ACK_POLICY   explicit (default) | all: demand's consumers ack in batches (AckAll), for demand as one
                      replica only; set it on provision (which migrates the consumers) and demand alike
  K_SINK              FUNCTION=bridge: where JetStream's events are POSTed (the Broker; Knative's SinkBinding sets it)
  BRIDGE_SINK_TOKEN_FILE  FUNCTION=bridge: a projected ServiceAccount token for the Broker's audience, sent as a
                      bearer token and re-read when rotated (the Broker's authentication-oidc; docs/operations.md)
  TRANSPORT           jetstream (default: pull consumers, KEDA) | http (one function as a Knative Service)
  PORT, HOST          HTTP port and address (metrics/health; with TRANSPORT=http or ingress: CloudEvents on POST /)
  WATCH               run the local ApiServerSource stand-in (default: only when running all functions)
  WATCH_NAMESPACES    comma-separated namespaces to manage, at most 64, each read per namespace (default: the
                      whole cluster)
  INGRESS_TOKEN[_FILE]  bearer token of the ingress (required for FUNCTION=ingress; _FILE: a mounted Secret,
                      re-read when it changes). Empty, short (< 16) or placeholder values stop the process.
  HTTP_AUTH_TOKEN[_FILE]  bearer token TRANSPORT=http requires on POST / (required; HTTP_TOKEN[_FILE] is the old
                      name). HTTP_AUTH=none serves without one: development only, never deployed.
  HTTP_AUTH           token (default) | kubernetes: verify Knative's OIDC sender tokens (feature authentication-oidc)
                      by TokenReview, for HTTP_AUTH_AUDIENCE, from the identities in HTTP_AUTH_ALLOWED (comma-
                      separated usernames, or prefixes ending in *; default: this namespace's ServiceAccounts)
                      | none (development only)
  HTTP_BODY_LIMIT_BYTES   largest request body (413 above; default 1 MiB, ingress 256 KiB)
  HTTP_REQUEST_TIMEOUT_MS time to receive a whole request (408 after; default ${DEFAULT_REQUEST_TIMEOUT_MS})
  KUBE_REQUEST_TIMEOUT_MS  deadline of every Kubernetes API request, answer included (default 10000); one that
                      runs out fails as a transient error and its event is retried (watches are exempt)
  GATE_IMAGE, GATE_NATS_URL  admit: the background gate it injects into the Jobs of backfills that opt in (the
                      ai.flexinfer/gate-endpoint-env annotation): this release's image, and NATS as pods in the users'
                      namespaces reach it (docs/gate.md)
  FUNCTION=gate       the gate sidecar itself (admit sets these): GATE_UPSTREAM, GATE_NAMESPACE, GATE_MODEL, GATE_JOB,
                      GATE_ENGINE (vllm | sglang | llamacpp | none), GATE_MAX_IN_FLIGHT, GATE_PORT, GATE_PRIORITY (overrides the
                      engine's value), GATE_NATS_BOUND_MS (NATS unanswered this long closes the gate; default 2000)
  FAILSAFE_BLIND_MS   cancel: foreground demand unobservable (NATS unreachable, no demand instance pulling) for
                      longer than this and every running backfill Job is deleted through Kubernetes alone (default
                      5000, at least 1000; docs/operations.md)
  INGRESS_READY_URL   admit, cancel: the gateway ingress's /readyz through its Service (deployed:
                      http://model-backfill-ingress/readyz). An ingress that cannot publish is unobservable foreground
                      demand: nothing is admitted, and past FAILSAFE_BLIND_MS cancel's fail-safe deletes the running
                      Jobs. Unset: no ingress is watched (gateways publish to NATS themselves)
  METRICS_HANDOVER_MS a cancel instance taking over the exporter lease waits this long before it exports the
                      cluster-wide series (default 45000: longer than the PodMonitor's 30 s scrape interval)
  LOG_LEVEL           pino level (default info)
  NATS_CREDS_FILE, NATS_NKEY_SEED_FILE  the process's NATS identity: a JWT .creds file or an NKey seed (a mounted
                      Secret, re-read at every reconnect; deploy/nats/README.md)
  NATS_CONNECT_WAIT_MS  how long a process started while NATS is unreachable waits for it (default 120000)
  RESYNC_MS           lifecycle: the resync sweep's period (default 30000, at least 1000; 0 turns it off)
  CANCEL_DELETE_PODS  cancel: false leaves the attempt's pods to the garbage collector (default true: deleted at once)
  MAX_DELIVER, RETRY_BACKOFF_MS, RETRY_BACKOFF_MAX_MS  deliveries of a failing event before it is dead-lettered
                      (default 8), with a doubling delay between them (default 250, at most 30000)
  HOSTNAME            this pod (Kubernetes sets it): the exporter lease's holder, the reporter of its Events
  OTEL_SERVICE_NAME   with tracing on (OTEL_EXPORTER_OTLP_ENDPOINT, ...): service.name (default
                      model-backfill-<FUNCTION>)

Every value is checked at start: a bad one stops the process with every bad variable named.
`

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  const { DEFAULT_REQUEST_TIMEOUT_MS } = await import('../../pkg/transport/http-adapter.js')
  process.stdout.write(usage(DEFAULT_REQUEST_TIMEOUT_MS))
  process.exit(0)
}

// `--warm-compile-cache`, run once by the image's build with NODE_COMPILE_CACHE set (Node >= 22), as the user the
// functions run as (the cache is kept per uid): loads every mode's and every function's modules, starting nothing and
// connecting nowhere, so the cache holds V8's code for the whole bundle and a function's start reads it instead of
// compiling its modules again. Read-only at run time (readOnlyRootFilesystem): what it lacks is compiled as before.
if (process.argv.includes('--warm-compile-cache')) {
  await Promise.all([
    ...Object.values(functionLoaders).map((load) => load()),
    import('./runner.js'),
    import('./provision.js'),
    import('../../pkg/transport/http-adapter.js'),
    import('../../pkg/transport/bridge.js'),
    import('../../pkg/transport/deps.js'),
    import('../../pkg/transport/auth/token.js'),
    import('../../pkg/transport/auth/kubernetes.js'),
    import('../../pkg/kube/client.js'),
    import('../../pkg/kube/shared-caches.js'),
    import('../../functions/ingress/index.js'),
    import('../gate/index.js'),
    import('../gate/config.js'),
  ])
  const { flushCompileCache, getCompileCacheDir } = (await import('node:module')) as {
    flushCompileCache?: () => void
    getCompileCacheDir?: () => string | undefined
  }
  flushCompileCache?.()
  process.stdout.write(`compile cache: ${getCompileCacheDir?.() ?? 'off (NODE_COMPILE_CACHE unset, or Node < 22)'}\n`)
  process.exit(0)
}

// The one read of the environment (cmd/manager/config.ts): every bad value stops the process here, each one named.
let config: Config
try {
  config = loadConfig(process.env)
} catch (err) {
  createLogger('model-backfill').error((err as Error).message)
  process.exit(2)
}
setLogLevel(config.logLevel)
const log = createLogger('model-backfill')
const natsUrl = config.natsUrl
if (!natsUrl) {
  log.error('NATS_URL is not set (with the local environment: `. .testenv/env.sh`)')
  process.exit(2)
}
const only = config.function ?? process.argv[2]
/** The ingress takes small foreground requests only: a quarter of the functions' limit. */
const INGRESS_BODY_LIMIT = 256 * 1024
/** Default of HTTP_AUTH_ALLOWED: the ServiceAccounts of this pod's namespace (where Knative makes the Triggers'). */
function ownNamespaceServiceAccounts(): string {
  try {
    const ns = readFileSync('/var/run/secrets/kubernetes.io/serviceaccount/namespace', 'utf8').trim()
    return ns ? `system:serviceaccount:${ns}:*` : ''
  } catch {
    return ''
  }
}
const http = only === 'ingress' || config.transport === 'http'
const namespaces = config.watchNamespaces
// Tracing on (OTEL_* set): the SDK is loaded now, before the first event; off, it is never loaded (cold start).
const tracing = tracingOptions(config)
if (tracing) await (await import('../../pkg/observability/tracing.js')).startTracing(tracing)
// What every long-running process below starts with.
const common = { natsUrl, provision: config.natsProvision, logger: log, ...processSettings(config) }
let stop: () => Promise<void>
if (only === 'gate') {
  const { gateConfig } = await import('../gate/config.js')
  const { startGate } = await import('../gate/index.js')
  let sidecar: ReturnType<typeof gateConfig>
  try {
    // The sidecar's own settings (admit sets them: pkg/core/gate.ts GATE_ENV), parsed from this same environment.
    sidecar = gateConfig(process.env)
  } catch (err) {
    log.error((err as Error).message)
    process.exit(2)
  }
  const gate = await startGate(sidecar, log)
  log.info({ url: gate.url, model: `${sidecar.namespace}/${sidecar.model}` }, 'gate listening')
  stop = gate.stop
} else if (only === 'provision') {
  try {
    const { provision } = await import('./provision.js')
    await provision({ natsUrl, consumers: config.provisionConsumers, log, config })
    process.exit(0)
  } catch (err) {
    log.error({ err }, 'provisioning the NATS topology failed')
    process.exit(1)
  }
} else if (only === 'bridge') {
  const sink = config.kSink
  if (!sink) {
    log.error('the bridge needs K_SINK (the Broker address; a SinkBinding injects it)')
    process.exit(2)
  }
  const { startBridge } = await import('../../pkg/transport/bridge.js')
  const bridge = await startBridge({
    ...common,
    sink,
    tokenFile: config.bridgeSinkTokenFile,
    namespaces,
    httpPort: config.port ?? 8080,
    httpHost: config.host ?? '0.0.0.0',
  })
  stop = bridge.stop
} else if (http) {
  const port = config.port ?? 8080
  const host = config.host ?? '0.0.0.0'
  const limits = {
    bodyLimit: config.httpBodyLimitBytes ?? (only === 'ingress' ? INGRESS_BODY_LIMIT : undefined),
    requestTimeoutMs: config.httpRequestTimeoutMs,
  }
  // Placeholder, empty or unreadable tokens stop the process here with the reason (never the value).
  const { tokenFromEnv } = await import('../../pkg/transport/auth/token.js')
  const { startHttpFunction } = await import('../../pkg/transport/http-adapter.js')
  const token = await (async () => {
    try {
      const tokens = {
        INGRESS_TOKEN: config.ingressToken,
        INGRESS_TOKEN_FILE: config.ingressTokenFile,
        HTTP_AUTH_TOKEN: config.httpAuthToken,
        HTTP_AUTH_TOKEN_FILE: config.httpAuthTokenFile,
        HTTP_TOKEN: config.httpToken,
        HTTP_TOKEN_FILE: config.httpTokenFile,
      }
      if (only === 'ingress') return await tokenFromEnv('INGRESS_TOKEN', tokens, { log })
      const name = config.httpAuthToken !== undefined || config.httpAuthTokenFile ? 'HTTP_AUTH_TOKEN' : 'HTTP_TOKEN'
      return await tokenFromEnv(name, tokens, { log })
    } catch (err) {
      log.error((err as Error).message)
      process.exit(2)
    }
  })()
  if (only === 'ingress') {
    if (!token) {
      log.error('the ingress needs a bearer token: set INGRESS_TOKEN_FILE (a mounted Secret) or INGRESS_TOKEN')
      process.exit(2)
    }
    const { INGRESS_TYPES, ingressFunction } = await import('../../functions/ingress/index.js')
    const served = await startHttpFunction(ingressFunction(), {
      ...common,
      ...limits,
      port,
      host,
      token,
      acceptTypes: INGRESS_TYPES,
    })
    stop = served.stop
  } else {
    // Only this function's code (functions/registry.ts); the Kubernetes client only with HTTP_AUTH=kubernetes or
    // for a function that calls the apiserver (pkg/transport/deps.ts).
    const load = only ? await loadFunction(only) : undefined
    const factory = load && (() => load(common.settings))
    if (!factory) {
      log.error(`TRANSPORT=http serves one function: FUNCTION must be one of ${FUNCTION_NAMES.join(', ')}`)
      process.exit(2)
    }
    const { scoped } = await import('../../pkg/transport/deps.js')
    const authenticator =
      config.httpAuth === 'kubernetes'
        ? await (async () => {
            const { TokenReviewAuth } = await import('../../pkg/transport/auth/kubernetes.js')
            const { loadKubeConfig } = await import('../../pkg/kube/http.js')
            try {
              return new TokenReviewAuth(loadKubeConfig(), {
                audience: config.httpAuthAudience,
                allowed: (config.httpAuthAllowed ?? ownNamespaceServiceAccounts()).split(',').map((a) => a.trim()),
              })
            } catch (err) {
              log.error((err as Error).message)
              process.exit(2)
            }
          })()
        : undefined
    if (!token && !authenticator && config.httpAuth !== 'none') {
      log.error(
        'TRANSPORT=http needs a bearer token: set HTTP_AUTH_TOKEN_FILE (a mounted Secret) or HTTP_AUTH_TOKEN ' +
          '(HTTP_AUTH=none serves unauthenticated: development only)',
      )
      process.exit(2)
    }
    if (!token && !authenticator) log.warn('HTTP_AUTH=none: POST / is unauthenticated (development only)')
    // Scoped like the runner: events about other namespaces skipped, reads per managed namespace (WATCH_NAMESPACES).
    const served = await startHttpFunction(scoped(factory(), namespaces), {
      ...common,
      ...limits,
      namespaces,
      port,
      host,
      token,
      authenticator,
    })
    stop = served.stop
  }
} else {
  const { startRunner } = await import('./runner.js')
  const runner = await startRunner({
    ...common,
    config,
    functions: only && only !== 'all' ? only.split(',') : undefined,
    watch: config.watch ?? (!only || only === 'all'),
    httpPort: config.port ?? 9464,
    httpHost: config.host ?? '127.0.0.1',
    namespaces,
  })
  log.info(`metrics at ${runner.httpUrl}/metrics`)
  stop = runner.stop
}

let stopping = false
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return
    stopping = true
    log.info({ signal }, 'draining in-flight events, then stopping')
    stop()
      .then(async () => (await import('../../pkg/observability/tracing.js')).stopTracing()) // export the spans still batched (no-op when tracing is off)
      .then(() => process.exit(0))
      .catch((err) => {
        log.error({ err }, 'shutdown failed')
        process.exit(1)
      })
  })
}
