// A foreground request as demand's handler receives it from JetStream (decoded, with the server's store time), for
// tests that drive a Demand directly.
import type { InboundEvent } from '../../../events/codec.js'

export const storedRequest = (namespace: string, model: string, storedAt = Date.now()): InboundEvent => ({
  type: 'ai.flexinfer.foreground.request',
  id: `r-${model}-${storedAt}`,
  source: 'test',
  time: new Date(storedAt).toISOString(),
  storedAt,
  data: { namespace, model },
})
