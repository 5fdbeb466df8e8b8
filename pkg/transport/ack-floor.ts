// Acknowledgement in batches for an AckAll consumer: one ack covers every message up to its stream sequence, so
// it is sent only for the highest message below which everything this process was given is finished (handled,
// dead-lettered or given up). A message still in flight, or waiting to be redelivered after a nak, holds the floor.
//
// Caveat of AckAll itself (server side): the floor is the consumer's, not this process's. Instances sharing one
// durable ack each other's messages (functions/demand/README.md).

/** What the tracker needs of a message (JsMsg has it). */
export interface FloorMsg {
  seq: number
  ack(): void
}

interface Entry<M extends FloorMsg> {
  seq: number
  msg: M
  done: boolean
}

export class AckFloor<M extends FloorMsg> {
  /** Unacked messages by stream sequence, ascending from `head` (deliveries arrive almost always in order). */
  private entries: Entry<M>[] = []
  private head = 0
  private scheduled = false
  /** Acks sent (tests, logs). */
  acks = 0

  constructor(
    /** Bound: the consumer's max_ack_pending keeps the server from giving more; past it, `delivered` refuses. */
    private readonly max: number,
    private readonly schedule: (flush: () => void) => void = setImmediate,
  ) {}

  /** Messages tracked (unacked). */
  get size() {
    return this.entries.length - this.head
  }

  /** A delivery (first or redelivery). False when the tracker is full: the caller must not ack past it then. */
  delivered(msg: M): boolean {
    const seq = msg.seq
    const last = this.entries[this.entries.length - 1]
    if (this.size === 0 || (last && seq > last.seq)) {
      if (this.size >= this.max) return false
      this.entries.push({ seq, msg, done: false })
      return true
    }
    const i = this.find(seq)
    const at = this.entries[i]
    if (at && at.seq === seq) {
      // A redelivery: its newest delivery is the one to ack with, and it is unfinished again.
      at.msg = msg
      at.done = false
      return true
    }
    if (this.size >= this.max) return false
    this.entries.splice(i, 0, { seq, msg, done: false })
    return true
  }

  /** The message is finished: the floor may move past it. */
  finished(msg: M) {
    const at = this.entries[this.find(msg.seq)]
    if (!at || at.seq !== msg.seq || at.msg !== msg) return
    at.done = true
    if (at === this.entries[this.head] && !this.scheduled) {
      this.scheduled = true
      this.schedule(() => this.flush())
    }
  }

  /** Acks the highest finished message below the first unfinished one (one ack for the whole run). */
  flush() {
    this.scheduled = false
    let top: Entry<M> | undefined
    while (this.head < this.entries.length) {
      const e = this.entries[this.head] as Entry<M>
      if (!e.done) break
      top = e
      this.head++
    }
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head)
      this.head = 0
    }
    if (!top) return
    this.acks++
    try {
      top.msg.ack()
    } catch {
      // Connection closing: everything above the server's floor is redelivered, as it would be anyway.
    }
  }

  /** Index of the first entry with seq ≥ `seq` (binary search from head). */
  private find(seq: number): number {
    let lo = this.head
    let hi = this.entries.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if ((this.entries[mid] as Entry<M>).seq < seq) lo = mid + 1
      else hi = mid
    }
    return lo
  }
}
