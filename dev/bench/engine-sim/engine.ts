// A SIMULATED inference engine — no model, no GPU, no real tokens. It stands in for vLLM where tests and the gate
// benchmark need an engine's scheduling behaviour, and nothing else:
// - an OpenAI-compatible surface: POST /v1/completions and /v1/chat/completions (streaming SSE or one JSON answer),
//   GET /v1/models, GET /health;
// - continuous batching: one loop of steps; every running sequence gets one token per step; a step takes
//   stepBaseMs + stepPerSeqMs × batch, plus the prefill of the requests joining it (chunked prefill shares the step);
// - a waiting queue beyond maxNumSeqs, ordered by `priority` (lower first, then arrival) as vLLM's
//   `--scheduling-policy priority`; FCFS otherwise. As vLLM V1, a running request is not preempted for a waiting one
//   of higher priority (V1 preempts only when KV blocks run out, which is not modelled);
// - abort on client disconnect: the request leaves the batch at the next step boundary, as vLLM aborts it.
// The defaults are in the range published for an 8B model on one A100 with vLLM (decode step ~12 ms at batch 1,
// growing with the batch; prefill tens of thousands of tokens per second); maxNumSeqs is kept small so a handful of
// background requests fills the batch, as hundreds do on a real engine. Figures from it are about scheduling, never
// about a real engine's speed. Nor is it the real engine of bench:gate (llama.cpp's CPU build, Gemma 3 270M, four
// slots), on purpose: there a decode step is ~82 ms at four slots (~44 ms alone) against the 13.6 ms here; a prompt
// goes in chunks of `-b` tokens at about 4 ms a token on one thread, where a joining request is prefilled here whole
// at 0.05 ms a token; and a closed request is seen at its next write (a token, or the progress event the gate asks
// for), where here the disconnect is seen at once. A yield measured on it is vLLM's, never llama.cpp's.
import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface SimParams {
  /** Sequences in the batch at once (vLLM --max-num-seqs). */
  maxNumSeqs: number
  stepBaseMs: number
  stepPerSeqMs: number
  prefillMsPerToken: number
  /** Order the waiting queue by `priority` (vLLM --scheduling-policy priority); false: first come, first served. */
  priorityScheduling: boolean
  defaultMaxTokens: number
  /** Requests waiting beyond the batch before new ones get 503 (a bounded queue, as every queue here). */
  maxWaiting: number
}

export const DEFAULT_SIM: SimParams = {
  maxNumSeqs: 8,
  stepBaseMs: 12,
  stepPerSeqMs: 0.4,
  prefillMsPerToken: 0.05,
  priorityScheduling: true,
  defaultMaxTokens: 16,
  maxWaiting: 1024,
}

type Klass = 'foreground' | 'background'

interface Seq {
  id: string
  klass: Klass
  priority: number
  arrival: number
  promptTokens: number
  maxTokens: number
  generated: number
  prefilled: boolean
  stream: boolean
  chat: boolean
  model: string
  res: ServerResponse
  gone: boolean
  goneAt?: number
}

export interface SimAbort {
  id: string
  klass: Klass
  /** Epoch ms (fractional): when the engine saw the client's connection close. */
  seenAt: number
  generated: number
}

export interface SimStats {
  tokens: Record<Klass, number>
  completed: Record<Klass, number>
  aborted: Record<Klass, number>
  running: number
  waiting: number
  steps: number
}

const now = () => performance.timeOrigin + performance.now()
const MAX_ABORT_LOG = 10_000

export class EngineSim {
  readonly params: SimParams
  private readonly waiting: Seq[] = []
  private readonly running: Seq[] = []
  private stepping = false
  private server?: http.Server
  private seq = 0
  readonly aborts: SimAbort[] = []
  private readonly counts = {
    tokens: { foreground: 0, background: 0 },
    completed: { foreground: 0, background: 0 },
    aborted: { foreground: 0, background: 0 },
    steps: 0,
  }
  get stats(): SimStats {
    return { ...this.counts, running: this.running.length, waiting: this.waiting.length }
  }

  constructor(params: Partial<SimParams> = {}) {
    this.params = { ...DEFAULT_SIM, ...params }
  }

  async listen(port = 0, host = '127.0.0.1'): Promise<string> {
    const server = http.createServer((req, res) => this.handle(req, res))
    server.keepAliveTimeout = 30_000
    this.server = server
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, host, () => resolve())
    })
    const { address, port: bound } = server.address() as AddressInfo
    return `http://${address}:${bound}`
  }

  async stop() {
    const server = this.server
    if (!server) return
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }

  private handle(req: IncomingMessage, res: ServerResponse) {
    const path = (req.url ?? '/').split('?')[0]
    if (req.method === 'GET' && path === '/health') return void res.end('ok')
    if (req.method === 'GET' && path === '/v1/models')
      return this.json(res, 200, { object: 'list', data: [{ id: 'sim', object: 'model', owned_by: 'engine-sim' }] })
    if (req.method === 'GET' && path === '/sim/stats') return this.json(res, 200, this.stats)
    if (req.method === 'GET' && path === '/sim/aborts') return this.json(res, 200, this.aborts)
    if (req.method === 'POST' && (path === '/v1/completions' || path === '/v1/chat/completions')) {
      const chunks: Buffer[] = []
      let size = 0
      req.on('data', (c: Buffer) => {
        size += c.length
        if (size <= 1 << 20) chunks.push(c)
      })
      req.on('end', () => {
        if (size > 1 << 20) return this.json(res, 413, { error: { message: 'body too large' } })
        let body: Record<string, unknown>
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
        } catch {
          return this.json(res, 400, { error: { message: 'body is not JSON' } })
        }
        this.enqueue(req, res, body, path === '/v1/chat/completions')
      })
      return
    }
    this.json(res, 404, { error: { message: `no route ${req.method} ${path}` } })
  }

  private json(res: ServerResponse, status: number, body: unknown) {
    res.writeHead(status, { 'content-type': 'application/json' })
    res.end(JSON.stringify(body))
  }

  private enqueue(req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>, chat: boolean) {
    if (this.waiting.length >= this.params.maxWaiting) return this.json(res, 503, { error: { message: 'queue full' } })
    const prompt = chat
      ? JSON.stringify(body.messages ?? '')
      : typeof body.prompt === 'string'
        ? body.prompt
        : JSON.stringify(body.prompt ?? '')
    const id = String(body.request_id ?? req.headers['x-request-id'] ?? `sim-${++this.seq}`)
    const background = req.headers['x-flexinfer-workload-class'] === 'background' || id.startsWith('bg-')
    const maxTokens = Number(body.max_tokens ?? this.params.defaultMaxTokens)
    const s: Seq = {
      id,
      klass: background ? 'background' : 'foreground',
      priority: typeof body.priority === 'number' ? body.priority : 0,
      arrival: now(),
      promptTokens: Math.max(1, Math.ceil(prompt.length / 4)),
      maxTokens:
        Number.isInteger(maxTokens) && maxTokens > 0 ? Math.min(maxTokens, 8192) : this.params.defaultMaxTokens,
      generated: 0,
      prefilled: false,
      stream: body.stream === true,
      chat,
      model: String(body.model ?? 'sim'),
      res,
      gone: false,
    }
    // The client went away (a gate aborting, a workload killed): noticed at once — the connection's end, as an ASGI
    // server sees it, not the next failed write — and the request leaves the batch at the next step boundary.
    const socket = req.socket
    const gone = () => {
      socket.off('end', gone)
      if (s.gone || res.writableFinished) return
      s.gone = true
      s.goneAt = now()
      this.counts.aborted[s.klass]++
      if (this.aborts.length < MAX_ABORT_LOG)
        this.aborts.push({ id: s.id, klass: s.klass, seenAt: s.goneAt, generated: s.generated })
    }
    res.on('close', gone)
    socket.once('end', gone)
    res.on('finish', () => socket.off('end', gone))
    this.waiting.push(s)
    if (!this.stepping) this.schedule()
  }

  private schedule() {
    this.stepping = true
    // Drop the disconnected, then fill the batch from the waiting queue in the engine's order.
    for (let i = this.running.length - 1; i >= 0; i--) if (this.running[i]?.gone) this.running.splice(i, 1)
    for (let i = this.waiting.length - 1; i >= 0; i--) if (this.waiting[i]?.gone) this.waiting.splice(i, 1)
    if (this.params.priorityScheduling) this.waiting.sort((a, b) => a.priority - b.priority || a.arrival - b.arrival)
    let prefillTokens = 0
    while (this.running.length < this.params.maxNumSeqs && this.waiting.length) {
      const s = this.waiting.shift() as Seq
      prefillTokens += s.promptTokens
      this.running.push(s)
    }
    if (!this.running.length) {
      this.stepping = false
      return
    }
    const batch = this.running.length
    const stepMs =
      this.params.stepBaseMs + this.params.stepPerSeqMs * batch + this.params.prefillMsPerToken * prefillTokens
    setTimeout(() => this.step(), stepMs)
  }

  private step() {
    this.counts.steps++
    for (let i = this.running.length - 1; i >= 0; i--) {
      const s = this.running[i] as Seq
      if (s.gone) continue
      s.prefilled = true
      s.generated++
      this.counts.tokens[s.klass]++
      this.emit(s)
      if (s.generated >= s.maxTokens) {
        this.finish(s)
        this.running.splice(i, 1)
      }
    }
    this.schedule()
  }

  private emit(s: Seq) {
    if (!s.stream) return
    if (!s.res.headersSent)
      s.res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-request-id': s.id })
    const choice = s.chat
      ? { index: 0, delta: { content: ` t${s.generated}` }, finish_reason: null }
      : { index: 0, text: ` t${s.generated}`, finish_reason: null }
    const object = s.chat ? 'chat.completion.chunk' : 'text_completion'
    s.res.write(`data: ${JSON.stringify({ id: s.id, object, model: s.model, choices: [choice] })}\n\n`)
  }

  private finish(s: Seq) {
    this.counts.completed[s.klass]++
    s.gone = true
    const usage = {
      prompt_tokens: s.promptTokens,
      completion_tokens: s.generated,
      total_tokens: s.promptTokens + s.generated,
    }
    if (s.stream) {
      s.res.end('data: [DONE]\n\n')
      return
    }
    const text = Array.from({ length: s.generated }, (_, i) => ` t${i + 1}`).join('')
    const choice = s.chat
      ? { index: 0, message: { role: 'assistant', content: text }, finish_reason: 'length' }
      : { index: 0, text, finish_reason: 'length' }
    this.json(s.res, 200, {
      id: s.id,
      object: s.chat ? 'chat.completion' : 'text_completion',
      model: s.model,
      choices: [choice],
      usage,
    })
  }
}
