// The gateway side: one call per request. Background-class requests are dropped here (they never reset an
// idle window). An optional per-model throttle publishes the first request after a quiet period at once
// (leading edge, so preemption is never delayed) and then at most one event per interval carrying the newest
// request time (trailing edge, so the idle window still starts from the last request).

import { type JetStreamClient, jetstream } from '@nats-io/jetstream'
import type { NatsConnection } from '@nats-io/transport-node'
import { subjectFor } from './catalog.js'
import { encode } from './codec.js'

export interface ForegroundRequest {
  namespace: string
  model: string
  workloadClass?: 'foreground' | 'background'
  /** Request time; defaults to now. */
  time?: Date
}

export interface EmitterOptions {
  /** Per-model throttle interval in ms; 0 (default) publishes every request. */
  throttleMs?: number
  /** Wait for JetStream's ack (default true); false publishes on core NATS, still stored by the stream. */
  acknowledged?: boolean
  source?: string
}

export interface ForegroundEmitter {
  /** Resolves when the event is stored (or immediately when throttled/dropped). */
  emit(request: ForegroundRequest): Promise<void>
  /** Publishes pending trailing events and stops timers. */
  close(): Promise<void>
  readonly stats: { emitted: number; throttled: number; background: number }
}

/** Throttle entries kept before quiet ones are forgotten (a bounded map whatever names the gateway sees). */
export const MAX_THROTTLED_MODELS = 10_000

export function createForegroundEmitter(nc: NatsConnection, options: EmitterOptions = {}): ForegroundEmitter {
  const throttleMs = options.throttleMs ?? 0
  const acknowledged = options.acknowledged ?? true
  const js: JetStreamClient = jetstream(nc)
  const stats = { emitted: 0, throttled: 0, background: 0 }
  const models = new Map<string, { lastSent: number; pending?: ForegroundRequest; timer?: NodeJS.Timeout }>()

  const send = async (request: ForegroundRequest) => {
    const data = { namespace: request.namespace, model: request.model, workloadClass: 'foreground' as const }
    const body = encode('ai.flexinfer.foreground.request', data, {
      time: (request.time ?? new Date()).toISOString(),
      source: options.source ?? 'gateway',
    })
    stats.emitted++
    // The per-model subject: admission reads the model's newest request from it directly (events/README.md).
    const subject = subjectFor('ai.flexinfer.foreground.request', data)
    if (acknowledged) await js.publish(subject, body)
    else nc.publish(subject, body)
  }

  const flushTrailing = (key: string) => {
    const entry = models.get(key)
    if (!entry?.pending) return
    const pending = entry.pending
    entry.pending = undefined
    entry.timer = undefined
    entry.lastSent = Date.now()
    void send(pending).catch(() => {})
  }

  /** Entries past their interval with nothing pending hold no information: a new request would be sent at once. */
  const forgetQuiet = (now: number) => {
    for (const [key, entry] of models) if (!entry.timer && now - entry.lastSent >= throttleMs) models.delete(key)
  }

  return {
    stats,
    async emit(request) {
      if (request.workloadClass === 'background') {
        stats.background++
        return
      }
      if (throttleMs <= 0) return send(request)
      const key = `${request.namespace}.${request.model}`
      const now = Date.now()
      let entry = models.get(key)
      if (!entry) {
        if (models.size >= MAX_THROTTLED_MODELS) forgetQuiet(now)
        entry = { lastSent: 0 }
        models.set(key, entry)
      }
      if (now - entry.lastSent >= throttleMs && !entry.timer) {
        entry.lastSent = now
        return send(request)
      }
      stats.throttled++
      entry.pending = request
      entry.timer ??= setTimeout(() => flushTrailing(key), Math.max(0, entry.lastSent + throttleMs - now))
    },
    async close() {
      for (const [key, entry] of models) {
        clearTimeout(entry.timer)
        if (entry.pending) {
          const pending = entry.pending
          entry.pending = undefined
          await send(pending)
        }
        models.delete(key)
      }
    },
  }
}
