// The small bus every function uses to publish events, arm timers and dead-letter what it cannot accept, on a NATS
// connection (connect.ts) and the topology it provisioned or bound to (topology.ts).
import {
  type JetStreamClient,
  type JetStreamManager,
  JsHeaders,
  jetstream,
  jetstreamManager,
  PubHeaders,
} from '@nats-io/jetstream'
import { headers, type NatsConnection } from '@nats-io/transport-node'
import {
  type EventData,
  type EventType,
  RESYNC_SCHEDULE_SUBJECT,
  STREAM_TIMERS,
  scheduleSubject,
  subjectFor,
} from '../../events/catalog.js'
import { type Extensions, encode } from '../../events/codec.js'
import { scheduleAt } from '../core/timer-tick.js'
import { type Buckets, ensureBuckets } from './buckets.js'
import { connectWaiting } from './connect.js'
import {
  DEAD_LETTER_MAX_PAYLOAD,
  DEAD_LETTER_REASON,
  DEAD_LETTER_TRUNCATED,
  headerSafe,
} from './dead-letter-headers.js'
import { acrossLeaderChange, PROVISION_DEADLINE_MS } from './errors.js'
import { ensureStreams, lastBySubject } from './streams.js'
import { bindTopology, type TopologyOptions } from './topology.js'

/** How long a disarmed timer's tombstone stays stored (Nats-TTL; the server's minimum is 1 s). */
export const TIMER_TOMBSTONE_TTL = '1s'

export class Bus {
  readonly js: JetStreamClient
  constructor(
    readonly nc: NatsConnection,
    readonly jsm: JetStreamManager,
    readonly kv: Buckets,
    /** How this bus came by its topology: consumers are then created or bound the same way. */
    readonly topology: TopologyOptions = {},
  ) {
    this.js = jetstream(nc)
  }

  static async connect(servers: string, name: string, topology: TopologyOptions = {}): Promise<Bus> {
    const nc = await connectWaiting(servers, name, topology)
    try {
      return await Bus.open(nc, topology)
    } catch (err) {
      await nc.close()
      throw err
    }
  }

  static async open(nc: NatsConnection, topology: TopologyOptions = {}): Promise<Bus> {
    // Its first request (the account's JetStream info) goes unanswered while a cluster elects its meta leader.
    const jsm = await acrossLeaderChange('reaching JetStream', () => jetstreamManager(nc), PROVISION_DEADLINE_MS)
    if (topology.provision === false) return new Bus(nc, jsm, await bindTopology(jsm, nc, topology), topology)
    const replicas = topology.replicas ?? 1
    await ensureStreams(jsm, replicas)
    return new Bus(nc, jsm, await ensureBuckets(nc, jsm, replicas, topology.log), topology)
  }

  /**
   * Publishes a catalog event and waits for JetStream to store it (id/source/extensions: when relaying someone's
   * event; without extensions, the active trace context, if any, is carried: events/codec.ts).
   */
  async publish<T extends EventType>(
    type: T,
    data: EventData<T>,
    options: { time?: string; msgID?: string; id?: string; source?: string; extensions?: Extensions } = {},
  ) {
    const { time, id, source, extensions } = options
    const body = encode(type, data, { time, id, source, extensions })
    return this.js.publish(subjectFor(type, data), body, options.msgID ? { msgID: options.msgID } : undefined)
  }

  /**
   * Arms the backfill's single timer at `at` (replacing any earlier one: one schedule per subject). Nothing waits
   * in memory: the server stores the schedule and publishes the timer event when due, so every function may be
   * scaled to zero meanwhile.
   */
  async armTimer(namespace: string, backfill: string, at: string) {
    const data = { namespace, backfill, due: at }
    const target = subjectFor('ai.flexinfer.timer.fired', data)
    // Stored to fire early by the scheduler's tick (pkg/core/timer-tick.ts); admit waits out the rest.
    const fireAt = scheduleAt(Date.parse(at), Date.now())
    await this.js.publish(scheduleSubject(namespace, backfill), encode('ai.flexinfer.timer.fired', data), {
      schedule: { specification: new Date(fireAt), target },
    })
  }

  /** Whether the backfill's timer schedule is stored (armed and not yet fired); a tombstone is no timer. */
  async timerArmed(namespace: string, backfill: string): Promise<boolean> {
    const stored = await lastBySubject(this.jsm, STREAM_TIMERS, scheduleSubject(namespace, backfill))
    return Boolean(stored?.header.get(PubHeaders.Schedule))
  }

  /**
   * Makes sure the repeating resync schedule is stored with this interval: one schedule for the whole system
   * (`@every`, fired by the server into FLEXINFER_TIMERS, so it keeps firing while every function is scaled to
   * zero). Left alone when already stored with the same interval: re-publishing it would restart its period, and
   * processes that restart more often than that would then never see a sweep. Returns whether it (re)armed it.
   */
  async armResync(intervalMs: number): Promise<boolean> {
    const specification = `@every ${Math.max(1000, Math.round(intervalMs))}ms`
    const data = { intervalMs: Math.max(1000, Math.round(intervalMs)) }
    // Provision arms it right after scaling the streams, when FLEXINFER_TIMERS may still be electing its leader.
    return acrossLeaderChange('arming the resync schedule', async () => {
      const stored = await lastBySubject(this.jsm, STREAM_TIMERS, RESYNC_SCHEDULE_SUBJECT)
      if (stored?.header.get(PubHeaders.Schedule) === specification) return false
      await this.js.publish(RESYNC_SCHEDULE_SUBJECT, encode('ai.flexinfer.resync.due', data), {
        schedule: { specification, target: subjectFor('ai.flexinfer.resync.due', data) },
      })
      return true
    })
  }

  /**
   * Disarms the backfill's timer without a purge: a tombstone (no Nats-Schedule header, so the server stores it and
   * never fires it) rolls up the schedule on its subject, then expires by its TTL so the sweep's listing of stored
   * schedules (functions/lifecycle/resync.ts) stops showing it. Arming again simply replaces the tombstone.
   */
  async cancelTimer(namespace: string, backfill: string) {
    const h = headers()
    h.set(JsHeaders.RollupHdr, JsHeaders.RollupValueSubject)
    h.set(PubHeaders.MessageTTL, TIMER_TOMBSTONE_TTL)
    await this.js.publish(scheduleSubject(namespace, backfill), new Uint8Array(), { headers: h })
  }

  /**
   * Keeps what could not be accepted, with why, so nothing is lost and a person can see the reason. The reason is
   * made header-safe: it often quotes the input, and a CR/LF in it would make the header invalid, fail the publish
   * and have the poison message redelivered forever. A payload that, with the headers, would not fit the server's
   * max_payload (or would crowd the 64 MiB stream: 1 MiB hostile bodies) is kept truncated, with its real size.
   */
  async deadLetter(fn: string, reason: string, payload: Uint8Array | string, originalSubject?: string) {
    const h = headers()
    h.set(DEAD_LETTER_REASON, headerSafe(reason))
    if (originalSubject) h.set('Flexinfer-Original-Subject', headerSafe(originalSubject, 256))
    let body = typeof payload === 'string' ? Buffer.from(payload) : payload
    const limit = Math.min(DEAD_LETTER_MAX_PAYLOAD, (this.nc.info?.max_payload ?? 1024 * 1024) - 8 * 1024)
    if (body.byteLength > limit) {
      h.set(DEAD_LETTER_TRUNCATED, String(body.byteLength))
      body = body.subarray(0, limit)
    }
    await this.js.publish(`flexinfer.deadletter.${fn}`, body, { headers: h })
  }

  async close() {
    await this.nc.drain()
  }
}
