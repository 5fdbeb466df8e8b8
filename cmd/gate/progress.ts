// llama.cpp's prompt progress, asked for by the gate on every streamed background request and taken back out of what
// the workload reads. Why: llama.cpp's server notices a closed connection only when it has something to write to it
// (tools/server/server-context.cpp: the streaming handler's next() checks should_stop before each write, and between
// writes waits in server_response_reader::next, which asks should_stop only after a second with no result for any
// request). A request still processing its prompt has nothing to write until its first token, so a gate's close in
// that phase left it computing the rest of its prompt — chunk after chunk, while the foreground request waited. With
// `return_progress` the server writes a progress event after every prompt chunk (server_context::post_decode), the
// write finds the connection closed, and the request is cancelled after the chunk in flight.
//
// A progress event is a streamed chunk with a `prompt_progress` object (and an empty choice): never a token, never
// part of the answer. It is matched on its key with the quotes: inside a JSON string value a quote is escaped, so
// a token's text cannot contain `"prompt_progress":`.

import { Transform } from 'node:stream'

const PROGRESS_KEY = Buffer.from('"prompt_progress":')
const EVENT_END = Buffer.from('\n\n')

/** A data payload that is llama.cpp's prompt progress. */
export function isProgress(payload: string): boolean {
  return payload.includes('"prompt_progress":')
}

/** The body field that asks for it (llama.cpp's completion and chat completion parameters). */
export const RETURN_PROGRESS = 'return_progress'

/** Longest event held while waiting for its end; a longer one is no progress event and is passed on as it comes. */
const MAX_EVENT_BYTES = 64 * 1024

/**
 * Bytes of an event stream in, the same bytes out without the progress events. An event ends at a blank line
 * (llama.cpp ends every one with `\n\n`); an unfinished event is held until its end, at most MAX_EVENT_BYTES.
 */
export class ProgressFilter {
  private held: Buffer = Buffer.alloc(0)
  /** In an event too long to be progress: passed on to its end. */
  private passing = false

  push(chunk: Buffer): Buffer {
    let data = this.held.length ? Buffer.concat([this.held, chunk]) : chunk
    const out: Buffer[] = []
    if (this.passing) {
      const end = data.indexOf(EVENT_END)
      if (end < 0) return data
      out.push(data.subarray(0, end + EVENT_END.length))
      data = data.subarray(end + EVENT_END.length)
      this.passing = false
    }
    let start = 0
    for (let end = data.indexOf(EVENT_END); end >= 0; end = data.indexOf(EVENT_END, start)) {
      const event = data.subarray(start, end + EVENT_END.length)
      if (event.indexOf(PROGRESS_KEY) < 0) out.push(event)
      start = end + EVENT_END.length
    }
    const rest = data.subarray(start)
    if (rest.length > MAX_EVENT_BYTES) {
      out.push(rest)
      this.held = Buffer.alloc(0)
      this.passing = true
    } else {
      this.held = Buffer.from(rest)
    }
    return out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out)
  }

  /** What is held at the stream's end (an event cut short): passed on as it is. */
  end(): Buffer {
    const rest = this.held
    this.held = Buffer.alloc(0)
    return rest
  }
}

/** The filter as a stream between the engine's answer and the workload (backpressure kept by pipe). */
export function withoutProgress(): Transform {
  const filter = new ProgressFilter()
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      const out = filter.push(chunk)
      done(null, out.length ? out : undefined)
    },
    flush(done) {
      const rest = filter.end()
      done(null, rest.length ? rest : undefined)
    },
  })
}
