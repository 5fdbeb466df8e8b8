// `npm start` (every function, the local watcher and the metrics endpoint in one process) and the container
// entry point: `FUNCTION=admit` runs one function on its JetStream consumer (KEDA); with `TRANSPORT=http` it is
// served over HTTP instead (Knative); `FUNCTION=ingress` is the authenticated HTTP ingress for gateways;
// `FUNCTION=bridge` forwards JetStream's events to the Knative Broker at K_SINK (runtime/bridge.ts);
// `FUNCTION=provision` creates the NATS topology and exits (runtime/provision.ts).

import { functionFactories } from '../functions/index.js'
import { INGRESS_TYPES, ingress } from '../functions/ingress/index.js'
import { startBridge } from './bridge.js'
import { readToken, startHttpFunction } from './http-adapter.js'
import { kubeRequestTimeoutMs } from './kube.js'
import { createLogger } from './log.js'
import { natsReplicas } from './nats.js'
import { CONSUMER_OWNERS, DEFAULT_CONSUMER_OWNERS, provision } from './provision.js'
import { startRunner } from './runner.js'

const USAGE = `model-backfill: event functions for opportunistic model backfill

usage: node dist/runtime/main.js [function]        (or: npm start)

environment:
  NATS_URL            NATS server (required)
  KUBECONFIG          kubeconfig (in a pod: its ServiceAccount)
  FUNCTION            all (default) | ${Object.keys(functionFactories).join(' | ')} | ingress | bridge | provision
                      (comma-separated: several functions in one process)
  NATS_PROVISION      true (default): create the streams, buckets and consumers at start; false: only bind to what
                      FUNCTION=provision made (deployed: the functions' NATS users may not create them)
  NATS_REPLICAS       replicas of the streams, KV buckets and consumers that provisioning creates or updates
                      (default 1: one nats-server; 3 on a JetStream cluster)
  PROVISION_CONSUMERS FUNCTION=provision: whose durable consumers to create (default ${DEFAULT_CONSUMER_OWNERS.join(',')};
                      known: ${CONSUMER_OWNERS.join(',')})
  K_SINK              FUNCTION=bridge: where JetStream's events are POSTed (the Broker; Knative's SinkBinding sets it)
  TRANSPORT           jetstream (default: pull consumers, KEDA) | http (one function as a Knative Service)
  PORT, HOST          HTTP port and address (metrics/health; with TRANSPORT=http or ingress: CloudEvents on POST /)
  WATCH               run the local ApiServerSource stand-in (default: only when running all functions)
  WATCH_NAMESPACES    comma-separated namespaces to manage (default: the whole cluster)
  INGRESS_TOKEN[_FILE]  bearer token of the ingress (required for FUNCTION=ingress; _FILE: a mounted Secret)
  HTTP_TOKEN[_FILE]     optional bearer token for TRANSPORT=http
  KUBE_REQUEST_TIMEOUT_MS  deadline of every Kubernetes API request, answer included (default 10000); one that
                      runs out fails as a transient error and its event is retried (watches are exempt)
  LOG_LEVEL           pino level (default info)
`

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(USAGE)
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
const http = only === 'ingress' || process.env.TRANSPORT === 'http'
const namespaces = process.env.WATCH_NAMESPACES?.split(',').map((n) => n.trim())
// What every long-running process below starts with.
const common = { natsUrl, provision: process.env.NATS_PROVISION !== 'false', logger: log }
let stop: () => Promise<void>
if (only === 'provision') {
  try {
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
  const bridge = await startBridge({
    ...common,
    sink,
    namespaces,
    httpPort: Number(process.env.PORT ?? 8080),
    httpHost: process.env.HOST ?? '0.0.0.0',
  })
  stop = bridge.stop
} else if (http) {
  const port = Number(process.env.PORT ?? 8080)
  const host = process.env.HOST ?? '0.0.0.0'
  if (only === 'ingress') {
    const token = readToken('INGRESS_TOKEN')
    if (!token) {
      log.error('the ingress needs a bearer token: set INGRESS_TOKEN or INGRESS_TOKEN_FILE')
      process.exit(2)
    }
    const served = await startHttpFunction(ingress, {
      ...common,
      port,
      host,
      token,
      acceptTypes: INGRESS_TYPES,
    })
    stop = served.stop
  } else {
    const factory = only ? functionFactories[only] : undefined
    if (!factory) {
      log.error(
        `TRANSPORT=http serves one function: FUNCTION must be one of ${Object.keys(functionFactories).join(', ')}`,
      )
      process.exit(2)
    }
    const served = await startHttpFunction(factory(), {
      ...common,
      port,
      host,
      token: readToken('HTTP_TOKEN'),
    })
    stop = served.stop
  }
} else {
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
      .then(() => process.exit(0))
      .catch((err) => {
        log.error({ err }, 'shutdown failed')
        process.exit(1)
      })
  })
}
