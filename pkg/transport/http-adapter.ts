// Transport: one function served over HTTP the way Knative Eventing delivers events (a Broker/Trigger POSTs each
// CloudEvent to `/`), in binary mode (ce-* headers, data in the body) or structured mode
// (application/cloudevents+json); batch mode (application/cloudevents-batch+json, a JSON array) too. The status
// code is what the Broker acts on — it retries 5xx (and 404/408/409/429) and never retries other 4xx:
//
//   202  handled: the event's effect is durable (for a batch: every event); empty body (no reply event)
//   400  malformed or invalid CloudEvent, or a type this endpoint does not take — dead-lettered here, never retried
//   401  missing or wrong bearer token (when a token is configured) — not kept: it is not ours
//   415  not a CloudEvent (no ce-* headers and not application/cloudevents+json), or binary mode with non-JSON data
//   422  the handler threw PermanentError (can never succeed) — dead-lettered here, never retried
//   503  transient handler failure, or the dead letter could not be stored: retry later (nothing is lost)
//
// GET /healthz, /readyz (503 while stopping, without NATS, or when the function says why it cannot work) and /metrics.
//
// The handler logic is shared with the JetStream adapter (pkg/transport/process-event.ts); functions are unaware of it.
import { HTTP } from 'cloudevents'
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify'
import { type DecodeResult, type InboundEvent, validate } from '../../events/codec.js'
import type { RequestAuthenticator } from './auth/kubernetes.js'
import { assertUsableToken, bearerMatches, type TokenProvider } from './auth/token.js'
import { openDeps, type ProcessOptions } from './deps.js'
import { type Deps, type EventFunction, holdPlace } from './function.js'
import { BackfillMetrics } from './metrics.js'
import { type Outcome, processDecoded } from './process-event.js'

export { bearerMatches, readToken } from './auth/token.js'

/** Largest request body taken (413 above it, before it is read when Content-Length says so). */
export const DEFAULT_BODY_LIMIT = 1024 * 1024
/** Time to receive a whole request, headers and body (408 after it): a slow sender cannot hold a socket. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 10_000

export interface HttpAdapterOptions {
  /**
   * Bearer token required on POST / (a fixed value, or one re-read from its mounted Secret file); undefined: no
   * authentication. Checked when the request's headers arrive, before any of the body is read.
   */
  token?: string | TokenProvider
  /**
   * Instead of a shared token: verify each request's bearer token another way (Knative's OIDC sender identity,
   * pkg/transport/auth/kubernetes.ts). Also checked before the body is read.
   */
  authenticator?: RequestAuthenticator
  /** CloudEvent types taken here; any other is answered 400 (and dead-lettered). Default: every catalog type. */
  acceptTypes?: readonly string[]
  /** Accept application/cloudevents-batch+json (default true). */
  batch?: boolean
  /** Bytes; default DEFAULT_BODY_LIMIT. */
  bodyLimit?: number
  /** Default DEFAULT_REQUEST_TIMEOUT_MS. */
  requestTimeoutMs?: number
}

const MIME_CE = 'application/cloudevents+json'
const MIME_CE_BATCH = 'application/cloudevents-batch+json'
const isJsonType = (t: string) =>
  t === 'application/json' || t === 'text/json' || /^application\/[\w.+-]*\+json$/.test(t)

interface Decoded {
  results: DecodeResult[]
  /** What is dead-lettered when the request is malformed (ce-* headers kept for binary mode, never others). */
  payload: string
}

type Parsed = { ok: true; decoded: Decoded } | { ok: false; status: 415; error: string }

function contentTypeOf(req: FastifyRequest): string {
  return (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() ?? ''
}

function ceHeaders(req: FastifyRequest): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(req.headers)) {
    if ((k.startsWith('ce-') || k === 'content-type') && typeof v === 'string') out[k] = v
  }
  return out
}

const describe = (err: unknown) => (err instanceof Error ? err.message : String(err))

/** The event as JSON for the dead-letter stream; data nested too deep to serialise is replaced by why. */
function serialise(event: InboundEvent): string {
  try {
    return JSON.stringify(event)
  } catch (err) {
    return JSON.stringify({ ...event, data: `[not serialisable: ${describe(err)}]` })
  }
}

function parseRequest(req: FastifyRequest, opts: HttpAdapterOptions): Parsed {
  const body = typeof req.body === 'string' ? req.body : ''
  const contentType = contentTypeOf(req)
  const malformed = (reason: string, payload = body): Parsed => ({
    ok: true,
    decoded: { results: [{ ok: false, reason }], payload },
  })

  if (contentType === MIME_CE_BATCH) {
    if (opts.batch === false) return { ok: false, status: 415, error: `${MIME_CE_BATCH} is not accepted here` }
    let raw: unknown
    try {
      raw = JSON.parse(body)
    } catch (err) {
      return malformed(`batch is not JSON: ${describe(err)}`)
    }
    if (!Array.isArray(raw) || raw.length === 0) return malformed('batch is not a non-empty JSON array')
    return { ok: true, decoded: { results: raw.map((item) => validateRaw(item)), payload: body } }
  }

  if (contentType === MIME_CE) {
    let raw: unknown
    try {
      raw = JSON.parse(body)
    } catch (err) {
      return malformed(`not JSON: ${describe(err)}`)
    }
    if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return malformed('not a JSON object')
    // The SDK invents an id and a time when they are missing; on the wire both are ours to require.
    if (typeof (raw as { id?: unknown }).id !== 'string') return malformed('invalid CloudEvent envelope: missing id')
    return { ok: true, decoded: { results: [fromBinding(req, body, MIME_CE, raw)], payload: body } }
  }

  if (req.headers['ce-id'] !== undefined || req.headers['ce-specversion'] !== undefined) {
    if (contentType && !isJsonType(contentType))
      return { ok: false, status: 415, error: `binary-mode data must be JSON, not ${contentType}` }
    const payload = JSON.stringify({ headers: ceHeaders(req), body })
    if (typeof req.headers['ce-id'] !== 'string' || !req.headers['ce-id'])
      return malformed('invalid CloudEvent envelope: missing id', payload)
    const result = fromBinding(req, body, contentType || 'application/json')
    return { ok: true, decoded: { results: [result], payload } }
  }

  return {
    ok: false,
    status: 415,
    error: `unsupported content type "${contentType}": send a CloudEvent in binary mode (ce-* headers, JSON data) or ${MIME_CE}`,
  }
}

/** The cloudevents SDK's HTTP binding, then the catalog's validation (events/codec validate). */
function fromBinding(req: FastifyRequest, body: string, contentType: string, raw?: object): DecodeResult {
  try {
    const headers = { ...ceHeaders(req), 'content-type': contentType }
    const event = HTTP.toEvent<unknown>({ headers, body })
    if (Array.isArray(event)) return { ok: false, reason: 'expected one event, got a batch' }
    const json: Record<string, unknown> = { ...event }
    // Keep the wire's own time (absent stays absent for validate's rules) rather than the SDK's default.
    const time = raw ? (raw as { time?: unknown }).time : req.headers['ce-time']
    if (time === undefined) delete json.time
    return validateRaw(json)
  } catch (err) {
    return { ok: false, reason: `invalid CloudEvent: ${describe(err)}` }
  }
}

function validateRaw(raw: unknown): DecodeResult {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return { ok: false, reason: 'not a JSON object' }
  try {
    return validate(raw)
  } catch (err) {
    return { ok: false, reason: `invalid CloudEvent: ${describe(err)}` }
  }
}

function semaphore(limit: number) {
  let free = limit
  const waiting: (() => void)[] = []
  return {
    async acquire() {
      if (free > 0) {
        free--
        return
      }
      await new Promise<void>((resolve) => waiting.push(resolve))
    },
    release() {
      const next = waiting.shift()
      if (next) next()
      else free++
    },
  }
}

/** The fastify app serving `fn` on POST / plus /healthz and /readyz. Closing it drains in-flight requests. */
export function buildHttpApp(fn: EventFunction, deps: Deps, opts: HttpAdapterOptions = {}): FastifyInstance {
  const log = deps.log.child({ function: fn.name, transport: 'http' })
  // Fastify's own request logging is off: our lines carry what matters and never a header.
  const requestTimeout = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS
  const app = Fastify({
    loggerInstance: log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    bodyLimit: opts.bodyLimit ?? DEFAULT_BODY_LIMIT,
    requestTimeout,
    // Node enforces the deadline only with headersTimeout no longer than it, checked on this interval (default
    // 30 s, far too coarse for a 10 s deadline).
    http: {
      requestTimeout,
      headersTimeout: requestTimeout,
      connectionsCheckingInterval: Math.max(100, Math.min(1_000, requestTimeout / 4)),
    },
  }) as unknown as FastifyInstance
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => done(null, body))
  // Graceful: on close, stop accepting, answer what is in flight with `connection: close` (so keep-alive
  // connections end and close() can finish), then resolve.
  let closing = false
  app.addHook('preClose', async () => {
    closing = true
  })
  app.addHook('onSend', async (_req, reply) => {
    if (closing) reply.header('connection', 'close')
  })

  app.get('/healthz', async () => ({ ok: true }))
  app.get('/readyz', async (_req, reply) => {
    const why = closing ? 'stopping' : deps.bus.nc.isClosed() ? 'NATS connection closed' : fn.notReady?.()
    reply.code(why ? 503 : 200)
    return why ? { ok: false, function: fn.name, why } : { ok: true, function: fn.name }
  })
  // What every function serves, whatever its transport: its process metrics and its own function metrics. Never the
  // cluster-wide series: only a cancel process holding the exporter lease exports those (pkg/transport/metrics.ts).
  const metrics = new BackfillMetrics(undefined, () => false)
  metrics.attach(deps.bus)
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', metrics.registry.contentType)
    return metrics.metrics()
  })

  const slots = semaphore(Math.max(1, fn.concurrency))

  const deadLetter = async (reason: string, payload: string): Promise<boolean> => {
    log.warn({ reason }, 'dead-lettered event')
    try {
      await deps.bus.deadLetter(fn.name, reason, payload, `http:${fn.name}`)
      return true
    } catch (err) {
      // Answered 503: the sender retries (and its own dead-letter sink takes it if that keeps failing).
      log.error({ err: describe(err), reason, bytes: payload.length }, 'dead-letter publish failed: answering 503')
      return false
    }
  }

  // The token is checked as soon as the headers are in (onRequest runs before the body is read): an
  // unauthenticated sender gets 401 and the connection is closed without its body being read or parsed.
  const token = opts.token
  const authenticated: ((header: string | undefined) => boolean | Promise<boolean>) | undefined = opts.authenticator
    ? (header) => (opts.authenticator as RequestAuthenticator).verify(header)
    : token === undefined
      ? undefined
      : typeof token === 'string'
        ? (header) => bearerMatches(header, token)
        : (header) => bearerMatches(header, token.current())
  if (authenticated) {
    app.addHook('onRequest', async (req, reply) => {
      if (req.method !== 'POST') return
      if (await authenticated(req.headers.authorization)) return
      log.warn({ remote: req.ip, hasAuthorization: req.headers.authorization !== undefined }, 'unauthenticated request')
      return reply.code(401).header('www-authenticate', 'Bearer').header('connection', 'close').send({
        error: 'unauthorized',
      })
    })
  }
  app.addHook('onError', async (req, _reply, err) => {
    const code = (err as { code?: string }).code
    if (code === 'FST_ERR_CTP_BODY_TOO_LARGE' || code === 'FST_ERR_CTP_INVALID_CONTENT_LENGTH')
      log.warn({ remote: req.ip, limit: opts.bodyLimit ?? DEFAULT_BODY_LIMIT }, 'request body too large: 413')
  })

  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    const parsed = parseRequest(req, opts)
    if (!parsed.ok) {
      reply.code(parsed.status)
      return { error: 'unsupported media type', reason: parsed.error }
    }
    const { results, payload } = parsed.decoded
    const accepted = results.map((r): DecodeResult => {
      if (!r.ok || !opts.acceptTypes || opts.acceptTypes.includes(r.event.type)) return r
      return { ok: false, reason: `event type "${r.event.type}" is not accepted here (${opts.acceptTypes.join(', ')})` }
    })
    const bad = accepted.flatMap((r, i) => (r.ok ? [] : [results.length > 1 ? `[${i}] ${r.reason}` : r.reason]))
    if (bad.length) {
      // Never retried: retrying cannot fix it. Kept in the dead-letter stream with the reason, so nothing is lost.
      const reason = bad.join('; ')
      if (!(await deadLetter(reason, payload))) {
        reply.code(503)
        return { error: 'could not store the rejected event; retry', reason }
      }
      reply.code(400)
      return { error: 'malformed event', reason, deadLettered: true }
    }

    // At most fn.concurrency events in the handler at once, as on JetStream; the rest wait their turn (Knative's
    // queue-proxy queues the same way; answering 429 would only add the Broker's retry backoff).
    const outcomes: Outcome[] = await Promise.all(
      accepted.map(async (r) => {
        await slots.acquire()
        const ctx = holdPlace(() => slots.release())
        try {
          return await processDecoded(fn, deps, r, ctx)
        } finally {
          ctx.release()
        }
      }),
    )
    const transient = outcomes.filter((o) => o.kind === 'transient')
    if (transient.length) {
      for (const o of transient) log.warn({ err: describe(o.err), type: o.event.type, id: o.event.id }, 'retrying')
      reply.code(503).header('retry-after', '1')
      return { error: 'transient failure; retry', reason: transient.map((o) => o.reason).join('; ') }
    }
    const permanent = outcomes.filter((o) => o.kind === 'permanent')
    if (permanent.length) {
      for (const o of permanent) {
        if (!(await deadLetter(o.reason, serialise(o.event)))) {
          reply.code(503)
          return { error: 'could not store the rejected event; retry', reason: o.reason }
        }
      }
      reply.code(422)
      return { error: 'event can never succeed', reason: permanent.map((o) => o.reason).join('; '), deadLettered: true }
    }
    // An empty body: a Broker's filter reads a 2xx body as the subscriber's reply event, and one that is not a
    // CloudEvent fails the delivery (502, retried, then dead-lettered) although it was handled. The count is a header.
    reply.code(202).header('x-accepted-events', String(outcomes.length))
    return reply.send()
  }
  app.post('/', handler)
  return app
}

export interface HttpFunctionOptions extends HttpAdapterOptions, ProcessOptions {
  /** Defaults to 8080 (Knative's $PORT); 0: any free port. */
  port?: number
  host?: string
}

export interface HttpFunction {
  url: string
  deps: Deps
  app: FastifyInstance
  /** Stops accepting, drains in-flight requests, then stops the function and the NATS connection. */
  stop(): Promise<void>
}

/** A process serving one function over HTTP (a Knative Service, or the ingress). */
export async function startHttpFunction(fn: EventFunction, opts: HttpFunctionOptions): Promise<HttpFunction> {
  // A placeholder or empty token is refused before anything starts (the shipped examples' values included).
  if (typeof opts.token === 'string') assertUsableToken(opts.token, `the bearer token of ${fn.name}`)
  else if (opts.token) assertUsableToken(opts.token.current(), `the bearer token of ${fn.name}`)
  const deps = await openDeps({ ...opts, name: `model-backfill:${fn.name}:http`, functions: [fn.name] })
  const { log } = deps
  await fn.start?.(deps)
  const app = buildHttpApp(fn, deps, opts)
  const url = await app.listen({ port: opts.port ?? 8080, host: opts.host ?? '127.0.0.1' })
  const authenticated = opts.authenticator ? 'kubernetes' : opts.token !== undefined ? 'token' : 'none'
  log.info({ function: fn.name, url, authenticated }, 'serving CloudEvents over HTTP')
  return {
    url,
    deps,
    app,
    async stop() {
      await app.close()
      if (opts.token && typeof opts.token !== 'string') (opts.token as { close?: () => void }).close?.()
      await fn.stop?.()
      await deps.close()
    },
  }
}
