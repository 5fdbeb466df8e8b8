// Hostile inputs the chaos suite sends (issue 8), shared by the JetStream and HTTP transport tests: each must be
// dead-lettered with a specific, header-safe reason, and none may crash or wedge the process.
import { randomUUID } from 'node:crypto'

export interface Hostile {
  /** A subject token / label for the case. */
  name: string
  body: string | Uint8Array
  /** What the dead-letter reason must say. */
  reason: RegExp
  /** Where the HTTP binding (the cloudevents SDK) words it differently. */
  httpReason?: RegExp
}

const envelope = (fields: Record<string, unknown>) =>
  JSON.stringify({
    specversion: '1.0',
    id: randomUUID(),
    source: 'gateway',
    type: 'ai.flexinfer.foreground.request',
    time: new Date().toISOString(),
    datacontenttype: 'application/json',
    ...fields,
  })

const DEPTH = 100_000
const deepArrays = `${'['.repeat(DEPTH)}${']'.repeat(DEPTH)}`

/** `maxBytes`: the largest body the transport takes (NATS max_payload, minus room for the subject and headers). */
export function hostileInputs(namespace: string, maxBytes: number): Hostile[] {
  const big = envelope({ data: { namespace, model: 'x' } })
  const huge = big.replace('"model":"x"', `"model":"${'x'.repeat(maxBytes - big.length + 1)}"`)
  return [
    // Reasons that quote the input: the CR/LF reached the dead-letter header and made it invalid.
    { name: 'crlf-type', body: envelope({ type: 'evil\r\nX-Injected: 1\r\n\r\n' }), reason: /unknown event type/ },
    {
      name: 'crlf-id',
      body: envelope({ id: 'id\r\nX-Injected: 1', data: { namespace } }),
      reason: /invalid data: model/,
    },
    {
      name: 'control-type',
      body: envelope({ type: 'a\u0000b\u0007c\u001b[31md\u007f\u0085' }),
      reason: /unknown event type/,
    },
    { name: 'crlf-extension', body: envelope({ 'bad\r\nkey': 'v' }), reason: /extension attribute/ },
    { name: 'not-json', body: '{"specversion": "1.0", ', reason: /not JSON/ },
    { name: 'bad-utf8', body: new Uint8Array([0xff, 0xfe, 0x7b, 0x0d, 0x0a, 0x00]), reason: /not JSON/ },
    { name: 'not-object', body: '[1, 2, 3]', reason: /not a JSON object/ },
    { name: 'empty-object', body: '{}', reason: /missing specversion, id, source, type/, httpReason: /missing id/ },
    { name: 'deep-body', body: deepArrays, reason: /not a JSON object/ },
    { name: 'deep-data', body: envelope({ data: 'DEEP' }).replace('"DEEP"', deepArrays), reason: /invalid data/ },
    { name: 'huge', body: huge, reason: /invalid data: model/ },
    { name: 'unknown-type', body: envelope({ type: 'com.example.nope' }), reason: /unknown event type "com\.example/ },
    // In the catalog object's prototype, not the catalog: the lookup crashed on them.
    { name: 'proto-type', body: envelope({ type: 'constructor' }), reason: /unknown event type "constructor"/ },
    { name: 'proto-type2', body: envelope({ type: '__proto__' }), reason: /unknown event type "__proto__"/ },
    { name: 'bad-name', body: envelope({ data: { namespace, model: 'Gemma 4' } }), reason: /invalid data: model/ },
    {
      name: 'bad-namespace',
      body: envelope({ data: { namespace: '../kube-system\n', model: 'm' } }),
      reason: /invalid data: namespace/,
    },
  ]
}

/** No control characters, bounded: what a NATS header (and a person reading it) can take. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
export const HEADER_SAFE = /^[^\u0000-\u001f\u007f-\u009f]{1,1024}$/
