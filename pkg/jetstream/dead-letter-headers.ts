// The headers a dead-lettered message carries in FLEXINFER_DEADLETTER (Bus.deadLetter writes them, an operator reads
// them), and the form a text derived from input takes to be carried safely (a dead letter's reason, a term's reason).

/** Why the message could not be accepted. */
export const DEAD_LETTER_REASON = 'Flexinfer-Dead-Letter-Reason'
/** Set when the dead-lettered payload was cut to DEAD_LETTER_MAX_PAYLOAD: the original size in bytes. */
export const DEAD_LETTER_TRUNCATED = 'Flexinfer-Dead-Letter-Truncated'
/** Bytes of a rejected payload kept: enough to see what it was; 1 MiB bodies would evict the rest of the stream. */
export const DEAD_LETTER_MAX_PAYLOAD = 64 * 1024

/**
 * A header value that NATS (and a person) can read whatever the input: CR, LF and tab become the two characters
 * `\r`, `\n`, `\t`, other control characters `\u00XX`; cut to `max` characters (ending in …).
 */
export function headerSafe(value: string, max = 1024): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
  const safe = value.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => {
    if (c === '\r') return '\\r'
    if (c === '\n') return '\\n'
    if (c === '\t') return '\\t'
    return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`
  })
  return safe.length <= max ? safe.trim() : `${safe.slice(0, max - 1).trim()}…`
}
