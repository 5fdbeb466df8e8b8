// Runs functions in one process over JetStream pull consumers: `npm start` runs all of them (plus the local
// Kubernetes watcher and the metrics endpoint); a KEDA Deployment runs one. Tests use the same entry point.
import { KubeConfig } from '@kubernetes/client-node'
import Fastify from 'fastify'
import { functionFactories } from '../functions/index.js'
import { type RunningFunction, runOnJetStream } from './jetstream-adapter.js'
import { Kube } from './kube.js'
import { createLogger, type Logger } from './log.js'
import { BackfillMetrics } from './metrics.js'
import { Bus } from './nats.js'
import type { Deps } from './reconcile.js'
import { startWatcher, type Watcher } from './watcher.js'

export interface RunnerOptions {
  natsUrl: string
  kubeconfig?: KubeConfig
  functions?: string[]
  /** Run the local ApiServerSource stand-in (off where Knative's ApiServerSource feeds the events). */
  watch?: boolean
  /** Port for /metrics, /healthz, /readyz; undefined: no HTTP server. 0: any free port. */
  httpPort?: number
  httpHost?: string
  logger?: Logger
  now?: () => number
}

export interface Runner {
  deps: Deps
  functions: RunningFunction[]
  metrics: BackfillMetrics
  httpUrl?: string
  stop(): Promise<void>
}

export async function startRunner(opts: RunnerOptions): Promise<Runner> {
  const log = opts.logger ?? createLogger('model-backfill')
  const kc = opts.kubeconfig ?? loadKubeConfig()
  const names = opts.functions ?? Object.keys(functionFactories)
  for (const name of names) {
    if (!functionFactories[name])
      throw new Error(`unknown function "${name}"; known: ${Object.keys(functionFactories).join(', ')}`)
  }
  const bus = await Bus.connect(opts.natsUrl, `model-backfill:${names.join(',')}`)
  const kube = new Kube(kc)
  const deps: Deps = { kube, bus, log, now: opts.now ?? Date.now }
  const metrics = new BackfillMetrics()
  await metrics.start(bus)
  const running: RunningFunction[] = []
  for (const name of names) running.push(await runOnJetStream(deps, (functionFactories[name] as () => never)()))
  let watcher: Watcher | undefined
  if (opts.watch) watcher = await startWatcher(kc, kube, bus, log)

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
      await metrics.stop()
      await app.close()
      await bus.close()
    },
  }
}

export function loadKubeConfig(): KubeConfig {
  const kc = new KubeConfig()
  kc.loadFromDefault()
  return kc
}
