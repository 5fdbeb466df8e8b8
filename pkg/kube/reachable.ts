// Waiting out an apiserver that does not answer: a call failed for want of an answer runs again as soon as the
// apiserver answers, instead of after its event's redelivery backoff (by then up to 30 s apart), which would hold a
// cancel back that long after the apiserver is back.
import { withDeadline } from '../lib/deadline.js'
import { statusCode } from './errors.js'

/** How a request that got no answer fails: the socket's errors, fetch's, our own deadline's. */
const NO_ANSWER =
  /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|EHOSTUNREACH|ENETUNREACH|EAI_AGAIN|socket hang up|fetch failed|DeadlineError|AbortError|FetchError/

/**
 * The apiserver did not answer (or answered "not yet": 429 while its storage initializes, 503). Only that: an error
 * of the caller's own (a refusal to delete, a decode failure) has no status either, and waiting would not change it.
 */
const notAnswering = (err: unknown) => {
  const code = statusCode(err)
  if (code === 429 || code === 503) return true
  if (code !== undefined) return false
  const e = err as { name?: unknown; code?: unknown; message?: unknown; cause?: { code?: unknown; message?: unknown } }
  return NO_ANSWER.test(`${e?.name} ${e?.code} ${e?.message} ${e?.cause?.code} ${e?.cause?.message}`)
}

/** How often a caller waiting for the apiserver asks whether it answers. */
const REACHABLE_POLL_MS = 250
/** The longest one shared poll runs (bounded even when every caller gave up meanwhile). */
const POLL_FOR_MS = 60_000

/**
 * One apiserver's reachability, asked by one probe shared by every waiting caller: `probe` is a request any
 * authenticated identity may send (discovery), each with a deadline of its own, every REACHABLE_POLL_MS.
 */
export class Reachability {
  private answering: Promise<void> | undefined

  constructor(private readonly probe: () => Promise<unknown>) {}

  /** See Kube.whenReachable. */
  async when<T>(call: () => Promise<T>, maxWaitMs: number): Promise<T> {
    const until = Date.now() + maxWaitMs
    for (;;) {
      try {
        return await call()
      } catch (err) {
        const left = until - Date.now()
        if (!notAnswering(err) || left <= 0) throw err
        this.answering ??= this.pollUntilAnswering().finally(() => {
          this.answering = undefined
        })
        const answered = await withDeadline(this.answering, left, 'the apiserver to answer').then(
          () => true,
          () => false,
        )
        if (!answered) throw err
      }
    }
  }

  /** Polls until the apiserver answers, at most POLL_FOR_MS (then rejects; a later caller starts another). */
  private async pollUntilAnswering(): Promise<void> {
    const until = Date.now() + POLL_FOR_MS
    for (;;) {
      if (Date.now() > until) throw new Error(`the apiserver did not answer within ${POLL_FOR_MS} ms`)
      try {
        await withDeadline(this.probe(), REACHABLE_POLL_MS * 4, 'apiserver discovery')
        return
      } catch (err) {
        if (!notAnswering(err)) return // an answer, even a refusal: it is reachable
        await new Promise((r) => setTimeout(r, REACHABLE_POLL_MS).unref())
      }
    }
  }
}
