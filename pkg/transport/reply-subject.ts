// What a JetStream delivery's reply subject says about it, read without nats.js's parse of the whole subject (a
// split, a splice and an object for every message: a tenth of what demand allocated per foreground request). The
// two forms the server sends (nats.js's parseInfo reads the same):
//   $JS.ACK.<stream>.<consumer>.<delivered>.<streamSeq>.<deliverySeq>.<nanos>.<pending>
//   $JS.ACK.<domain>.<accountHash>.<stream>.<consumer>.<delivered>.<streamSeq>.<deliverySeq>.<nanos>.<pending>.<random>

/** The stream sequence and store time of a delivery; undefined: not a JetStream ack subject. */
export interface ReplyFields {
  streamSeq: number
  /**
   * Epoch milliseconds, the sub-millisecond part to the microsecond as a fraction: floor() is the millisecond exactly
   * (nanoseconds as a fraction would round 0.9999996 up to the next millisecond at today's epoch).
   */
  storedAtMs: number
}

const DOT = 46
const ZERO = 48

/** Digits of s[from, to) as a number; NaN when empty or not all digits. */
function digits(s: string, from: number, to: number): number {
  if (from >= to) return Number.NaN
  let n = 0
  for (let i = from; i < to; i++) {
    const d = s.charCodeAt(i) - ZERO
    if (d < 0 || d > 9) return Number.NaN
    n = n * 10 + d
  }
  return n
}

/**
 * Reads the two fields into `into` (no allocation) and returns true; false when `reply` is not in one of the two
 * forms (the caller falls back to nats.js's parse, which says what is wrong).
 */
export function readReplySubject(reply: string, into: ReplyFields): boolean {
  if (!reply.startsWith('$JS.ACK.')) return false
  // Dot positions: 8 in the old form, 11 in the new one (no token may contain a dot).
  const dots: number[] = DOTS
  let count = 0
  for (let i = 0; i < reply.length; i++) {
    if (reply.charCodeAt(i) !== DOT) continue
    if (count === 12) return false
    dots[count++] = i
  }
  let seqToken: number
  if (count === 8) seqToken = 5
  else if (count === 11) seqToken = 7
  else return false
  const nanosToken = seqToken + 2
  // Token k spans (dots[k-1], dots[k]); neither token read here is the last.
  const seq = digits(reply, (dots[seqToken - 1] as number) + 1, dots[seqToken] as number)
  const from = (dots[nanosToken - 1] as number) + 1
  const to = dots[nanosToken] as number
  // Milliseconds from all but the last six digits (exact: < 2^53), the microseconds of the rest as the fraction.
  const split = Math.max(from, to - 6)
  const ms = split > from ? digits(reply, from, split) : 0
  const sub = digits(reply, split, to)
  if (Number.isNaN(seq) || Number.isNaN(ms) || Number.isNaN(sub)) return false
  into.streamSeq = seq
  into.storedAtMs = ms + Math.floor(sub / 1000) / 1000
  return true
}

/** Scratch for the dot positions: one array for the process (the parse is synchronous). */
const DOTS: number[] = new Array(12).fill(0)
