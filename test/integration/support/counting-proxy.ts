// An apiserver front that counts what one client sends, on the wire: the apiserver's own metrics add up every
// client of the shared environment (other test files, the controller-manager), and a function's own counters are
// not evidence. Plain HTTP on loopback to the client, the admin credentials on to the real apiserver.
import { createServer, type IncomingMessage, type Server } from 'node:http'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import { KubeConfig } from '@kubernetes/client-node'

export interface CountedRequest {
  method: string
  path: string
  watch: boolean
}

export class CountingProxy {
  readonly requests: CountedRequest[] = []
  /** Requests counted at most (a bound on memory); later ones are forwarded, not recorded. */
  static readonly MAX = 100_000
  private constructor(
    private readonly server: Server,
    readonly kc: KubeConfig,
  ) {}

  /** Non-watch GETs (reads and lists) since `from` (an index into `requests`). */
  reads(from = 0): CountedRequest[] {
    return this.requests.slice(from).filter((r) => r.method === 'GET' && !r.watch)
  }

  static async start(admin: KubeConfig): Promise<CountingProxy> {
    const upstream = new URL(admin.getCurrentCluster()?.server ?? '')
    const tls: https.RequestOptions = {}
    await admin.applyToHTTPSOptions(tls)
    const agent = new https.Agent({ keepAlive: true, ca: tls.ca, cert: tls.cert, key: tls.key })
    const proxy: { value?: CountingProxy } = {}
    const server = createServer((req: IncomingMessage, res) => {
      const url = new URL(req.url ?? '/', 'http://x')
      const counted = proxy.value?.requests
      if (counted && counted.length < CountingProxy.MAX) {
        counted.push({ method: req.method ?? '', path: url.pathname, watch: url.searchParams.get('watch') === 'true' })
      }
      const headers = { ...req.headers, ...(tls.headers as Record<string, string> | undefined), host: upstream.host }
      const out = https.request(
        {
          protocol: 'https:',
          hostname: upstream.hostname,
          port: upstream.port,
          method: req.method,
          path: req.url,
          headers,
          agent,
          timeout: 60 * 60_000,
        },
        (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers)
          // A watch answers its headers at once and its first event maybe never: pass the headers on now.
          res.flushHeaders()
          up.pipe(res)
        },
      )
      out.on('error', () => res.destroy())
      res.on('close', () => out.destroy())
      req.pipe(out)
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const { port } = server.address() as AddressInfo
    const kc = new KubeConfig()
    kc.loadFromOptions({
      clusters: [{ name: 'counted', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
      users: [{ name: 'counted' }],
      contexts: [{ name: 'counted', cluster: 'counted', user: 'counted' }],
      currentContext: 'counted',
    })
    proxy.value = new CountingProxy(server, kc)
    return proxy.value
  }

  async stop() {
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }
}
