// Runs functions in one process over JetStream pull consumers: `npm start` runs all of them (plus the local
// Kubernetes watcher and the metrics endpoint); a KEDA Deployment runs one. Tests use the same entry point.

import { randomUUID } from 'node:crypto'
import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { FUNCTION_NAMES, type FunctionFactory, loadFunction } from '../../functions/registry.js'
import { consumerName, instanceName } from '../../pkg/jetstream/names.js'
import { EXPORTER_KEY, ExporterLease } from '../../pkg/observability/exporter-lease.js'
import { createLogger } from '../../pkg/observability/log.js'
import { type PulledConsumer, registerConsumerLag } from '../../pkg/observability/ops-metrics.js'
import { startTracing } from '../../pkg/observability/tracing.js'
import { deleteInstanceConsumers, openDeps, type ProcessOptions, scoped } from '../../pkg/transport/deps.js'
import type { Deps } from '../../pkg/transport/function.js'
import { type RunningFunction, runOnJetStream } from '../../pkg/transport/jetstream-adapter.js'
import { BackfillMetrics } from '../../pkg/transport/metrics.js'
import type { Watcher } from '../../pkg/transport/watcher.js'
import { type Config, loadConfig, processSettings, tracingOptions } from './config.js'

export interface RunnerOptions extends ProcessOptions {
  functions?: string[]
  /** Run the local ApiServerSource stand-in (off where Knative's ApiServerSource feeds the events). */
  watch?: boolean
  /** Port for /metrics, /healthz, /readyz; undefined: no HTTP server. 0: any free port. */
  httpPort?: number
  httpHost?: string
  /**
   * Give this runner durable consumers of its own (`<function>-<instance>`, from new messages on, removed at
   * stop), so several independent runners can share one NATS server — each test file runs its own system this
   * way, scoped to its namespace. Production runners leave it unset and share the functions' consumers.
   */
  instance?: string
  /**
   * The configuration (cmd/manager/config.ts) whose settings the functions get, where `opts` does not set them: main.ts
   * passes the one it parsed; without it (tests, the benchmark) the environment is parsed here, once per runner.
   */
  config?: Config
}

export interface Runner {
  deps: Deps
  functions: RunningFunction[]
  metrics: BackfillMetrics
  httpUrl?: string
  stop(): Promise<void>
}

export async function startRunner(options: RunnerOptions): Promise<Runner> {
  const config = options.config ?? loadConfig(process.env)
  const opts: RunnerOptions = { ...processSettings(config), ...options }
  // Tracing as main.ts starts it, for a runner started without it (tests, the benchmark); once per process.
  const tracing = options.config ? undefined : tracingOptions(config)
  if (tracing) await startTracing(tracing)
  const names = opts.functions ?? [...FUNCTION_NAMES]
  // Only the functions run here are loaded (functions/registry.ts): demand's process never loads the Kubernetes client.
  const factories = new Map<string, FunctionFactory>()
  for (const name of names) {
    const factory = await loadFunction(name)
    if (!factory) throw new Error(`unknown function "${name}"; known: ${FUNCTION_NAMES.join(', ')}`)
    factories.set(name, factory)
  }
  // A cancel process keeps the fail-safe's promise while it waits for NATS (an outage at its start).
  const beforeNats = names.includes('cancel')
    ? await (async () => {
        const [{ startBeforeNats }, { refusal }] = await Promise.all([
          import('../../functions/cancel/fail-safe.js'),
          import('../../functions/cancel/index.js'),
        ])
        const log = opts.logger ?? createLogger('model-backfill')
        return startBeforeNats(
          {
            kubeconfig: opts.kubeconfig,
            namespaces: opts.namespaces,
            log,
            now: opts.now,
            settings: opts.settings,
            kubeRequestTimeoutMs: opts.kubeRequestTimeoutMs,
            hostname: opts.hostname,
          },
          refusal,
        )
      })()
    : undefined
  const deps = await openDeps({
    ...opts,
    name: `model-backfill:${names.join(',')}`,
    functions: names,
    // The watcher (the ApiServerSource stand-in) reads the apiserver whatever the functions.
    kube: opts.watch || undefined,
  })
  deps.instance = opts.instance
  const { bus, kube, log } = deps
  // The cluster-wide series are exported by one process at a time: the holder of the exporter lease, contended for
  // by processes running cancel (always on, in both overlays). Every other process exports only its own metrics.
  const lease = names.includes('cancel')
    ? new ExporterLease(bus.kv.claims, instanceName(EXPORTER_KEY, opts.instance), {
        id: `${config.hostname}/${randomUUID()}`,
        handoverMs: config.metricsHandoverMs,
      })
    : undefined
  const metrics = new BackfillMetrics(opts.namespaces, lease ? () => lease.holding() : () => false)
  await metrics.start(bus)
  await lease?.start()
  deps.backfillStates = metrics.states
  const running: RunningFunction[] = []
  const pulled: PulledConsumer[] = []
  for (const name of names) {
    const fn = scoped((factories.get(name) as FunctionFactory)(opts.settings), opts.namespaces, opts.instance)
    running.push(await runOnJetStream(deps, fn))
    for (const { stream } of fn.subscriptions) {
      const consumer = consumerName(fn.name, stream)
      const pending = () => bus.jsm.consumers.info(stream, consumer).then((i) => i.num_pending + i.num_ack_pending)
      pulled.push({ stream, consumer, pending })
    }
  }
  // The cancel function's own fail-safe runs now.
  await beforeNats?.stop()
  registerConsumerLag(metrics.registry, () => pulled)
  let watcher: Watcher | undefined
  if (opts.watch) {
    const { startWatcher } = await import('../../pkg/transport/watcher.js')
    watcher = await startWatcher(kube.kc, kube, bus, log, opts.namespaces)
  }

  // Three GET routes on node:http, not fastify: a function that scales to zero would load fastify at every cold start
  // for routes that need none of it.
  let httpUrl: string | undefined
  let ready = true
  const send = (res: ServerResponse, code: number, type: string, body: string) => {
    res.writeHead(code, { 'content-type': type, 'content-length': Buffer.byteLength(body) })
    res.end(body)
  }
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'text/plain', 'method not allowed\n')
    if (path === '/metrics') {
      metrics.metrics().then(
        (body) => send(res, 200, metrics.registry.contentType, body),
        () => send(res, 500, 'text/plain', 'metrics failed\n'),
      )
    } else if (path === '/healthz') {
      send(res, 200, 'application/json; charset=utf-8', JSON.stringify({ ok: true }))
    } else if (path === '/readyz') {
      const ok = ready && !bus.nc.isClosed()
      const body = { ok, functions: running.map((f) => ({ name: f.name, ...f.stats })) }
      send(res, ok ? 200 : 503, 'application/json; charset=utf-8', JSON.stringify(body))
    } else send(res, 404, 'text/plain', 'not found\n')
  })
  // Slow or idle clients cannot hold sockets open forever.
  server.requestTimeout = 10_000
  server.headersTimeout = 10_000
  server.keepAliveTimeout = 5_000
  if (opts.httpPort !== undefined) {
    const host = opts.httpHost ?? '127.0.0.1'
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(opts.httpPort, host, () => {
        server.off('error', reject)
        resolve()
      })
    })
    const { port } = server.address() as AddressInfo
    httpUrl = `http://${host.includes(':') ? `[${host}]` : host}:${port}`
  }
  log.info({ functions: names, watch: Boolean(opts.watch), httpUrl }, 'model-backfill running')

  return {
    deps,
    functions: running,
    metrics,
    httpUrl,
    async stop() {
      ready = false
      await watcher?.stop()
      for (const f of running) await f.stop()
      if (opts.instance)
        await deleteInstanceConsumers(
          bus,
          running.map((f) => f.name),
        )
      await lease?.stop()
      await metrics.stop()
      if (server.listening) {
        server.closeAllConnections()
        await new Promise<void>((resolve) => server.close(() => resolve()))
      }
      await deps.close()
    },
  }
}
