// The knative overlay's admission path for `npm run bench`, in a process of its own (so that it does not load the
// benchmark's process, which timestamps what it measures): admit served over HTTP (as its Knative Service), the
// bridge on consumers of its own (`bridge-bench`, from new messages on), and between them
//   broker   (default) Knative Eventing's real Broker: the overlay's Broker (knative/broker.yaml, on an
//            InMemoryChannel) and its admit Triggers (knative/triggers.yaml), run by the real controllers, ingress,
//            filter and channel dispatcher (test/knative/eventing.ts; built by dev/scripts/install-binaries.sh);
//   stand-in a Fastify stand-in that routes by type as the Triggers do (no Knative hop: our own hops' cost).
// Events for lifecycle are answered 202 and dropped on this path (no Trigger here): the benchmark's JetStream runner
// consumes them. Loopback only. Prints one JSON line when ready; SIGTERM stops it and removes what it created.
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { CoreV1Api, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node'
import Fastify from 'fastify'
import { parseAllDocuments, stringify } from 'yaml'
import { catalog } from '../../events/catalog.js'
import { admitFunction } from '../../functions/admit/index.js'
import { createLogger } from '../../pkg/observability/log.js'
import { startBridge } from '../../pkg/transport/bridge.js'
import { startHttpFunction } from '../../pkg/transport/http-adapter.js'
import { ensureBinaries, repoRoot } from '../../test/env/binaries.js'
import { run, waitFor } from '../../test/env/exec.js'
import { applyDefaults, exposeService, type Manifest, startKnativeEventing } from '../../test/knative/eventing.js'

const [natsUrl, kubeconfigPath, mode = 'broker'] = process.argv.slice(2)
if (!natsUrl || !kubeconfigPath || !['broker', 'stand-in'].includes(mode))
  throw new Error('usage: knative-path.ts <natsUrl> <kubeconfig> [broker|stand-in]')
const kubeconfig = new KubeConfig()
kubeconfig.loadFromFile(kubeconfigPath)
const logger = createLogger('bench-knative-path')
const MIME_CE = 'application/cloudevents+json'

const served = await startHttpFunction(admitFunction(), { natsUrl, kubeconfig, port: 0, host: '127.0.0.1', logger })
const cleanup: (() => Promise<unknown>)[] = [() => served.stop()]
let sink: string

if (mode === 'stand-in') {
  const admitTypes = new Set(
    Object.entries(catalog)
      .filter(([, entry]) => (entry.consumers as readonly string[]).includes('admit'))
      .map(([type]) => type),
  )
  const broker = Fastify({ logger: false })
  broker.addContentTypeParser(MIME_CE, { parseAs: 'string' }, (_req, body, done) => done(null, body))
  broker.post('/', async (req, reply) => {
    const body = req.body as string
    if (!admitTypes.has((JSON.parse(body) as { type: string }).type)) return reply.code(202).send()
    const res = await fetch(served.url, { method: 'POST', headers: { 'content-type': MIME_CE }, body })
    await res.arrayBuffer()
    return reply.code(res.status).send()
  })
  sink = await broker.listen({ port: 0, host: '127.0.0.1' })
  cleanup.unshift(() => broker.close())
} else {
  sink = await startRealBroker()
}

/** Knative Eventing with the overlay's Broker and admit Triggers in a namespace of its own; the Broker's address. */
async function startRealBroker(): Promise<string> {
  const binaries = ensureBinaries()
  const core = kubeconfig.makeApiClient(CoreV1Api)
  const custom = kubeconfig.makeApiClient(CustomObjectsApi)
  const kubectl = (args: string[], opts?: { input?: string }) =>
    run(binaries.kubectl, ['--kubeconfig', kubeconfigPath as string, ...args], { input: opts?.input })
  const knative = await startKnativeEventing({
    binDir: binaries.knativeEventing,
    env: {
      kc: kubeconfig,
      kubeconfigPath: kubeconfigPath as string,
      apiserverUrl: kubeconfig.getCurrentCluster()?.server as string,
      kubectl,
      saKubeConfig: () => Promise.reject(new Error('no ApiServerSource on this path')),
    },
  })
  cleanup.push(() => knative.stop())
  const namespace = `bench-knative-${randomBytes(3).toString('hex')}`
  await core.createNamespace({ body: { metadata: { name: namespace } } })
  cleanup.push(() => core.deleteNamespace({ name: namespace }).catch(() => {}))

  const overlay = (file: string) =>
    parseAllDocuments(readFileSync(join(repoRoot, 'knative', file), 'utf8'))
      .map((d) => d.toJS() as Manifest | null)
      .filter((m): m is Manifest => Boolean(m?.kind))
  const broker = overlay('broker.yaml')
  // Failures are not measured here: no dead-letter sink (the bridge's Service) in this namespace.
  for (const b of broker.filter((m) => m.kind === 'Broker')) delete b.spec.delivery?.deadLetterSink
  for (const cm of broker.filter((m) => m.kind === 'ConfigMap')) {
    cm.data['channel-template-spec'] = 'apiVersion: messaging.knative.dev/v1\nkind: InMemoryChannel\n'
  }
  const admitService = 'model-backfill-admit'
  const triggers = overlay('triggers.yaml').filter((t) => t.spec.subscriber?.ref?.name === admitService)
  for (const t of triggers) t.spec.subscriber = { uri: `http://${admitService}.${namespace}.svc.cluster.local/` }
  const manifests = [...broker, ...triggers]
  applyDefaults(manifests, namespace)
  const applied = await kubectl(['apply', '-n', namespace, '-f', '-'], {
    input: manifests.map((m) => stringify(m)).join('---\n'),
  })
  if (applied.code !== 0) throw new Error(`applying the overlay's Broker and Triggers failed:\n${applied.stderr}`)
  await exposeService(core, namespace, admitService, Number(new URL(served.url).port))

  const ready = async (plural: string, name: string) =>
    waitFor(
      `${plural} ${name} Ready`,
      async () => {
        const o = (await custom.getNamespacedCustomObject({
          group: 'eventing.knative.dev',
          version: 'v1',
          plural,
          namespace,
          name,
        })) as Manifest
        const ok = o.status?.conditions?.some(
          (c: { type: string; status: string }) => c.type === 'Ready' && c.status === 'True',
        )
        return ok ? o : undefined
      },
      { timeoutMs: 120_000, intervalMs: 250 },
    )
  const b = await ready('brokers', 'model-backfill')
  for (const t of triggers) await ready('triggers', t.metadata.name)
  return (await knative.proxy.resolve(b.status.address.url)).toString()
}

const bridge = await startBridge({ natsUrl, kubeconfig, sink, instance: 'bench', logger })
cleanup.unshift(() => bridge.stop())
process.stdout.write(`${JSON.stringify({ ready: true, mode, admit: served.url, broker: sink })}\n`)

process.once('SIGTERM', async () => {
  for (const stop of cleanup) await stop().catch(() => {})
  process.exit(0)
})
