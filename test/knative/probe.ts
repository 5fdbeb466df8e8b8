// A Trigger subscriber for the delivery tests: records every delivery (when, which CloudEvent, which Knative
// extensions) and answers each with the status the test scripts for that event id (default 202).
import http from 'node:http'

export interface Delivery {
  at: number
  id: string
  type: string
  headers: Record<string, string>
  body: string
}

export interface Probe {
  port: number
  deliveries: Delivery[]
  /** Statuses to answer for one event id, in order; the last one repeats. */
  script(id: string, statuses: number[]): void
  of(id: string): Delivery[]
  stop(): Promise<void>
}

const MAX_DELIVERIES = 10_000
const MAX_BODY = 256 * 1024

export async function startProbe(): Promise<Probe> {
  const deliveries: Delivery[] = []
  const scripts = new Map<string, number[]>()
  const server = http.createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (d: string) => {
      if (body.length < MAX_BODY) body += d
    })
    req.on('end', () => {
      const headers: Record<string, string> = {}
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k] = v
      let id = headers['ce-id'] ?? ''
      let type = headers['ce-type'] ?? ''
      if (!id && (headers['content-type'] ?? '').startsWith('application/cloudevents+json')) {
        try {
          const ce = JSON.parse(body) as { id?: string; type?: string }
          id = ce.id ?? ''
          type = ce.type ?? ''
        } catch {
          // recorded as is
        }
      }
      if (deliveries.length < MAX_DELIVERIES) deliveries.push({ at: Date.now(), id, type, headers, body })
      const script = scripts.get(id)
      const status = script && script.length > 1 ? (script.shift() as number) : (script?.[0] ?? 202)
      // 2xx: empty (a body would be read as a reply event); otherwise a reason, as a function answers.
      if (status < 300) res.writeHead(status).end()
      else res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ status }))
    })
  })
  const port = await new Promise<number>((resolve, reject) => {
    server.once('error', reject)
    server.listen({ host: '127.0.0.1', port: 0 }, () => resolve((server.address() as { port: number }).port))
  })
  return {
    port,
    deliveries,
    script: (id, statuses) => scripts.set(id, [...statuses]),
    of: (id) => deliveries.filter((d) => d.id === id),
    async stop() {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
