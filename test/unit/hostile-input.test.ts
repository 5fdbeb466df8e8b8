// Hostile inputs (issue 8's chaos suite) against the decoder and the dead-letter header: a specific reason for
// each, never a throw; and a reason that quotes the input always fits a NATS header.
import { describe, expect, it } from 'vitest'
import { decode } from '../../events/codec.js'
import { headerSafe } from '../../pkg/jetstream/dead-letter-headers.js'
import { HEADER_SAFE, hostileInputs } from '../integration/transport/hostile.js'

describe('decode of hostile input', () => {
  for (const h of hostileInputs('ns', 1024 * 1024 - 1024)) {
    it(`${h.name}: rejected with a specific reason, never a throw`, () => {
      const result = decode(h.body)
      expect(result.ok).toBe(false)
      if (!result.ok) expect(result.reason).toMatch(h.reason)
    })
  }
})

describe('headerSafe', () => {
  it('escapes CR, LF, tab and other control characters, readably', () => {
    expect(headerSafe('unknown event type "evil\r\nX-Injected: 1"')).toBe(
      'unknown event type "evil\\r\\nX-Injected: 1"',
    )
    expect(headerSafe('a\tb\u0000c\u001bd\u007fe\u0085f\u2028')).toBe('a\\tb\\u0000c\\u001bd\\u007fe\\u0085f\\u2028')
  })

  it('is bounded, and leaves ordinary text (and non-ASCII) alone', () => {
    expect(headerSafe('x'.repeat(5000))).toHaveLength(1024)
    expect(headerSafe('x'.repeat(5000)).endsWith('…')).toBe(true)
    expect(headerSafe('modèle «gemma» not found')).toBe('modèle «gemma» not found')
    for (const s of ['\r\n'.repeat(600), '\u0000'.repeat(2000), ` ${'a'.repeat(1030)}\n`]) {
      expect(headerSafe(s)).toMatch(HEADER_SAFE)
    }
  })
})
