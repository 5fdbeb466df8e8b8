// Every request made through the Kube class has a deadline (KUBE_REQUEST_TIMEOUT_MS): a half-open apiserver
// connection used to hang a DELETE for minutes and fill cancel's concurrency slots. Simulated with loopback
// servers: one accepts TCP connections and never answers (not even the TLS handshake), one sends the response
// headers and then stalls the body. The real apiserver still answers through the same clients. Watches have no
// deadline; a watch whose connection stalls (a loopback proxy to the apiserver that stops forwarding on the
// connections it has) is re-opened.
import { createServer as createHttpServer, type Server } from 'node:http'
import { connect, createServer, type Socket } from 'node:net'
import { CoreV1Api, KubeConfig, type V1ConfigMap } from '@kubernetes/client-node'
import { afterAll, expect, it } from 'vitest'
import { WatchCache } from '../../../pkg/kube/cache.js'
import { Kube } from '../../../pkg/kube/client.js'
import { KubeRequestTimeout, kubeRequestTimeoutMs } from '../../../pkg/kube/deadline.js'
import { statusCode } from '../../../pkg/kube/errors.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
const sockets = new Set<Socket>()
const closers: (() => void)[] = []
afterAll(() => {
  for (const s of sockets) s.destroy()
  for (const close of closers) close()
})

/** The test kubeconfig (its credentials and CA) pointed at another server. */
function kubeConfigAt(server: string): KubeConfig {
  const kc = new KubeConfig()
  kc.loadFromOptions({
    // client-node refuses plain http unless TLS verification is off.
    clusters: env.kc.clusters.map((c) => ({ ...c, server, skipTLSVerify: server.startsWith('http:') })),
    users: env.kc.users,
    contexts: env.kc.contexts,
    currentContext: env.kc.currentContext,
  })
  return kc
}

async function listen(server: Server | ReturnType<typeof createServer>): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  closers.push(() => server.close())
  return (server.address() as { port: number }).port
}

/** Bounds a call the test expects to end: without the deadline it would hang for minutes. */
async function settle<T>(call: Promise<T>, boundMs: number) {
  const started = Date.now()
  const result = await Promise.race([
    call.then(
      (value) => ({ ok: true as const, value }),
      (err: unknown) => ({ ok: false as const, err }),
    ),
    new Promise<{ ok: 'hung' }>((resolve) => setTimeout(() => resolve({ ok: 'hung' }), boundMs).unref()),
  ])
  return { ...result, ms: Date.now() - started }
}

it('a DELETE to an apiserver that accepts the connection and never answers is aborted at the deadline', async () => {
  const blackHole = createServer((socket) => {
    sockets.add(socket)
    socket.on('error', () => {})
  })
  const port = await listen(blackHole)
  const kube = new Kube(kubeConfigAt(`https://127.0.0.1:${port}`), { requestTimeoutMs: 1_000 })
  closers.push(() => kube.close())

  const results = await Promise.all([
    settle(kube.deleteJob(env.namespace, 'attempt-1'), 5_000),
    settle(kube.getBackfill(env.namespace, 'b'), 5_000),
    settle(kube.listBackfillJobs(), 5_000),
  ])
  for (const r of results) {
    expect(r.ok).toBe(false)
    if (r.ok !== false) continue
    expect(r.err).toBeInstanceOf(KubeRequestTimeout)
    // A transient failure for the callers: no status code to be mistaken for 404/409.
    expect(statusCode(r.err)).toBeUndefined()
    expect(r.ms).toBeGreaterThanOrEqual(950)
    expect(r.ms).toBeLessThan(3_000)
  }
  const [del] = results
  if (del?.ok === false)
    expect(String(del.err)).toMatch(/DELETE \/apis\/batch\/v1\/namespaces\/.*\/jobs\/attempt-1 .*1000 ms/)
})

it('an answer whose body stalls is aborted too', async () => {
  const stalling = createHttpServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"kind":"Job","apiVersion":"batch/v1","metadata":{"name":')
    sockets.add(res.socket as Socket)
  })
  const port = await listen(stalling)
  const kube = new Kube(kubeConfigAt(`http://127.0.0.1:${port}`), { requestTimeoutMs: 800 })
  closers.push(() => kube.close())
  const r = await settle(kube.getJob(env.namespace, 'j'), 5_000)
  expect(r.ok).toBe(false)
  if (r.ok === false) expect(r.err).toBeInstanceOf(KubeRequestTimeout)
  expect(r.ms).toBeLessThan(3_000)
})

it('the real apiserver answers through the same clients; the setting is validated', async () => {
  const kube = new Kube(env.kc, { requestTimeoutMs: 1_000 })
  closers.push(() => kube.close())
  expect(await kube.deleteJob(env.namespace, 'absent')).toBe('absent')
  expect(await kube.getBackfill(env.namespace, 'absent')).toBeNull()
  expect(kubeRequestTimeoutMs({})).toBe(10_000)
  expect(kubeRequestTimeoutMs({ KUBE_REQUEST_TIMEOUT_MS: '2500' })).toBe(2_500)
  expect(() => kubeRequestTimeoutMs({ KUBE_REQUEST_TIMEOUT_MS: '10s' })).toThrow(/positive integer/)
})

it('a watch whose connection stalls is re-opened, and sees what changed meanwhile', async () => {
  const api = new URL(env.apiserverUrl)
  // A TCP proxy to the apiserver; freeze() stops forwarding on every connection it has (new ones work).
  let frozen: Socket[] = []
  const proxy = createServer((client) => {
    const upstream = connect(Number(api.port), api.hostname)
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      sockets.add(from)
      from.on('error', () => {})
      from.on('data', (chunk) => {
        if (!frozen.includes(from)) to.write(chunk)
      })
      from.on('close', () => to.destroy())
    }
  })
  // Data on every connection open now is dropped from here on (both ways); new connections work.
  const freeze = () => {
    frozen = [...sockets]
  }
  const port = await listen(proxy)
  const kc = kubeConfigAt(`https://127.0.0.1:${port}`)
  const kube = new Kube(kc, { requestTimeoutMs: 1_000 })
  closers.push(() => kube.close())
  const ns = env.namespace
  const cache = new WatchCache<V1ConfigMap>(
    kc,
    `/api/v1/namespaces/${ns}/configmaps`,
    () => kube.core.listNamespacedConfigMap({ namespace: ns }),
    undefined,
    { idleRestartMs: 1_500 },
  )
  await cache.start()
  closers.push(() => void cache.stop())
  const create = (name: string) =>
    env.kc.makeApiClient(CoreV1Api).createNamespacedConfigMap({ namespace: ns, body: { metadata: { name } } })

  await create('before-stall')
  await waitFor('the watch delivers', () => cache.get(ns, 'before-stall') ?? undefined, { timeoutMs: 5_000 })
  freeze()
  await create('during-stall')
  await waitFor('the stalled watch re-opened and caught up', () => cache.get(ns, 'during-stall') ?? undefined, {
    timeoutMs: 10_000,
  })
  expect(cache.idleRestarts).toBeGreaterThanOrEqual(1)
})
