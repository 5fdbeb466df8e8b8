// The gate's one reader of an engine's event stream: bytes in, as the socket cuts them, and out the payload of each
// complete `data:` line (trimmed), in order. The bytes are decoded as one UTF-8 stream, so a character split between
// two chunks arrives whole. A line longer than the bound is skipped to its end instead of held: memory stays bounded
// whatever the engine sends. Comments (`: ping`), `event:` lines and blank lines are not data and are left out.

export class SseDataReader {
  private partial = ''
  private skipping = false
  private readonly decoder = new TextDecoder()

  constructor(
    private readonly onData: (payload: string) => void,
    /** Longest line, in characters, kept while waiting for its end. */
    private readonly maxLineChars: number,
  ) {}

  push(chunk: Uint8Array | string) {
    const text = this.partial + (typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true }))
    let start = 0
    for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', start)) {
      if (!this.skipping) this.line(text.slice(start, nl))
      this.skipping = false
      start = nl + 1
    }
    this.partial = text.slice(start)
    if (this.partial.length > this.maxLineChars) {
      this.partial = ''
      this.skipping = true
    }
  }

  private line(line: string) {
    if (line.startsWith('data:')) this.onData(line.slice(5).trim())
  }
}
