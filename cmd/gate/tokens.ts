// Tokens a background request received, counted from the engine's event stream as it passes the gate: the harvest
// the useful-work accounting reads. A streamed chunk that carries a choice is one token on llama.cpp and vLLM (one
// chunk per sampled token); the usage-only chunk at the end (`"choices":[]`) and `[DONE]` are not tokens. A request
// that ends normally has its tokens completed; one cut (the gate closing, the workload leaving, the engine lost) has
// them thrown away: the workload never gets the answer they belong to.

import { isProgress } from './progress.js'
import { SseDataReader } from './sse.js'

/** Longest event line kept while waiting for its end; a longer one is skipped (not counted), memory stays bounded. */
const MAX_LINE_BYTES = 1024 * 1024

export class TokenCounter {
  tokens = 0
  /** `data: [DONE]` seen: the engine finished the answer. */
  done = false
  private readonly reader = new SseDataReader((payload) => this.data(payload), MAX_LINE_BYTES)

  push(chunk: Uint8Array) {
    this.reader.push(chunk)
  }

  private data(payload: string) {
    if (payload === '[DONE]') {
      this.done = true
      return
    }
    if (isProgress(payload)) return
    if (/"choices"\s*:\s*\[\s*\{/.test(payload)) this.tokens++
  }
}
