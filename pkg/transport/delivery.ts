// One delivered JetStream message as the adapter (pkg/transport/jetstream-adapter.ts) carries it from its arrival to
// its end: its stream sequence and store time, its place among the function's handlers, and its ack.
import type { JsMsg } from '@nats-io/jetstream'
import type { AckFloor, FloorMsg } from './ack-floor.js'
import type { HandleContext } from './function.js'
import { type ReplyFields, readReplySubject } from './reply-subject.js'

/** Scratch for a reply subject's fields (read synchronously, copied out at once). */
const REPLY: ReplyFields = { streamSeq: 0, storedAtMs: 0 }

/**
 * One delivered message from its arrival to its end: waiting for a handler, then handled. One object per message and
 * no closures: demand takes tens of thousands of foreground requests a second, where allocations per message and
 * their collection would cost more CPU than the handling itself. It is what an AckAll floor tracks, the keep-alive's
 * entry, and the handler's context (its place among the function's `concurrency`, given back once).
 */
export class Delivery implements HandleContext, FloorMsg {
  /** The keep-alive tick it arrived in, then the one its handler started in. */
  tick: number
  /** No longer kept alive: its handler ran too long. */
  stuck = false
  private holding = false
  readonly seq: number
  /** When the stream stored it (epoch ms). */
  readonly storedAtMs: number
  constructor(
    readonly msg: JsMsg,
    readonly floor: AckFloor<Delivery> | undefined,
    tick: number,
    private readonly free: () => void,
  ) {
    this.tick = tick
    // nats.js's message has the subject (`reply`), though its type does not say so; without it, nats.js's parse.
    const reply = (msg as { reply?: unknown }).reply
    if (typeof reply === 'string' && readReplySubject(reply, REPLY)) {
      this.seq = REPLY.streamSeq
      this.storedAtMs = REPLY.storedAtMs
    } else {
      // Not a form read above: nats.js's parse (which throws, saying why, for what is no JetStream delivery).
      this.seq = msg.info.streamSequence
      this.storedAtMs = msg.info.timestampNanos / 1e6
    }
  }
  ack() {
    this.msg.ack()
  }
  /** Its handler starts: it holds a place until release(). */
  hold(tick: number) {
    this.tick = tick
    this.holding = true
  }
  release() {
    if (!this.holding) return
    this.holding = false
    this.free()
  }
}
