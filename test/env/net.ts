// Free loopback ports and plain HTTP(S) probes for readiness checks.
import http from 'node:http'
import https from 'node:https'
import net from 'node:net'

export const LOOPBACK = '127.0.0.1'

/** n distinct free ports on 127.0.0.1 (all held open together while choosing, so they cannot repeat). */
export async function freePorts(n: number): Promise<number[]> {
  const servers: net.Server[] = []
  try {
    const ports: number[] = []
    for (let i = 0; i < n; i++) {
      const server = net.createServer()
      servers.push(server)
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject)
        server.listen({ host: LOOPBACK, port: 0, exclusive: true }, () => resolve())
      })
      const address = server.address()
      if (!address || typeof address === 'string') throw new Error('no port')
      ports.push(address.port)
    }
    return ports
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))))
  }
}

export interface TlsOptions {
  ca?: string | Buffer
  cert?: string | Buffer
  key?: string | Buffer
  /** Accept any server certificate (only for probing a component's self-signed health endpoint). */
  insecure?: boolean
}

export function httpGet(
  url: string,
  tls: TlsOptions = {},
  timeoutMs = 2000,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url)
    const options: https.RequestOptions = { method: 'GET', timeout: timeoutMs, agent: false }
    const mod = u.protocol === 'https:' ? https : http
    if (u.protocol === 'https:') {
      Object.assign(options, {
        ca: tls.ca,
        cert: tls.cert,
        key: tls.key,
        rejectUnauthorized: !tls.insecure,
      })
    }
    const req = mod.request(u, options, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d: string) => {
        body += d
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
      res.on('error', reject)
    })
    req.on('timeout', () => req.destroy(new Error(`GET ${url} timed out`)))
    req.on('error', reject)
    req.end()
  })
}
