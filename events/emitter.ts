// The gateway side: one call per request. Background-class requests are dropped here (they never reset an
// idle window). An optional per-model throttle publishes the first request after a quiet period at once
// (leading edge, so preemption is never delayed) and then at most one event per interval carrying the newest
// request time (trailing edge, so the idle window still starts from the last request).
//
// NATS outages: emit() never blocks the gateway's request path longer than `publishTimeoutMs` and never throws.
// While NATS is unreachable (or a publish is not acknowledged in time) requests go to a bounded buffer holding the
// newest request per model — for idle tracking and preemption only the newest matters, so older ones for the same
// model are coalesced — flushed as soon as the connection is back. A flushed request is stored later than it was
// made, which only makes the model's idle window start later (the safe side) and still cancels a running Job.
// What is coalesced or dropped (buffer full, closed) is counted: stats, a callback, and prom-client counters.

import { randomUUID } from 'node:crypto'
import { type JetStreamClient, jetstream } from '@nats-io/jetstream'
import { type ConnectionOptions, connect, type NatsConnection, type Status } from '@nats-io/transport-node'
import { Counter, Gauge, type Registry } from 'prom-client'
import { natsServerOptions } from '../jetstream/bus.js'
import { eventTraceContext } from '../observability/tracing.js'
import { subjectFor } from './catalog.js'
import { type Extensions, encode } from './codec.js'

export interface ForegroundRequest {
  namespace: string
  model: string
  workloadClass?: 'foreground' | 'background'
  /** Request time; defaults to now. */
  time?: Date
}

/** What became of one emit() call. */
export type EmitOutcome =
  /** Stored by JetStream (acknowledged), or handed to the connected client (acknowledged: false). */
  | 'published'
  /** Held for the trailing event of the per-model throttle. */
  | 'throttled'
  /** NATS unreachable or slow: kept in the buffer (newest per model) and published on reconnect. */
  | 'buffered'
  /** A background-class request: never published. */
  | 'background'
  /** Lost: the emitter is closed (or its connection closed for good). Counted and reported to onDrop. */
  | 'dropped'

export type DropReason = 'overflow' | 'closed'

export interface EmitterOptions {
  /** Per-model throttle interval in ms; 0 (default) publishes every request. */
  throttleMs?: number
  /** Wait for JetStream's ack (default true); false publishes on core NATS, still stored by the stream. */
  acknowledged?: boolean
  source?: string
  /**
   * Longest wait for JetStream's ack (default 1000 ms): past it the request goes to the buffer and emit() returns.
   * This bounds the time a gateway's request handler can spend in emit().
   */
  publishTimeoutMs?: number
  /** Models held while NATS is unreachable (default 10,000): beyond it the least recently requested is dropped. */
  maxBuffered?: number
  /** Called for every request lost (buffer overflow, or still unsent at close / when the connection closed). */
  onDrop?: (request: ForegroundRequest, why: DropReason) => void
  /** Registers the emitter's counters (flexinfer_gateway_emitter_*) in the gateway's prom-client registry. */
  registry?: Registry
}

export interface EmitterStats {
  /** Published (stored, or handed to the connected client when not acknowledged), flushed ones included. */
  emitted: number
  throttled: number
  background: number
  /** Requests that went to the buffer (NATS unreachable, or no ack in time). */
  buffered: number
  /** Buffered requests replaced by a newer one for the same model. */
  coalesced: number
  /** Requests lost (see onDrop). */
  dropped: number
  /** Buffered requests published after the connection came back. */
  flushed: number
  /** Publishes that failed or timed out (their request was buffered). */
  failedPublishes: number
  /** Models in the buffer now. */
  pending: number
}

export interface ForegroundEmitter {
  /** Resolves (never rejects) within about publishTimeoutMs with what became of the request. */
  emit(request: ForegroundRequest): Promise<EmitOutcome>
  /**
   * Publishes pending trailing events and what is buffered (waiting at most `timeoutMs`, default 2 s, for NATS),
   * counts the rest as dropped, and stops timers. Closes the connection when the emitter opened it.
   */
  close(timeoutMs?: number): Promise<void>
  readonly stats: Readonly<EmitterStats>
  /** Whether the emitter's connection is up now. */
  readonly connected: boolean
}

/** Throttle entries kept before quiet ones are forgotten (a bounded map whatever names the gateway sees). */
export const MAX_THROTTLED_MODELS = 10_000
export const DEFAULT_MAX_BUFFERED = 10_000
export const DEFAULT_PUBLISH_TIMEOUT_MS = 1000
/** Flush retries back off from this up to FLUSH_RETRY_MAX_MS (JetStream may answer 503 a moment after reconnect). */
const FLUSH_RETRY_MS = 250
const FLUSH_RETRY_MAX_MS = 5000
/** Buffered requests published at once during a flush. */
const FLUSH_BATCH = 256

/**
 * Connection options for a gateway's NATS connection: credentials from the URL (natsServerOptions), reconnect
 * forever (nats.js gives up after 10 attempts by default, ~20 s: a longer outage would close the connection for
 * good and every later request would be lost), 1 s between attempts with up to 1 s of jitter (so a fleet of
 * gateways does not reconnect in lockstep), and keep trying when NATS is down at start.
 */
export function emitterConnectionOptions(servers: string, name = 'flexinfer-gateway'): ConnectionOptions {
  return {
    ...natsServerOptions(servers),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 1000,
    reconnectJitter: 1000,
    waitOnFirstConnect: true,
    // Notice a dead server within ~10 s even when the TCP connection is not reset (a partition).
    pingInterval: 5000,
    maxPingOut: 2,
    noAsyncTraces: true,
  }
}

/**
 * An emitter that owns its connection (emitterConnectionOptions): returned at once, whether or not NATS is up —
 * requests are buffered until the first connection is made. close() closes the connection.
 */
export function openForegroundEmitter(servers: string, options: EmitterOptions = {}): ForegroundEmitter {
  let nc: NatsConnection | undefined
  const connecting = connect(emitterConnectionOptions(servers, options.source ?? 'flexinfer-gateway'))
  const emitter = createForegroundEmitter(connecting, options)
  void connecting.then(
    (c) => {
      nc = c
    },
    () => {},
  )
  const close = emitter.close
  emitter.close = async (timeoutMs?: number) => {
    await close(timeoutMs)
    await nc?.close()
    // Not connected yet: close the connection when the attempt makes one.
    if (!nc) void connecting.then((c) => c.close()).catch(() => {})
  }
  return emitter
}

interface Counters {
  requests: Counter<'outcome'>
  coalesced: Counter
  dropped: Counter<'reason'>
  pending: Gauge
}

/** The same metric objects for every emitter of a registry (prom-client refuses a name registered twice). */
function countersFor(registry: Registry | undefined): Counters | undefined {
  if (!registry) return undefined
  const get = <T>(name: string, make: () => T) => (registry.getSingleMetric(name) as T | undefined) ?? make()
  return {
    requests: get(
      'flexinfer_gateway_emitter_requests_total',
      () =>
        new Counter({
          name: 'flexinfer_gateway_emitter_requests_total',
          help: 'Foreground requests by what became of them: published, throttled, buffered, background, dropped.',
          labelNames: ['outcome'],
          registers: [registry],
        }),
    ),
    coalesced: get(
      'flexinfer_gateway_emitter_coalesced_total',
      () =>
        new Counter({
          name: 'flexinfer_gateway_emitter_coalesced_total',
          help: 'Buffered requests replaced by a newer request for the same model while NATS was unreachable.',
          registers: [registry],
        }),
    ),
    dropped: get(
      'flexinfer_gateway_emitter_dropped_total',
      () =>
        new Counter({
          name: 'flexinfer_gateway_emitter_dropped_total',
          help: 'Foreground requests lost: the buffer was full (overflow) or the emitter closed with them unsent.',
          labelNames: ['reason'],
          registers: [registry],
        }),
    ),
    pending: get(
      'flexinfer_gateway_emitter_buffered_models',
      () =>
        new Gauge({
          name: 'flexinfer_gateway_emitter_buffered_models',
          help: 'Models whose newest request waits in the buffer for NATS.',
          registers: [registry],
        }),
    ),
  }
}

/** A request as sent: its time, event id and trace context fixed when it was made (not when it is flushed). */
type Stamped = ForegroundRequest & { time: Date; id: string; extensions: Extensions }

export function createForegroundEmitter(
  connection: NatsConnection | Promise<NatsConnection>,
  options: EmitterOptions = {},
): ForegroundEmitter {
  const throttleMs = options.throttleMs ?? 0
  const acknowledged = options.acknowledged ?? true
  const publishTimeoutMs = options.publishTimeoutMs ?? DEFAULT_PUBLISH_TIMEOUT_MS
  const maxBuffered = Math.max(1, options.maxBuffered ?? DEFAULT_MAX_BUFFERED)
  const source = options.source ?? 'gateway'
  const counters = countersFor(options.registry)
  const stats: EmitterStats = {
    emitted: 0,
    throttled: 0,
    background: 0,
    buffered: 0,
    coalesced: 0,
    dropped: 0,
    flushed: 0,
    failedPublishes: 0,
    pending: 0,
  }
  const models = new Map<string, { lastSent: number; pending?: Stamped; timer?: NodeJS.Timeout }>()
  /** Newest unsent request per model, in least-recently-requested order (a Map keeps insertion order). */
  const buffer = new Map<string, Stamped>()
  let nc: NatsConnection | undefined
  let js: JetStreamClient | undefined
  let connected = false
  let closed = false
  let flushing: Promise<void> | undefined
  let flushTimer: NodeJS.Timeout | undefined
  let retryMs = FLUSH_RETRY_MS
  /** The connection's status iterator (nats.js's has stop(), though its type does not say so). */
  let statusLoop: { stop?(): void } | undefined

  const outcome = (o: EmitOutcome) => {
    counters?.requests.inc({ outcome: o })
    return o
  }
  const keyOf = (r: ForegroundRequest) => `${r.namespace}.${r.model}`
  const drop = (request: ForegroundRequest, why: DropReason) => {
    stats.dropped++
    counters?.dropped.inc({ reason: why })
    try {
      options.onDrop?.(request, why)
    } catch {
      // A gateway's callback must not break the emitter.
    }
  }
  const setPending = () => {
    stats.pending = buffer.size
    counters?.pending.set(buffer.size)
  }

  /** Keeps the newest request per model; beyond maxBuffered the least recently requested model is dropped. */
  const store = (request: Stamped) => {
    const key = keyOf(request)
    const held = buffer.get(key)
    if (held) {
      stats.coalesced++
      counters?.coalesced.inc()
      buffer.delete(key)
      buffer.set(key, held.time > request.time ? held : request)
    } else {
      if (buffer.size >= maxBuffered) {
        const [oldestKey, oldest] = buffer.entries().next().value as [string, Stamped]
        buffer.delete(oldestKey)
        drop(oldest, 'overflow')
      }
      buffer.set(key, request)
    }
    setPending()
  }

  const publish = async (request: Stamped) => {
    if (!nc || !js) throw new Error('not connected')
    const data = { namespace: request.namespace, model: request.model, workloadClass: 'foreground' as const }
    const id = request.id
    const body = encode('ai.flexinfer.foreground.request', data, {
      id,
      time: request.time.toISOString(),
      source,
      extensions: request.extensions,
    })
    // The per-model subject: admission reads the model's newest request from it directly (events/README.md).
    const subject = subjectFor('ai.flexinfer.foreground.request', data)
    // msgID: a publish whose ack was lost and that is sent again from the buffer is stored once.
    if (acknowledged) await js.publish(subject, body, { msgID: id, timeout: publishTimeoutMs })
    else nc.publish(subject, body)
    stats.emitted++
  }

  /** Publishes now when connected (bounded by publishTimeoutMs), else buffers. Never throws. */
  const send = async (request: Stamped): Promise<EmitOutcome> => {
    if (closed) {
      drop(request, 'closed')
      return 'dropped'
    }
    if (!connected) {
      stats.buffered++
      store(request)
      return 'buffered'
    }
    // Connected: published at once even while the buffer is being flushed (a preemption must not wait behind a
    // flush backing off); an older buffered request for the same model is superseded by this one.
    const held = buffer.get(keyOf(request))
    if (held && held.time <= request.time) {
      buffer.delete(keyOf(request))
      stats.coalesced++
      counters?.coalesced.inc()
      setPending()
    }
    try {
      await publish(request)
      return 'published'
    } catch {
      stats.failedPublishes++
      stats.buffered++
      store(request)
      scheduleFlush(retryMs)
      return 'buffered'
    }
  }

  const scheduleFlush = (delayMs: number) => {
    if (flushTimer || flushing || closed || !connected) return
    flushTimer = setTimeout(() => {
      flushTimer = undefined
      void flush()
    }, delayMs)
    flushTimer.unref?.()
  }

  /** Publishes the buffer in batches while connected; on a failure re-buffers and retries with a backoff. */
  const flush = (): Promise<void> => {
    // .finally runs after the assignment (a synchronous finally inside would run before it and never clear it).
    flushing ??= (async () => {
      while (buffer.size > 0 && connected) {
        const batch = [...buffer.values()].slice(0, FLUSH_BATCH)
        for (const r of batch) buffer.delete(keyOf(r))
        setPending()
        const results = await Promise.allSettled(batch.map(publish))
        let failed = 0
        results.forEach((result, i) => {
          if (result.status === 'fulfilled') stats.flushed++
          else {
            failed++
            stats.failedPublishes++
            store(batch[i] as Stamped)
          }
        })
        if (failed) {
          retryMs = Math.min(FLUSH_RETRY_MAX_MS, retryMs * 2)
          return
        }
        retryMs = FLUSH_RETRY_MS
      }
    })().finally(() => {
      flushing = undefined
      if (buffer.size > 0) scheduleFlush(retryMs)
    })
    return flushing
  }

  const attach = (c: NatsConnection) => {
    nc = c
    js = jetstream(c)
    if (closed) return
    connected = !c.isClosed()
    const iter = c.status() as AsyncIterable<Status> & { stop?(): void }
    statusLoop = iter
    void (async () => {
      for await (const s of iter) {
        if (s.type === 'disconnect' || s.type === 'reconnecting') connected = false
        else if (s.type === 'reconnect') {
          connected = true
          retryMs = FLUSH_RETRY_MS
          scheduleFlush(0)
        } else if (s.type === 'close') {
          connected = false
          // Closed for good (a connection made without reconnecting forever): what is buffered cannot be sent.
          for (const r of buffer.values()) drop(r, 'closed')
          buffer.clear()
          setPending()
          closed = true
        }
      }
    })().catch(() => {})
    void c.closed().then(() => {
      connected = false
    })
    scheduleFlush(0)
  }

  if (connection instanceof Promise) connection.then(attach, () => {})
  else attach(connection)

  const flushTrailing = (key: string) => {
    const entry = models.get(key)
    if (!entry?.pending) return
    const pending = entry.pending
    entry.pending = undefined
    entry.timer = undefined
    entry.lastSent = Date.now()
    void send(pending)
  }

  /** Entries past their interval with nothing pending hold no information: a new request would be sent at once. */
  const forgetQuiet = (now: number) => {
    for (const [key, entry] of models) if (!entry.timer && now - entry.lastSent >= throttleMs) models.delete(key)
  }

  return {
    stats,
    get connected() {
      return connected
    },
    async emit(request) {
      if (request.workloadClass === 'background') {
        stats.background++
        return outcome('background')
      }
      const id = randomUUID()
      // The gateway's active trace (its request span), if any, goes with the event: CloudEvents distributed tracing.
      const extensions = eventTraceContext({ type: 'ai.flexinfer.foreground.request', id, source }) ?? {}
      const stamped: Stamped = { ...request, time: request.time ?? new Date(), id, extensions }
      if (throttleMs <= 0) return outcome(await send(stamped))
      const key = keyOf(request)
      const now = Date.now()
      let entry = models.get(key)
      if (!entry) {
        if (models.size >= MAX_THROTTLED_MODELS) forgetQuiet(now)
        entry = { lastSent: 0 }
        models.set(key, entry)
      }
      if (now - entry.lastSent >= throttleMs && !entry.timer) {
        entry.lastSent = now
        return outcome(await send(stamped))
      }
      stats.throttled++
      entry.pending = stamped
      entry.timer ??= setTimeout(() => flushTrailing(key), Math.max(0, entry.lastSent + throttleMs - now))
      return outcome('throttled')
    },
    async close(timeoutMs = 2000) {
      for (const [key, entry] of models) {
        clearTimeout(entry.timer)
        if (entry.pending) {
          stats.buffered++
          store(entry.pending)
        }
        models.delete(key)
      }
      clearTimeout(flushTimer)
      flushTimer = undefined
      // One last flush, bounded: NATS may still be down.
      const deadline = Date.now() + timeoutMs
      while (buffer.size > 0 && connected && Date.now() < deadline) {
        await Promise.race([flush(), new Promise((r) => setTimeout(r, Math.max(0, deadline - Date.now())))])
        if (buffer.size > 0) await new Promise((r) => setTimeout(r, Math.min(retryMs, deadline - Date.now())))
      }
      closed = true
      clearTimeout(flushTimer)
      for (const r of buffer.values()) drop(r, 'closed')
      buffer.clear()
      setPending()
      statusLoop?.stop?.()
    },
  }
}
