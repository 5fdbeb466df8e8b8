// Free loopback ports and plain HTTP(S) probes for readiness checks.

import { readFileSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import net from 'node:net'

export const LOOPBACK = '127.0.0.1'

/**
 * The first port the kernel hands out as an outgoing connection's source port (ip_local_port_range), 32768 by
 * default. A port to be given to a server later is chosen below it: one from the ephemeral range (what `listen(0)`
 * returns) can be taken by any outgoing connection between the check and the server's bind — CI saw etcd fail with
 * "bind: address already in use" that way, the machine busy with other tests' connections.
 */
function ephemeralStart(): number {
  try {
    const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0])
    return Number.isInteger(first) && first > 2048 ? first : 32768
  } catch {
    return 32768
  }
}

/** How many random candidates freePorts tries before it gives up (each one taken: another server holds it). */
const MAX_CANDIDATES = 2000

/** n distinct free ports on 127.0.0.1 below the ephemeral range (all held open together while choosing). */
export async function freePorts(n: number): Promise<number[]> {
  const servers: net.Server[] = []
  const low = 10_000
  const high = ephemeralStart()
  try {
    const ports: number[] = []
    for (let tries = 0; ports.length < n; tries++) {
      if (tries >= MAX_CANDIDATES) throw new Error(`no ${n} free ports in ${low}..${high - 1}`)
      const port = low + Math.floor(Math.random() * (high - low))
      if (ports.includes(port)) continue
      const server = net.createServer()
      const bound = await new Promise<boolean>((resolve) => {
        server.once('error', () => resolve(false))
        server.listen({ host: LOOPBACK, port, exclusive: true }, () => resolve(true))
      })
      if (!bound) continue
      servers.push(server)
      ports.push(port)
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
