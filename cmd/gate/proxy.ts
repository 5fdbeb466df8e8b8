// The background gate's HTTP side: an OpenAI-compatible reverse proxy between a backfill Job's workload and the
// engine it shares with foreground traffic. Every request is marked background for the engine and numbered; at most
// maxInFlight run upstream at once (the rest wait in a bounded queue). close() — a foreground request for the model,
// or foreground demand that can no longer be seen — refuses everything after it with 503 + Retry-After and aborts
// every request in flight by destroying its upstream connection: vLLM and SGLang abort a request whose client
// disconnects, so the engine frees its batch slot at its next step instead of decoding to the end. llama.cpp notices
// a disconnect reliably only while it streams, so on it a non-streaming request goes upstream as a stream and is
// collected back into one answer (collect.ts), and every stream asks for llama.cpp's prompt progress, which the gate
// takes back out (progress.ts): without it a request closed while processing its prompt goes on to the prompt's end.
// docs/gate.md says what each engine guarantees.
import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import { ENGINE_PRIORITY, GATE_PATH, GATE_STATE_HEADER, type GateEngine } from '../../pkg/core/gate.js'
import type { Logger } from '../../pkg/observability/log.js'
import { WaitQueue } from '../../pkg/transport/jetstream-adapter.js'
import { collectable, StreamCollector, streamedBody } from './collect.js'
import { GateMetrics } from './metrics.js'
import { RETURN_PROGRESS, withoutProgress } from './progress.js'
import { TokenCounter } from './tokens.js'

export const WORKLOAD_CLASS_HEADER = 'x-flexinfer-workload-class'
/** What the health listener answers; it proxies nothing. */
const HEALTH_PATHS = new Set(['healthz', 'readyz', 'metrics'])

export type GateState = 'starting' | 'open' | 'closed'
export type CloseReason = 'preempted' | 'nats_unreachable' | 'stopping'

export interface GateOptions {
  /** The engine's origin (scheme://host:port); request paths go upstream unchanged. */
  upstream: string
  /** The Job's name: request ids are `bg-<job>-<n>`. */
  job: string
  engine: GateEngine
  /** Overrides the engine profile's priority value (an engine started with a non-default direction or default). */
  priority?: number
  maxInFlight: number
  /** Requests waiting for a place beyond maxInFlight; more are refused with 429. */
  maxQueued?: number
  /** How long a request may wait for a place (then 429). */
  queueTimeoutMs?: number
  /** Deadline of one proxied request, answer and stream included (then 504). */
  requestTimeoutMs?: number
  /** Largest request body (413 above): prompts, not uploads. */
  bodyLimitBytes?: number
  /** Retry-After on a 503 from a closed gate: the attempt is being cancelled; a new one needs a fresh idle window. */
  retryAfterSeconds?: number
  port?: number
  host?: string
  log: Logger
}

interface Flight {
  id: string
  upstream?: http.ClientRequest
  res: ServerResponse
  abortedByGate: boolean
  /** Background tokens streamed so far. */
  tokens: () => number
}

export type RequestOutcome = 'completed' | 'aborted' | 'failed'

interface Waiter {
  grant: () => void
  refuse: (status: number, message: string) => void
}

export interface Preemption {
  reason: CloseReason
  /** Epoch ms (fractional) the signal reached the gate, and the last in-flight upstream connection was closed. */
  signalAt: number
  lastAbortAt: number
  aborted: number
  refusedQueued: number
}

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
])
/** How long the error event of a stream whose engine went away may take to reach the workload before the cut. */
const LOST_EVENT_DEADLINE_MS = 1_000
/** Epoch milliseconds with sub-millisecond resolution: abort latencies are a fraction of a millisecond. */
export const epochMs = () => performance.timeOrigin + performance.now()

export class Gate {
  state: GateState = 'starting'
  closeReason?: CloseReason
  lastPreemption?: Preemption
  readonly metrics = new GateMetrics()
  private readonly flights = new Set<Flight>()
  private readonly queue: WaitQueue<Waiter>
  private seq = 0
  /** Background tokens of answers that ended normally, and of answers cut (tokens.ts). */
  private readonly tokens = { completed: 0, discarded: 0 }
  /** Background requests by how they ended at the engine. */
  private readonly ended: Record<RequestOutcome, number> = { completed: 0, aborted: 0, failed: 0 }
  private server?: http.Server
  private healthServer?: http.Server
  private readonly agent: http.Agent
  private readonly upstream: URL
  private readonly priority?: number
  private readonly opts: Required<Omit<GateOptions, 'priority' | 'port' | 'host'>>

  constructor(options: GateOptions) {
    this.opts = {
      maxQueued: 64,
      queueTimeoutMs: 60_000,
      requestTimeoutMs: 30 * 60_000,
      bodyLimitBytes: 8 * 1024 * 1024,
      retryAfterSeconds: 30,
      ...options,
    }
    this.upstream = new URL(options.upstream)
    this.priority = options.priority ?? ENGINE_PRIORITY[options.engine]
    this.queue = new WaitQueue<Waiter>(this.opts.maxQueued)
    const Agent = this.upstream.protocol === 'https:' ? https.Agent : http.Agent
    // A connection per request, never reused: an engine's server may close a kept-alive connection (llama.cpp's after
    // its idle timeout or request count) just as the next request goes out on it, and that request is lost as a
    // "socket hang up" — a 502 the workload must record or retry. A connect costs nothing next to a completion, and
    // the connection's end is the request's end, which is how the gate aborts.
    this.agent = new Agent({ keepAlive: false, maxSockets: options.maxInFlight })
    this.metrics.setOpen(this.state === 'open')
  }

  get inFlight() {
    return this.flights.size
  }

  async listen(port = 0, host = '127.0.0.1'): Promise<string> {
    const server = http.createServer((req, res) => this.handle(req, res))
    server.requestTimeout = this.opts.requestTimeoutMs
    this.server = server
    return listening(server, port, host)
  }

  /** The health listener (probes and /metrics, nothing proxied), on an address the kubelet can reach. */
  async listenHealth(port: number, host: string): Promise<string> {
    const server = http.createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0] as string
      const own = path.startsWith(GATE_PATH) ? path.slice(GATE_PATH.length) : ''
      if (!HEALTH_PATHS.has(own)) return this.json(res, 404, { error: { message: 'not found' } })
      this.own(own, res).catch(() => res.destroy())
    })
    server.requestTimeout = 10_000
    this.healthServer = server
    return listening(server, port, host)
  }

  /** Admits background requests (once the gate can see foreground demand). A closed gate never opens again. */
  open() {
    if (this.state !== 'starting') return
    this.state = 'open'
    this.metrics.setOpen(this.state === 'open')
    this.opts.log.info({ upstream: this.upstream.origin, maxInFlight: this.opts.maxInFlight }, 'gate open')
  }

  /**
   * Closes for good: later requests get 503, waiting ones too, and every request in flight loses its upstream
   * connection now. Synchronous, so nothing can slip in between the signal and the last abort.
   */
  close(reason: CloseReason, signalAt = epochMs()): Preemption | undefined {
    if (this.state === 'closed') return undefined
    this.state = 'closed'
    this.closeReason = reason
    this.metrics.setOpen(false)
    let aborted = 0
    let cutTokens = 0
    // The engine's connections first: they are what frees its batch; the workload's side after.
    for (const flight of this.flights) {
      if (!flight.upstream) continue
      flight.abortedByGate = true
      flight.upstream.destroy()
      aborted++
      cutTokens += flight.tokens()
    }
    const lastAbortAt = epochMs()
    // A stream under way can only be ended by cutting it; one not yet answered gets its 503 from the error path.
    for (const flight of this.flights) if (flight.res.headersSent) flight.res.destroy()
    let refusedQueued = 0
    for (let w = this.queue.shift(); w; w = this.queue.shift()) {
      w.refuse(503, `background gate closed (${reason})`)
      refusedQueued++
    }
    this.metrics.aborted.inc(aborted)
    this.metrics.abortSeconds.observe((lastAbortAt - signalAt) / 1000)
    const p: Preemption = { reason, signalAt, lastAbortAt, aborted, refusedQueued }
    this.lastPreemption = p
    // One line per preemption: what an operator correlates with a foreground request's latency.
    this.opts.log.info(
      {
        reason,
        signalAt: new Date(signalAt).toISOString(),
        lastAbortAt: new Date(lastAbortAt).toISOString(),
        abortMs: Number((lastAbortAt - signalAt).toFixed(3)),
        aborted,
        refusedQueued,
        // What the gate let through until now: the work the attempt kept, and what this close threw away.
        requests: { completed: this.ended.completed, aborted: this.ended.aborted + aborted, failed: this.ended.failed },
        tokens: { completed: this.tokens.completed, discarded: this.tokens.discarded + cutTokens },
      },
      'gate closed: signal received → last upstream request aborted',
    )
    return p
  }

  async stop() {
    this.close('stopping')
    this.agent.destroy()
    await Promise.all(
      [this.server, this.healthServer].map(
        (server) =>
          server &&
          new Promise<void>((resolve) => {
            server.closeAllConnections()
            server.close(() => resolve())
          }),
      ),
    )
  }

  /** What `/flexinfer-gate/state` answers (the benchmark and people read it). */
  snapshot() {
    return {
      state: this.state,
      closeReason: this.closeReason,
      inFlight: this.flights.size,
      queued: this.queue.size,
      requests: this.seq,
      tokens: { ...this.tokens },
      requestsEnded: { ...this.ended },
      lastPreemption: this.lastPreemption,
      // What a workload records beside its results: the concurrency it measured was bounded by these.
      profile: {
        engine: this.opts.engine,
        priority: this.priority,
        maxInFlight: this.opts.maxInFlight,
        maxQueued: this.opts.maxQueued,
      },
    }
  }

  private handle(req: IncomingMessage, res: ServerResponse) {
    const url = req.url ?? '/'
    if (url.startsWith(GATE_PATH)) {
      this.own(url.slice(GATE_PATH.length), res).catch(() => res.destroy())
      return
    }
    if (this.state !== 'open') return this.refuse(res, 503, this.closedMessage())
    this.readBody(req)
      .then((body) => {
        if (body === 'too-large')
          return this.refuse(res, 413, `request body above ${this.opts.bodyLimitBytes} bytes`, false)
        return this.admit(req, res, body)
      })
      .catch(() => res.destroy())
  }

  private closedMessage() {
    return this.state === 'starting'
      ? 'background gate starting: foreground demand not yet visible'
      : `background gate closed (${this.closeReason}): foreground has the model`
  }

  private async own(path: string, res: ServerResponse) {
    if (path === 'healthz') return this.json(res, 200, { ok: true })
    if (path === 'readyz') return this.json(res, this.state === 'open' ? 200 : 503, { state: this.state })
    if (path === 'state') return this.json(res, 200, this.snapshot())
    if (path === 'metrics') {
      res.writeHead(200, { 'content-type': this.metrics.registry.contentType })
      res.end(await this.metrics.registry.metrics())
      return
    }
    this.json(res, 404, { error: { message: 'not found' } })
  }

  private json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
    if (res.headersSent) return void res.destroy()
    res.writeHead(status, { 'content-type': 'application/json', ...headers })
    res.end(JSON.stringify(body))
  }

  /** An OpenAI-style error; 503 and 429 tell a well-behaved client when to come back. */
  private refuse(res: ServerResponse, status: number, message: string, count = true) {
    if (count) this.metrics.refused.inc({ status: String(status) })
    const retryAfter = status === 503 ? this.opts.retryAfterSeconds : status === 429 ? 1 : undefined
    this.json(
      res,
      status,
      { error: { message, type: status === 503 ? 'service_unavailable' : 'invalid_request_error', code: status } },
      {
        [GATE_STATE_HEADER]: this.state,
        ...(retryAfter === undefined ? {} : { 'retry-after': String(retryAfter) }),
      },
    )
  }

  private readBody(req: IncomingMessage): Promise<Buffer | 'too-large'> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = []
      let size = 0
      req.on('data', (chunk: Buffer) => {
        size += chunk.length
        if (size > this.opts.bodyLimitBytes) {
          req.removeAllListeners('data')
          req.resume()
          resolve('too-large')
          return
        }
        chunks.push(chunk)
      })
      req.on('end', () => resolve(Buffer.concat(chunks)))
      req.on('error', reject)
    })
  }

  /** Waits for a place under the cap (bounded queue, bounded wait), then sends the request upstream. */
  private admit(req: IncomingMessage, res: ServerResponse, body: Buffer) {
    if (this.state !== 'open') return this.refuse(res, 503, this.closedMessage())
    if (this.flights.size < this.opts.maxInFlight) return this.forward(req, res, body)
    let settled = false
    const settle = () => {
      if (settled) return false
      settled = true
      clearTimeout(timer)
      return true
    }
    const waiter: Waiter = {
      // A waiter whose client left or whose wait ran out is skipped: next() moves on to the one after it.
      grant: () => {
        if (settle() && !res.destroyed) this.forward(req, res, body)
      },
      refuse: (status, message) => {
        if (settle()) this.refuse(res, status, message)
      },
    }
    if (!this.queue.push(waiter)) return this.refuse(res, 429, `${this.opts.maxQueued} background requests waiting`)
    const timer = setTimeout(
      () => waiter.refuse(429, `no place within ${this.opts.queueTimeoutMs} ms (${this.opts.maxInFlight} in flight)`),
      this.opts.queueTimeoutMs,
    )
    timer.unref()
    res.on('close', settle)
  }

  private next() {
    while (this.state === 'open' && this.flights.size < this.opts.maxInFlight) {
      const w = this.queue.shift()
      if (!w) return
      w.grant()
    }
  }

  /**
   * The body with the background marks: the engine's priority (always ours: a workload cannot outrank foreground).
   * On llama.cpp a non-streaming completion is sent as a stream, to be collected (`collect`), and every streamed one
   * asks for the prompt progress the workload did not ask for (`dropProgress`: taken back out of its stream).
   */
  private mark(
    body: Buffer,
    contentType: string | undefined,
    id: string,
    path: string,
  ): { body: Buffer; collect?: 'chat' | 'completions'; dropProgress?: boolean } {
    if (!body.length || !contentType?.includes('json')) return { body }
    let parsed: unknown
    try {
      parsed = JSON.parse(body.toString('utf8'))
    } catch {
      return { body }
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return { body }
    let out = parsed as Record<string, unknown>
    if (this.priority === undefined) delete out.priority
    else out.priority = this.priority
    if (this.opts.engine === 'vllm') out.request_id = id
    if (this.opts.engine === 'sglang') out.rid = id
    const kind = this.opts.engine === 'llamacpp' ? collectable(path) : undefined
    const streamed = kind ? streamedBody(out) : undefined
    if (streamed) out = streamed
    const dropProgress = kind !== undefined && out.stream === true && out[RETURN_PROGRESS] !== true
    if (dropProgress) out[RETURN_PROGRESS] = true
    return { body: Buffer.from(JSON.stringify(out)), collect: streamed ? kind : undefined, dropProgress }
  }

  /** The engine's event stream collected into the one JSON answer the workload asked for. */
  private collectInto(up: IncomingMessage, res: ServerResponse, kind: 'chat' | 'completions', cut: () => void) {
    const collector = new StreamCollector(kind)
    up.on('data', (chunk: Buffer) => {
      if (collector.push(chunk)) return
      cut()
      this.refuse(res, 502, 'the engine answer grew past the gate limit for a collected answer', false)
    })
    up.on('end', () => {
      if (collector.error) return this.json(res, 500, { error: collector.error })
      if (!collector.done) return this.refuse(res, 502, 'the engine ended its answer early', false)
      this.json(res, 200, collector.result())
    })
  }

  private forward(req: IncomingMessage, res: ServerResponse, raw: Buffer) {
    if (this.state !== 'open') return this.refuse(res, 503, this.closedMessage())
    const id = `bg-${this.opts.job}-${++this.seq}`
    const { body, collect, dropProgress } = this.mark(raw, req.headers['content-type'], id, req.url ?? '/')
    const headers: Record<string, string | string[]> = {}
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value
    }
    headers[WORKLOAD_CLASS_HEADER] = 'background'
    headers['x-request-id'] = id
    headers['content-length'] = String(body.length)
    const counter = new TokenCounter()
    const flight: Flight = { id, res, abortedByGate: false, tokens: () => counter.tokens }
    this.flights.add(flight)
    this.metrics.requests.inc()
    this.metrics.inFlight.set(this.flights.size)
    const client = this.upstream.protocol === 'https:' ? https : http
    const upstream = client.request(new URL(req.url ?? '/', this.upstream), {
      method: req.method,
      headers,
      agent: this.agent,
      timeout: this.opts.requestTimeoutMs,
    })
    flight.upstream = upstream
    let ended = false
    let streamed = false
    let status = 0
    let done = false
    const finish = () => {
      if (done) return
      done = true
      const answered = ended && !flight.abortedByGate && (counter.done || !streamed)
      const outcome = answered ? 'completed' : 'discarded'
      if (counter.tokens > 0) {
        this.tokens[outcome] += counter.tokens
        this.metrics.tokens.inc({ outcome }, counter.tokens)
      }
      const request: RequestOutcome = flight.abortedByGate
        ? 'aborted'
        : answered && status < 400
          ? 'completed'
          : 'failed'
      this.ended[request]++
      this.metrics.ended.inc({ outcome: request })
      this.flights.delete(flight)
      this.metrics.inFlight.set(this.flights.size)
      this.next()
    }
    upstream.on('timeout', () => upstream.destroy(new Error('upstream deadline')))
    upstream.on('close', finish)
    upstream.on('response', (up) => {
      const eventStream = String(up.headers['content-type']).includes('event-stream')
      streamed = eventStream
      status = up.statusCode ?? 0
      if (eventStream) up.on('data', (chunk: Buffer) => counter.push(chunk))
      up.on('end', () => {
        ended = true
        finish()
      })
      up.on('close', finish)
      // The engine went away mid-answer: a clear error for the workload, never a stream that just stops.
      const lost = () => {
        if (flight.abortedByGate) return void res.destroy()
        if (!res.headersSent) return this.refuse(res, 502, 'the engine connection was lost mid-answer', false)
        if (!eventStream || res.writableEnded) return void res.destroy()
        // Cut only once the event is on the wire: the response's writes are corked until the next tick, and a
        // destroy before then drops them. A workload that stops reading is cut after the deadline all the same.
        const cut = setTimeout(() => res.destroy(), LOST_EVENT_DEADLINE_MS)
        cut.unref()
        res.write(
          `data: ${JSON.stringify({ error: { message: 'the engine connection was lost', code: 502 } })}\n\n`,
          () => {
            clearTimeout(cut)
            res.destroy()
          },
        )
      }
      up.on('error', lost)
      up.on('aborted', lost)
      if (collect && up.statusCode === 200 && eventStream) {
        return this.collectInto(up, res, collect, () => upstream.destroy())
      }
      const out: Record<string, string | string[]> = {}
      for (const [name, value] of Object.entries(up.headers)) {
        if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value
      }
      res.writeHead(up.statusCode ?? 502, out)
      if (dropProgress && eventStream) up.pipe(withoutProgress()).pipe(res)
      else up.pipe(res)
    })
    upstream.on('error', (err) => {
      finish()
      if (flight.abortedByGate) {
        // Headers already sent (a stream under way): cutting the connection is the only way to end it.
        if (res.headersSent) res.destroy()
        else this.refuse(res, 503, this.closedMessage(), false)
        return
      }
      if (res.headersSent) return void res.destroy()
      const timedOut = err.message === 'upstream deadline'
      this.refuse(
        res,
        timedOut ? 504 : 502,
        timedOut ? 'upstream deadline' : `upstream unreachable: ${err.message}`,
        false,
      )
    })
    // The workload went away: the engine should stop too.
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy()
      finish()
    })
    upstream.end(body)
  }
}

function listening(server: http.Server, port: number, host: string): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      const { address, port: bound } = server.address() as AddressInfo
      resolve(`http://${address.includes(':') ? `[${address}]` : address}:${bound}`)
    })
  })
}
