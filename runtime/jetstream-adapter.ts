// Transport: a JetStream pull consumer per (function, stream). Malformed events and events that keep failing go
// to the dead-letter stream with the reason; nothing is dropped silently and nothing crashes the process.
import { AckPolicy, type ConsumerMessages, DeliverPolicy, type JsMsg } from '@nats-io/jetstream'
import { consumerName, type EventFunction } from './function.js'
import { awaitProvisioned, isNotFound } from './nats.js'
import { processEvent } from './process-event.js'
import type { Deps } from './reconcile.js'

const envInt = (name: string, fallback: number) => {
  const n = Number(process.env[name])
  return Number.isInteger(n) && n > 0 ? n : fallback
}
/**
 * The retry budget of a failing event, ~62 s by default: MAX_DELIVER deliveries, naked with a doubling backoff from
 * RETRY_BACKOFF_MS up to RETRY_BACKOFF_MAX_MS, then dead-lettered (env overrides: tests shorten it).
 */
export const MAX_DELIVER = envInt('MAX_DELIVER', 8)
const ACK_WAIT_MS = 30_000
const BACKOFF_BASE_MS = envInt('RETRY_BACKOFF_MS', 250)
const BACKOFF_MAX_MS = envInt('RETRY_BACKOFF_MAX_MS', 30_000)
const backoffMs = (deliveries: number) => Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** Math.min(deliveries, 7))

export interface RunningFunction {
  name: string
  stop(): Promise<void>
  /** Events handled, dead-lettered, retried (for logs, tests and the benchmark). */
  stats: { handled: number; deadLettered: number; retried: number }
}

/** Creates or updates the function's durable consumers (the provision step, and every process run locally). */
export async function ensureConsumers(deps: Pick<Deps, 'bus'>, fn: EventFunction) {
  for (const sub of fn.subscriptions) {
    const durable = consumerName(fn.name, sub.stream)
    const config = {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      ack_wait: ACK_WAIT_MS * 1_000_000,
      max_ack_pending: Math.max(1000, fn.concurrency * 2),
      filter_subjects: sub.subjects,
    }
    try {
      await deps.bus.jsm.consumers.info(sub.stream, durable)
      await deps.bus.jsm.consumers.update(sub.stream, durable, config)
    } catch (err) {
      if (!isNotFound(err)) throw err
      await deps.bus.jsm.consumers.add(sub.stream, {
        ...config,
        deliver_policy: sub.deliverNew ? DeliverPolicy.New : DeliverPolicy.All,
      })
    }
  }
}

/** Deployed (NATS_PROVISION=false): the provision step made the consumers; wait for them, never create one. */
async function bindConsumers(deps: Deps, fn: EventFunction) {
  for (const sub of fn.subscriptions) {
    const durable = consumerName(fn.name, sub.stream)
    await awaitProvisioned(
      `consumer ${durable} on ${sub.stream}`,
      () => deps.bus.jsm.consumers.info(sub.stream, durable),
      {
        ...deps.bus.topology,
        log: deps.log,
      },
    )
  }
}

export async function runOnJetStream(deps: Deps, fn: EventFunction): Promise<RunningFunction> {
  if (deps.bus.topology.provision === false) await bindConsumers(deps, fn)
  else await ensureConsumers(deps, fn)
  await fn.start?.(deps)
  const stats = { handled: 0, deadLettered: 0, retried: 0 }
  const log = deps.log.child({ function: fn.name })
  const inFlight = new Set<Promise<void>>()
  // A slot gate shared by every subscription's loop: O(1) per message (racing thousands of in-flight promises
  // would be O(n)), and each waiting loop is woken when a slot frees.
  const waiting: (() => void)[] = []
  const slotFreed = () => new Promise<void>((resolve) => waiting.push(resolve))
  const settled = (task: Promise<void>) => {
    inFlight.delete(task)
    waiting.shift()?.()
  }

  const loops: { messages: ConsumerMessages; done: Promise<void> }[] = []

  const process = async (msg: JsMsg) => {
    const outcome = await processEvent(fn, deps, msg.data)
    switch (outcome.kind) {
      case 'handled':
        msg.ack()
        stats.handled++
        return
      case 'malformed':
      case 'permanent':
        await deadLetter(msg, outcome.reason)
        return
      case 'transient':
        if (msg.info.deliveryCount >= MAX_DELIVER) {
          await deadLetter(msg, outcome.reason)
          return
        }
        stats.retried++
        log.warn({ error: outcome.reason, delivery: msg.info.deliveryCount }, 'retrying')
        msg.nak(backoffMs(msg.info.deliveryCount))
    }
  }

  const deadLetter = async (msg: JsMsg, reason: string) => {
    log.warn({ subject: msg.subject, reason }, 'dead-lettered event')
    try {
      await deps.bus.deadLetter(fn.name, reason, msg.data, msg.subject)
      msg.term(reason)
      stats.deadLettered++
    } catch (err) {
      // Could not keep it: leave it to be redelivered rather than lose it.
      log.error({ err }, 'dead-letter publish failed')
      msg.nak(1000)
    }
  }

  for (const sub of fn.subscriptions) {
    const consumer = await deps.bus.js.consumers.get(sub.stream, consumerName(fn.name, sub.stream))
    const messages = await consumer.consume({ max_messages: Math.min(Math.max(100, fn.concurrency), 4096) })
    const done = (async () => {
      for await (const msg of messages) {
        // One settled callback per message (not .catch().finally(): two more promises each, at 30k+ events/s).
        const task: Promise<void> = process(msg).then(
          () => settled(task),
          (err) => {
            log.error({ err }, 'unexpected error handling event')
            settled(task)
          },
        )
        inFlight.add(task)
        while (inFlight.size >= fn.concurrency) await slotFreed()
      }
    })()
    loops.push({ messages, done })
  }

  return {
    name: fn.name,
    stats,
    async stop() {
      // Graceful: stop pulling, let what is in flight finish (and ack), then tear down.
      for (const loop of loops) await loop.messages.close()
      await Promise.all(loops.map((l) => l.done))
      await Promise.allSettled([...inFlight])
      await fn.stop?.()
    },
  }
}
