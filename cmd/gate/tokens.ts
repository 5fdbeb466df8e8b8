// Tokens a background request received, counted from the engine's event stream as it passes the gate: the harvest
// the useful-work accounting reads. A streamed chunk that carries a choice is one token on llama.cpp and vLLM (one
// chunk per sampled token); the usage-only chunk at the end (`"choices":[]`) and `[DONE]` are not tokens. A request
// that ends normally has its tokens completed; one cut (the gate closing, the workload leaving, the engine lost) has
// them thrown away: the workload never gets the answer they belong to.

/** Longest event line kept while waiting for its end; a longer one is skipped (not counted), memory stays bounded. */
const MAX_LINE_BYTES = 1024 * 1024

export class TokenCounter {
  tokens = 0
  /** `data: [DONE]` seen: the engine finished the answer. */
  done = false
  private partial = ''
  private skipping = false
  private readonly decoder = new TextDecoder()

  push(chunk: Uint8Array) {
    const text = this.partial + this.decoder.decode(chunk, { stream: true })
    let start = 0
    for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', start)) {
      if (!this.skipping) this.line(text.slice(start, nl))
      this.skipping = false
      start = nl + 1
    }
    this.partial = text.slice(start)
    if (this.partial.length > MAX_LINE_BYTES) {
      this.partial = ''
      this.skipping = true
    }
  }

  private line(line: string) {
    if (!line.startsWith('data:')) return
    const payload = line.slice(5).trim()
    if (payload === '[DONE]') {
      this.done = true
      return
    }
    if (/"choices"\s*:\s*\[\s*\{/.test(payload)) this.tokens++
  }
}
