// Cluster addresses on loopback: an HTTP forward proxy on 127.0.0.1 that plays kube-dns + kube-proxy for the
// local Knative processes (they reach it through HTTP_PROXY; Go's http.Transport honours it). A request for
// http://<service>.<namespace>.svc.cluster.local[:port]/… is resolved the way a cluster would: the Service (an
// ExternalName is followed, as DNS would), the Service port that matches the request's, then that port's address
// in the Service's Endpoints — which the harness writes as LOCAL_ENDPOINT_IP:<the process's port> (the apiserver
// refuses loopback Endpoints), dialled as 127.0.0.1:<port>. The Host header is kept
// (the InMemoryChannel dispatcher routes by it). Nothing outside loopback is ever dialled; an address that does
// not resolve answers 503 (as when a Service has no ready endpoints), a refused connection 502.
import http from 'node:http'
import { CoreV1Api, type CoreV1EndpointPort, type KubeConfig, type V1ServicePort } from '@kubernetes/client-node'

export interface ClusterProxy {
  /** http://127.0.0.1:<port>: the HTTP_PROXY of the Knative processes. */
  url: string
  port: number
  /** The loopback URL a cluster URL resolves to now (for clients that cannot use a proxy, such as fetch). */
  resolve(url: string): Promise<URL>
  /** Requests forwarded so far, by resolved Service (namespace/name). */
  counts: Map<string, number>
  /** The last requests (at most 200): what was asked, where it went, the answer (for failure messages). */
  recent(): string[]
  stop(): Promise<void>
}

/** The Endpoints address that means "127.0.0.1 here" (TEST-NET-1, RFC 5737: never routed, never dialled). */
export const LOCAL_ENDPOINT_IP = '192.0.2.1'
const CLUSTER_HOST = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.svc(\.cluster\.local)?)?\.?$/
/** Addresses change only when the harness re-exposes a process; a refused connection is the outage signal. */
const CACHE_MS = 10_000
const CACHE_MAX = 512
const LOOKUP_TIMEOUT_MS = 5_000
const REQUEST_TIMEOUT_MS = 60_000
const MAX_HOPS = 4
const MAX_BODY = 4 * 1024 * 1024

class Unresolvable extends Error {}

const withDeadline = <T>(what: string, p: Promise<T>): Promise<T> =>
  Promise.race([
    p,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer`)), LOOKUP_TIMEOUT_MS).unref()),
  ])

const status = (err: unknown) => (err as { code?: number })?.code

export async function startClusterProxy(kc: KubeConfig): Promise<ClusterProxy> {
  const core = kc.makeApiClient(CoreV1Api)
  type Target = { host: string; port: number; service: string }
  // Promises: concurrent requests for one host (a fan-out to every Trigger) share one lookup.
  const cache = new Map<string, { at: number; target: Promise<Target> }>()
  const counts = new Map<string, number>()
  const ring: string[] = []
  const note = (line: string) => {
    if (ring.length >= 200) ring.shift()
    ring.push(`${new Date().toISOString()} ${line}`)
  }

  async function lookup(
    hostname: string,
    port: number,
    hops = 0,
  ): Promise<{ host: string; port: number; service: string }> {
    const m = CLUSTER_HOST.exec(hostname.toLowerCase())
    if (!m || hops > MAX_HOPS) throw new Unresolvable(`${hostname} is not a cluster address`)
    const [name, namespace] = [m[1] as string, m[3] as string]
    let svc: Awaited<ReturnType<CoreV1Api['readNamespacedService']>>
    try {
      svc = await withDeadline(`Service ${namespace}/${name}`, core.readNamespacedService({ name, namespace }))
    } catch (err) {
      if (status(err) === 404) throw new Unresolvable(`no Service ${namespace}/${name}`)
      throw err
    }
    if (svc.spec?.type === 'ExternalName' && svc.spec.externalName) {
      return lookup(svc.spec.externalName, port, hops + 1)
    }
    const ports: V1ServicePort[] = svc.spec?.ports ?? []
    const sp = ports.find((p) => p.port === port) ?? (ports.length === 1 ? ports[0] : undefined)
    if (!sp) throw new Unresolvable(`Service ${namespace}/${name} has no port ${port}`)
    let endpoints: Awaited<ReturnType<CoreV1Api['readNamespacedEndpoints']>>
    try {
      endpoints = await withDeadline(
        `Endpoints ${namespace}/${name}`,
        core.readNamespacedEndpoints({ name, namespace }),
      )
    } catch (err) {
      if (status(err) === 404) throw new Unresolvable(`no Endpoints ${namespace}/${name}`)
      throw err
    }
    for (const subset of endpoints.subsets ?? []) {
      const ip = subset.addresses?.[0]?.ip
      const eps: CoreV1EndpointPort[] = subset.ports ?? []
      const ep = eps.find((p) => p.name === sp.name) ?? (eps.length === 1 ? eps[0] : undefined)
      if (!ip || !ep) continue
      if (ip !== LOCAL_ENDPOINT_IP) throw new Unresolvable(`Endpoints ${namespace}/${name} is not local (${ip})`)
      return { host: '127.0.0.1', port: ep.port, service: `${namespace}/${name}` }
    }
    throw new Unresolvable(`Endpoints ${namespace}/${name} has no ready address`)
  }

  function target(hostname: string, port: number): Promise<Target> {
    const key = `${hostname}:${port}`
    const hit = cache.get(key)
    if (hit && Date.now() - hit.at < CACHE_MS) return hit.target
    const t = lookup(hostname, port)
    if (cache.size >= CACHE_MAX) cache.clear()
    cache.set(key, { at: Date.now(), target: t })
    t.catch(() => cache.delete(key)) // failures are not cached
    return t
  }

  const agent = new http.Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 64 })
  const server = http.createServer((req, res) => {
    const started = Date.now()
    const fail = (code: number, message: string) => {
      note(`${req.method} ${req.url} → ${code} ${message} (${Date.now() - started} ms)`)
      if (!res.headersSent) res.writeHead(code, { 'content-type': 'text/plain' })
      res.end(`${message}\n`)
      req.resume()
    }
    let url: URL
    try {
      url = new URL(req.url ?? '')
      if (url.protocol !== 'http:') throw new Error('only http')
    } catch {
      return fail(400, `not a proxy request: ${req.method} ${req.url}`)
    }
    const port = Number(url.port || 80)
    // Buffered (events are small, bounded): a POST on a pooled connection the far end has just closed is sent
    // again once, as Node's documentation advises for reused sockets.
    const chunks: Buffer[] = []
    let size = 0
    req.on('data', (c: Buffer) => {
      size += c.length
      if (size <= MAX_BODY) chunks.push(c)
    })
    req.on('error', () => res.destroy())
    req.on('end', () => {
      if (size > MAX_BODY) return fail(413, `body over ${MAX_BODY} bytes`)
      const body = Buffer.concat(chunks)
      target(url.hostname, port).then(
        (t) => {
          counts.set(t.service, (counts.get(t.service) ?? 0) + 1)
          const headers = { ...req.headers }
          delete headers['proxy-connection']
          delete headers['proxy-authorization']
          const send = (retry: boolean) => {
            const upstream = http.request(
              { host: t.host, port: t.port, method: req.method, path: `${url.pathname}${url.search}`, headers, agent },
              (answer) => {
                note(`${req.method} ${req.url} → ${t.service} ${answer.statusCode} (${Date.now() - started} ms)`)
                res.writeHead(answer.statusCode ?? 502, answer.headers)
                answer.pipe(res)
                answer.on('error', () => res.destroy())
              },
            )
            upstream.setTimeout(REQUEST_TIMEOUT_MS, () => upstream.destroy(new Error('upstream timed out')))
            upstream.on('error', (err) => {
              if (retry && upstream.reusedSocket && !res.headersSent) return send(false)
              fail(502, `${t.service} (${t.host}:${t.port}): ${err.message}`)
            })
            upstream.end(body)
          }
          send(true)
        },
        (err) => fail(err instanceof Unresolvable ? 503 : 502, (err as Error).message),
      )
    })
  })
  // Longer than Go's idle timeout (90 s): a Go client never reuses a connection this server has just closed.
  server.keepAliveTimeout = 120_000
  server.headersTimeout = 30_000
  server.requestTimeout = REQUEST_TIMEOUT_MS
  const port = await new Promise<number>((resolve, reject) => {
    server.once('error', reject)
    server.listen({ host: '127.0.0.1', port: 0 }, () => resolve((server.address() as { port: number }).port))
  })
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    counts,
    recent: () => [...ring],
    async resolve(clusterUrl) {
      const u = new URL(clusterUrl)
      const t = await target(u.hostname, Number(u.port || 80))
      const local = new URL(u.toString())
      local.hostname = t.host
      local.port = String(t.port)
      return local
    },
    async stop() {
      server.closeAllConnections()
      agent.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
