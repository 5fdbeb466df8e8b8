// Runs functions in one process over JetStream pull consumers: `npm start` runs all of them (plus the local
// Kubernetes watcher and the metrics endpoint); a KEDA Deployment runs one. Tests use the same entry point.
import Fastify from 'fastify'
import { functionFactories } from '../functions/index.js'
import { deleteInstanceConsumers, openDeps, type ProcessOptions, scoped } from './deps.js'
import type { EventFunction } from './function.js'
import { type RunningFunction, runOnJetStream } from './jetstream-adapter.js'
import { BackfillMetrics } from './metrics.js'
import type { Deps } from './reconcile.js'
import { startWatcher, type Watcher } from './watcher.js'

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
}

export interface Runner {
  deps: Deps
  functions: RunningFunction[]
  metrics: BackfillMetrics
  httpUrl?: string
  stop(): Promise<void>
}

export async function startRunner(opts: RunnerOptions): Promise<Runner> {
  const names = opts.functions ?? Object.keys(functionFactories)
  for (const name of names) {
    if (!functionFactories[name])
      throw new Error(`unknown function "${name}"; known: ${Object.keys(functionFactories).join(', ')}`)
  }
  const deps = await openDeps({ ...opts, name: `model-backfill:${names.join(',')}`, functions: names })
  deps.instance = opts.instance
  const { bus, kube, log } = deps
  const metrics = new BackfillMetrics(opts.namespaces)
  await metrics.start(bus)
  const running: RunningFunction[] = []
  for (const name of names) {
    const fn = scoped((functionFactories[name] as () => EventFunction)(), opts.namespaces, opts.instance)
    running.push(await runOnJetStream(deps, fn))
  }
  let watcher: Watcher | undefined
  if (opts.watch) watcher = await startWatcher(kube.kc, kube, bus, log, opts.namespaces)

  let httpUrl: string | undefined
  const app = Fastify({ logger: false })
  let ready = true
  if (opts.httpPort !== undefined) {
    app.get('/metrics', async (_req, reply) => {
      reply.header('content-type', metrics.registry.contentType)
      return metrics.metrics()
    })
    app.get('/healthz', async () => ({ ok: true }))
    app.get('/readyz', async (_req, reply) => {
      const ok = ready && !bus.nc.isClosed()
      reply.code(ok ? 200 : 503)
      return { ok, functions: running.map((f) => ({ name: f.name, ...f.stats })) }
    })
    httpUrl = await app.listen({ port: opts.httpPort, host: opts.httpHost ?? '127.0.0.1' })
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
      await metrics.stop()
      await app.close()
      await deps.close()
    },
  }
}
