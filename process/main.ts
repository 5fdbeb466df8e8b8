// `npm start` (every function, the local watcher and the metrics endpoint in one process) and the container
// entry point: `FUNCTION=admit` runs one function on its JetStream consumer (KEDA); with `TRANSPORT=http` it is
// served over HTTP instead (Knative); `FUNCTION=ingress` is the authenticated HTTP ingress for gateways; `FUNCTION=gate`
// is the background gate sidecar admit injects into opted-in Jobs (functions/gate, docs/gate.md);
// `FUNCTION=bridge` forwards JetStream's events to the Knative Broker at K_SINK (transport/bridge.ts);
// `FUNCTION=provision` creates the NATS topology and exits (process/provision.ts).

import { readFileSync } from 'node:fs'
// Only what every mode needs is imported here; each mode loads its own modules below (await import), so a function
// that scales to zero does not pay at start for fastify, the bridge or the provision step (cold start).
import { ingressReadyUrl } from '../admission/ingress.js'
import { FUNCTION_NAMES } from '../functions/names.js'
import { natsReplicas } from '../jetstream/bus.js'
import { kubeRequestTimeoutMs } from '../kube/kube-common.js'
import { parseWatchNamespaces } from '../kube/scope.js'
import { metricsHandoverMs } from '../observability/exporter-lease.js'
import { createLogger } from '../observability/log.js'

// As process/provision.ts names them (not imported from there: it loads every function).
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
                      GATE_ENGINE (vllm | sglang | none), GATE_MAX_IN_FLIGHT, GATE_PORT, GATE_PRIORITY (overrides the
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
`

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  const { DEFAULT_REQUEST_TIMEOUT_MS } = await import('../transport/http-adapter.js')
  process.stdout.write(usage(DEFAULT_REQUEST_TIMEOUT_MS))
  process.exit(0)
}

const log = createLogger('model-backfill')
const natsUrl = process.env.NATS_URL
if (!natsUrl) {
  log.error('NATS_URL is not set (with the local environment: `. .testenv/env.sh`)')
  process.exit(2)
}
try {
  // Read where each Kube is made; checked here so a bad value stops the process at once, with the reason.
  kubeRequestTimeoutMs()
  natsReplicas()
} catch (err) {
  log.error((err as Error).message)
  process.exit(2)
}
const only = process.env.FUNCTION ?? process.argv[2]
try {
  // The same for the metrics handover and, where cancel runs, the fail-safe's bound.
  metricsHandoverMs()
  ingressReadyUrl()
  if (!only || only === 'all' || only.split(',').includes('cancel')) {
    ;(await import('../functions/cancel/fail-safe.js')).failSafeBoundMs()
  }
} catch (err) {
  log.error((err as Error).message)
  process.exit(2)
}
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
function positive(name: string): number | undefined {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return undefined
  const n = Number(raw)
  if (!Number.isInteger(n) || n <= 0) {
    log.error(`${name} must be a positive integer, not "${raw}"`)
    process.exit(2)
  }
  return n
}
const http = only === 'ingress' || process.env.TRANSPORT === 'http'
let namespaces: string[] | undefined
try {
  namespaces = parseWatchNamespaces(process.env.WATCH_NAMESPACES)
} catch (err) {
  log.error((err as Error).message)
  process.exit(2)
}
// Tracing on (OTEL_* set): the SDK is loaded now, before the first event; off, it is never loaded (cold start).
{
  const { startTracing, tracingConfigured } = await import('../observability/tracing.js')
  if (tracingConfigured()) await startTracing()
}
// What every long-running process below starts with.
const common = { natsUrl, provision: process.env.NATS_PROVISION !== 'false', logger: log }
let stop: () => Promise<void>
if (only === 'gate') {
  const { gateConfig } = await import('../functions/gate/config.js')
  const { startGate } = await import('../functions/gate/index.js')
  let config: ReturnType<typeof gateConfig>
  try {
    config = gateConfig(process.env)
  } catch (err) {
    log.error((err as Error).message)
    process.exit(2)
  }
  const gate = await startGate(config, log)
  log.info({ url: gate.url, model: `${config.namespace}/${config.model}` }, 'gate listening')
  stop = gate.stop
} else if (only === 'provision') {
  try {
    const { provision } = await import('./provision.js')
    await provision({
      natsUrl,
      consumers: process.env.PROVISION_CONSUMERS?.split(',')
        .map((n) => n.trim())
        .filter(Boolean),
      log,
    })
    process.exit(0)
  } catch (err) {
    log.error({ err }, 'provisioning the NATS topology failed')
    process.exit(1)
  }
} else if (only === 'bridge') {
  const sink = process.env.K_SINK
  if (!sink) {
    log.error('the bridge needs K_SINK (the Broker address; a SinkBinding injects it)')
    process.exit(2)
  }
  const { startBridge } = await import('../transport/bridge.js')
  const bridge = await startBridge({
    ...common,
    sink,
    tokenFile: process.env.BRIDGE_SINK_TOKEN_FILE || undefined,
    namespaces,
    httpPort: Number(process.env.PORT ?? 8080),
    httpHost: process.env.HOST ?? '0.0.0.0',
  })
  stop = bridge.stop
} else if (http) {
  const port = Number(process.env.PORT ?? 8080)
  const host = process.env.HOST ?? '0.0.0.0'
  const limits = {
    bodyLimit: positive('HTTP_BODY_LIMIT_BYTES') ?? (only === 'ingress' ? INGRESS_BODY_LIMIT : undefined),
    requestTimeoutMs: positive('HTTP_REQUEST_TIMEOUT_MS'),
  }
  // Placeholder, empty or unreadable tokens stop the process here with the reason (never the value).
  const { tokenFromEnv } = await import('../transport/auth/token.js')
  const { startHttpFunction } = await import('../transport/http-adapter.js')
  const token = await (async () => {
    try {
      if (only === 'ingress') return await tokenFromEnv('INGRESS_TOKEN', process.env, { log })
      const env = process.env
      const name = env.HTTP_AUTH_TOKEN !== undefined || env.HTTP_AUTH_TOKEN_FILE ? 'HTTP_AUTH_TOKEN' : 'HTTP_TOKEN'
      return await tokenFromEnv(name, env, { log })
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
    const { INGRESS_TYPES, ingressFunction } = await import('../functions/ingress/index.js')
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
    // Only this function's code (functions/load.ts); the Kubernetes client only with HTTP_AUTH=kubernetes or for
    // a function that calls the apiserver (transport/deps.ts).
    const { loadFunction } = await import('../functions/load.js')
    const factory = only ? await loadFunction(only) : undefined
    if (!factory) {
      log.error(`TRANSPORT=http serves one function: FUNCTION must be one of ${FUNCTION_NAMES.join(', ')}`)
      process.exit(2)
    }
    const { scoped } = await import('../transport/deps.js')
    const authenticator =
      process.env.HTTP_AUTH === 'kubernetes'
        ? await (async () => {
            const { TokenReviewAuth } = await import('../transport/auth/kubernetes.js')
            const { loadKubeConfig } = await import('../kube/kube.js')
            try {
              return new TokenReviewAuth(loadKubeConfig(), {
                audience: process.env.HTTP_AUTH_AUDIENCE ?? '',
                allowed: (process.env.HTTP_AUTH_ALLOWED ?? ownNamespaceServiceAccounts())
                  .split(',')
                  .map((a) => a.trim()),
              })
            } catch (err) {
              log.error((err as Error).message)
              process.exit(2)
            }
          })()
        : undefined
    if (!token && !authenticator && process.env.HTTP_AUTH !== 'none') {
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
    functions: only && only !== 'all' ? only.split(',') : undefined,
    watch: process.env.WATCH ? process.env.WATCH !== 'false' : !only || only === 'all',
    httpPort: Number(process.env.PORT ?? 9464),
    httpHost: process.env.HOST ?? '127.0.0.1',
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
      .then(async () => (await import('../observability/tracing.js')).stopTracing()) // export the spans still batched (no-op when tracing is off)
      .then(() => process.exit(0))
      .catch((err) => {
        log.error({ err }, 'shutdown failed')
        process.exit(1)
      })
  })
}
