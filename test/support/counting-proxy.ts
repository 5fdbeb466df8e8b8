// What reaches the engine, counted in front of it and trusting nothing of the workload's: each prompt whose whole
// answer went back (a 200 whose response finished; one cut by a stop or a closing gate is not), and the workload
// class of every request. Probes are told apart by their prompt, streamed or not (in front of llama.cpp the gate
// streams every completion).
import http from 'node:http'
import type { AddressInfo } from 'node:net'

export class CountingProxy {
  readonly answered = new Map<string, number>()
  readonly classes = new Set<string>()
  private server?: http.Server
  constructor(private readonly upstream: string) {}

  /** Listens on `host` (loopback, or the node's bridge address for pods); returns its URL. */
  async listen(host = '127.0.0.1'): Promise<string> {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = []
      req.on('data', (c: Buffer) => chunks.push(c))
      req.on('end', () => {
        const body = Buffer.concat(chunks)
        this.classes.add(String(req.headers['x-flexinfer-workload-class']))
        let prompt: string | undefined
        try {
          const parsed = JSON.parse(body.toString('utf8') || '{}')
          prompt = parsed.messages?.[0]?.content ?? parsed.prompt
        } catch {}
        const up = http.request(new URL(req.url ?? '/', this.upstream), {
          method: req.method,
          headers: req.headers,
          // A connection per request, as the gate does: no kept-alive connection the engine may drop under a request.
          agent: false,
        })
        up.on('response', (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers)
          r.pipe(res)
          res.on('finish', () => {
            if (typeof prompt === 'string' && r.statusCode === 200 && r.complete)
              this.answered.set(prompt, (this.answered.get(prompt) ?? 0) + 1)
          })
        })
        up.on('error', () => res.destroy())
        res.on('close', () => up.destroy())
        up.end(body)
      })
    })
    await new Promise<void>((r) => this.server?.listen(0, host, r))
    return `http://${host}:${(this.server.address() as AddressInfo).port}`
  }

  async stop() {
    this.server?.closeAllConnections()
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()))
  }
}
