// Transport: a JetStream pull consumer per (function, stream). Malformed events and events that keep failing go
// to the dead-letter stream with the reason; nothing is dropped silently and nothing crashes the process.
//
// Every NATS call on the handler path has a deadline of the client's: JetStream publishes and API requests 5 s,
// KV operations 2 s (nats.js defaults); acks and msg.working() are plain publishes that cannot block.
import { AckPolicy, type ConsumerMessages, type JsMsg } from '@nats-io/jetstream'
import { decode } from '../../events/codec.js'
import { headerSafe } from '../jetstream/dead-letter-headers.js'
import { consumerName } from '../jetstream/names.js'
import { AckFloor } from './ack-floor.js'
import { backoffMs, bindConsumers, type ConsumerOptions, DEFAULT_MAX_DELIVER, ensureConsumers } from './consumers.js'
import { Delivery } from './delivery.js'
import type { Deps, EventFunction } from './function.js'
import { failedOutcome, handleEvent } from './process-event.js'

/**
 * Lifetime of each pull request. A pull waits on the consumer's leader; when that nats-server dies (kill -9 on a
 * cluster) the new leader knows nothing of it and the client notices only after two missed idle heartbeats: with
 * the default 30 s, demand and cancel pulled nothing for 30 s after a failover and Jobs outlived their preemption
 * (dev/chaos/failover.ts). A pull every 4 s per consumer is nothing for the server.
 */
export const PULL_EXPIRES_MS = 4_000
/**
 * The server's heartbeat on an idle pull (the client's minimum): two missed (1 s) and the client pulls again. Consumes are bound (no
 * consumer info before re-pulling): the client's check asks the consumer's leader, which does not exist until the
 * election ends (4-9 s on nats-server), so each check timed out (5 s) and then slept a whole pull lifetime — a cancel
 * stored during an election waited 9-15 s to be delivered (test/integration/cluster/consumer-failover.test.ts).
 * Bound, a lost pull is replaced every second until a leader takes it.
 */
export const PULL_HEARTBEAT_MS = 500

export interface JetStreamOptions extends ConsumerOptions {
  /** Delay before an event whose dead-letter publish failed is delivered again (default 1 s). */
  deadLetterRetryMs?: number
  /** How long a running handler's message is kept alive (default MAX_HANDLER_ACK_WAITS ack waits). */
  maxHandlerMs?: number
}

/**
 * A handler still running after this many ack waits (5 min by default) is stuck, a bug: one demand left requests
 * waiting for a write that never came, and their messages, kept alive, were never acked — on an AckAll consumer they
 * held the ack floor of everything after them. Past it, the message is logged and no longer kept alive, so the
 * server delivers it again instead of holding it unacknowledged for good. Legitimately long handlers (a cancel's
 * bookkeeping behind a burst, a reconcile through an apiserver outage) end well within it.
 */
export const MAX_HANDLER_ACK_WAITS = 10

export interface RunningFunction {
  name: string
  stop(): Promise<void>
  /**
   * Events handled, dead-lettered, retried, and dropped (could not even be dead-lettered on the consumer's last
   * delivery; still in its stream, logged) — for logs, tests and the benchmark.
   */
  stats: { handled: number; deadLettered: number; retried: number; dropped: number }
  /** Delivered messages held for a free handler (not yet started). */
  waiting(): number
}

/** A bounded FIFO with O(1) shift (an array shift is O(n) at thousands waiting). */
export class WaitQueue<T> {
  private items: (T | undefined)[] = []
  private head = 0
  constructor(readonly max: number) {}
  get size() {
    return this.items.length - this.head
  }
  /** False when full (nothing added). */
  push(item: T): boolean {
    if (this.size >= this.max) return false
    this.items.push(item)
    return true
  }
  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined
    const item = this.items[this.head]
    this.items[this.head++] = undefined
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head)
      this.head = 0
    }
    return item
  }
  forEach(f: (item: T) => void) {
    for (let i = this.head; i < this.items.length; i++) f(this.items[i] as T)
  }
}

export async function runOnJetStream(
  deps: Deps,
  fn: EventFunction,
  opts: JetStreamOptions = {},
): Promise<RunningFunction> {
  if (deps.bus.topology.provision === false) await bindConsumers(deps, fn)
  else await ensureConsumers(deps, fn, opts)
  await fn.start?.(deps)
  const stats = { handled: 0, deadLettered: 0, retried: 0, dropped: 0 }
  const log = deps.log.child({ function: fn.name })
  const deadLetterRetryMs = opts.deadLetterRetryMs ?? 1000
  /** In-flight handlers, each with the keep-alive tick it started in (`stuck` once no longer kept alive). */
  const inFlight = new Set<Delivery>()
  /**
   * Handlers holding one of the function's `concurrency` places: in flight and not released (HandleContext.release).
   * A released handler stays in flight, its message unacknowledged, until it ends; how many can be is bounded by the
   * consumer's max_ack_pending, past which the server delivers nothing more.
   */
  let busy = 0
  let starting = false
  // Delivered but not yet handled, one queue per subscription (a slow sweep's timer is not stuck behind the event
  // backlog). nats.js refills a consume's pull as messages *arrive*, not as they are iterated, so a function behind
  // its stream holds up to max_ack_pending delivered messages here, and one that waits for a handler longer than
  // ack_wait is redelivered and handled twice. They are
  // taken off the iterator at once and kept alive below like the in-flight ones, so a delivered message is never
  // redelivered while this process is healthy; the pull itself (ingest's thousands ahead) is unchanged.
  const queues: WaitQueue<Delivery>[] = []
  let nextQueue = 0
  let stopping = false
  /** Fills free slots from the queues, one message from each in turn. */
  const startNext = () => {
    // Not re-entered: a handler releasing its place before its first await would otherwise start the next one
    // inside this loop, one stack frame deeper per waiting message.
    if (starting) return
    starting = true
    try {
      let empty = 0
      while (!stopping && busy < fn.concurrency && empty < queues.length) {
        const d = (queues[nextQueue] as WaitQueue<Delivery>).shift()
        nextQueue = (nextQueue + 1) % queues.length
        if (!d) empty++
        else {
          empty = 0
          start(d)
        }
      }
    } finally {
      starting = false
    }
  }
  const start = (d: Delivery) => {
    busy++
    d.hold(tick)
    inFlight.add(d)
    void run(d)
  }
  const freePlace = () => {
    busy--
    startNext()
  }

  const loops: { messages: ConsumerMessages; done: Promise<void> }[] = []
  /** Per stream: the consumer's delivery limit as configured on the server (≤ 0: none). */
  const maxDeliverOf = new Map<string, number>()
  let ackWaitMs = Number.POSITIVE_INFINITY
  /** Keep-alive ticks so far (see below). */
  let tick = 0

  /**
   * Per stream, when its consumer is AckAll: the floor its batched acks keep to. A message leaves it finished
   * (handled, dead-lettered, given up) and is then covered by one ack; term() is never sent there, since on an
   * AckAll consumer it acks every message below too.
   */
  const floors = new Map<string, AckFloor<Delivery>>()
  const finished = (d: Delivery, term?: string) => {
    if (d.floor) d.floor.finished(d)
    else if (term === undefined) d.msg.ack()
    else d.msg.term(term)
  }

  /**
   * Handles one delivery to its end (decoded, handled, then acked, dead-lettered or taken back); never rejects. Its
   * place, if it still holds one, goes to the next message. One async frame per message: the outcome is classified
   * here rather than by processDecoded, whose promise would be one more per event.
   */
  const run = async (d: Delivery) => {
    try {
      const decoded = decode(d.msg.data)
      if (!decoded.ok) {
        await deadLetter(d, decoded.reason)
        return
      }
      const event = decoded.event
      event.storedAt = d.storedAtMs
      try {
        await handleEvent(fn, deps, event, d)
      } catch (err) {
        const failed = failedOutcome(event, err)
        if (failed.kind === 'permanent') await deadLetter(d, failed.reason)
        else if (failed.kind === 'transient') retry(d, failed.reason)
        return
      }
      finished(d)
      stats.handled++
    } catch (err) {
      // Nothing above throws but a nak or dead-letter on a closing connection; if anything does, the event is retried
      // and dead-lettered like any other.
      log.error({ err, subject: d.msg.subject, seq: d.seq }, 'unexpected error handling event')
      try {
        retry(d, `unexpected error: ${err instanceof Error ? err.message : String(err)}`)
      } catch (again) {
        log.error({ err: again }, 'unexpected error handling event')
      }
    } finally {
      inFlight.delete(d)
      d.release()
    }
  }

  const retry = (d: Delivery, reason: string) => {
    const { msg } = d
    if (msg.info.deliveryCount >= (deps.settings?.maxDeliver ?? DEFAULT_MAX_DELIVER)) {
      void deadLetter(d, reason)
      return
    }
    stats.retried++
    log.warn({ error: reason, delivery: msg.info.deliveryCount }, 'retrying')
    msg.nak(backoffMs(deps.settings, msg.info.deliveryCount))
  }

  const deadLetter = async (d: Delivery, reason: string) => {
    const { msg } = d
    log.warn({ subject: msg.subject, reason }, 'dead-lettered event')
    try {
      await deps.bus.deadLetter(fn.name, reason, msg.data, msg.subject)
      finished(d, headerSafe(reason, 256))
      stats.deadLettered++
    } catch (err) {
      // Could not keep it: leave it to be redelivered rather than lose it — until the consumer's delivery limit,
      // where it is given up (it stays in its stream; this line says where).
      const maxDeliver = maxDeliverOf.get(msg.info.stream) ?? 0
      const last = maxDeliver > 0 && msg.info.deliveryCount >= maxDeliver
      const context = {
        err,
        reason,
        subject: msg.subject,
        stream: msg.info.stream,
        seq: d.seq,
        delivery: msg.info.deliveryCount,
        maxDeliver,
      }
      if (last) {
        log.error(context, 'dead-letter publish failed on the last delivery: event given up (still in its stream)')
        finished(d, headerSafe(reason, 256))
        stats.dropped++
      } else {
        log.error(context, 'dead-letter publish failed: redelivering')
        msg.nak(deadLetterRetryMs)
      }
    }
  }

  for (const sub of fn.subscriptions) {
    const consumer = await deps.bus.js.consumers.get(sub.stream, consumerName(fn.name, sub.stream))
    const { config } = await consumer.info(true)
    maxDeliverOf.set(sub.stream, config.max_deliver ?? -1)
    if (config.ack_wait) ackWaitMs = Math.min(ackWaitMs, config.ack_wait / 1_000_000)
    // The server's policy decides (a deployed function binds to whatever provision made): never ack-all an
    // explicit consumer, whose per-message acks other instances may still rely on.
    const floor =
      config.ack_policy === AckPolicy.All
        ? new AckFloor<Delivery>(Math.max(1, config.max_ack_pending ?? 0) * 2)
        : undefined
    if (floor) floors.set(sub.stream, floor)
    const queue = new WaitQueue<Delivery>(Math.max(config.max_ack_pending ?? 0, fn.concurrency, 1) * 2)
    queues.push(queue)
    const delivered = (msg: JsMsg) => {
      const d = new Delivery(msg, floor, tick, freePlace)
      if (floor && !floor.delivered(d)) {
        // Not tracked, so never finished: taken back for later rather than handled without a floor.
        msg.nak(deadLetterRetryMs)
        return
      }
      if (queue.size === 0 && busy < fn.concurrency) start(d)
      else if (!queue.push(d)) {
        // More than the server may have outstanding (max_ack_pending): only redeliveries of what waits here can
        // get past it. Taken back rather than held without bound.
        msg.nak(deadLetterRetryMs)
      }
    }
    // A callback, not an async iterator: nats.js's iterator costs a queue entry, a promise and an iterator result
    // per message. Called as each message is parsed off the socket; a throw would stop the consume, so none escapes.
    const messages = await consumer.consume({
      max_messages: Math.min(Math.max(100, fn.concurrency), 4096),
      expires: PULL_EXPIRES_MS,
      idle_heartbeat: PULL_HEARTBEAT_MS,
      bind: true,
      callback: (msg) => {
        try {
          delivered(msg)
        } catch (err) {
          // A nak on a closing connection: the message is redelivered after ack_wait.
          log.warn({ err, subject: msg.subject }, 'could not take a delivered message')
        }
      },
    })
    const done = messages.closed().then(() => undefined)
    loops.push({ messages, done })
  }

  // Keep-alive: a handler still running after ack_wait/3 (a slow reconcile, an apiserver deadline and its retry),
  // or a message still waiting for one, tells the server it is working, every ack_wait/3, so its message is not
  // redelivered to a second worker meanwhile. One interval for all of them, no timer per message: each message
  // records the tick it started (or arrived) in, and is kept alive from the tick after next (between 1/3 and 2/3 of
  // ack_wait after that).
  const keepAliveMs = Math.max(100, ackWaitMs / 3)
  // Ticks a running handler is kept alive for; one waiting for a handler is kept alive however long it waits.
  const maxHandlerTicks = Math.ceil((opts.maxHandlerMs ?? MAX_HANDLER_ACK_WAITS * ackWaitMs) / keepAliveMs)
  const keepAlive = Number.isFinite(ackWaitMs)
    ? setInterval(() => {
        tick++
        const keep = (entry: Delivery) => {
          if (entry.tick >= tick - 1) return
          try {
            entry.msg.working()
          } catch {
            // Connection closing: the message is redelivered, as it would be anyway.
          }
        }
        for (const entry of inFlight) {
          if (entry.stuck) continue
          if (tick - entry.tick > maxHandlerTicks) {
            entry.stuck = true
            log.error(
              {
                subject: entry.msg.subject,
                stream: entry.msg.info.stream,
                seq: entry.seq,
                delivery: entry.msg.info.deliveryCount,
                runningMs: Math.round((tick - entry.tick) * keepAliveMs),
              },
              'handler stuck: its event is no longer kept alive and will be delivered again',
            )
            continue
          }
          keep(entry)
        }
        for (const q of queues) q.forEach(keep)
      }, keepAliveMs)
    : undefined
  keepAlive?.unref()

  return {
    name: fn.name,
    stats,
    waiting: () => queues.reduce((n, q) => n + q.size, 0),
    async stop() {
      // Graceful: stop pulling, let what is in flight finish (and ack), then tear down.
      for (const loop of loops) await loop.messages.close()
      await Promise.all(loops.map((l) => l.done))
      // What waits for a handler is given back at once (another instance, or this one restarted, takes it)
      // rather than handled here: a stop lasts as long as what is in flight, not a whole backlog.
      stopping = true
      for (const q of queues) {
        for (let w = q.shift(); w; w = q.shift()) {
          try {
            w.msg.nak()
          } catch {
            // Connection closing: redelivered after ack_wait instead.
          }
        }
      }
      await Promise.allSettled([...inFlight.keys()])
      // What finished is acked before the connection goes (the scheduled flush might come too late).
      for (const floor of floors.values()) floor.flush()
      clearInterval(keepAlive)
      await fn.stop?.()
    },
  }
}
