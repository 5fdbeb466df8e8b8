// The knative overlay's admission path for `npm run bench`, in a process of its own (so that it does not load the
// benchmark's process, which timestamps what it measures): admit served over HTTP (as its Knative Service), a
// Broker stand-in that routes by type as the Triggers do (knative/triggers.yaml; what lifecycle takes is answered
// 202, the benchmark's JetStream runner consumes it), and the bridge on consumers of its own (`bridge-bench`, from
// new messages on). Knative's own Broker and channel dispatch are not here. Loopback only. Prints one JSON line
// when ready; SIGTERM stops it.
import { KubeConfig } from '@kubernetes/client-node'
import Fastify from 'fastify'
import { catalog } from '../events/catalog.js'
import { admit } from '../functions/admit/index.js'
import { startBridge } from '../runtime/bridge.js'
import { startHttpFunction } from '../runtime/http-adapter.js'
import { createLogger } from '../runtime/log.js'

const [natsUrl, kubeconfigPath] = process.argv.slice(2)
if (!natsUrl || !kubeconfigPath) throw new Error('usage: knative-path.ts <natsUrl> <kubeconfig>')
const kubeconfig = new KubeConfig()
kubeconfig.loadFromFile(kubeconfigPath)
const logger = createLogger('bench-knative-path')
const MIME_CE = 'application/cloudevents+json'

const served = await startHttpFunction(admit, { natsUrl, kubeconfig, port: 0, host: '127.0.0.1', logger })
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
const sink = await broker.listen({ port: 0, host: '127.0.0.1' })
const bridge = await startBridge({ natsUrl, kubeconfig, sink, instance: 'bench', logger })
process.stdout.write(`${JSON.stringify({ ready: true, admit: served.url, broker: sink })}\n`)

process.once('SIGTERM', async () => {
  await bridge.stop()
  await broker.close()
  await served.stop()
  process.exit(0)
})
