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
import { renderUsage } from './usage.js'

const usage = () => `model-backfill: event functions for opportunistic model backfill

usage: node dist/bundle/main.js [function]         (or: npm start)

environment (docs/reference/settings.md):
${renderUsage()}

Every value is checked at start: a bad one stops the process with every bad variable named.
`

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(usage())
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
