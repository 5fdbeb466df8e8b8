// ingress: for gateways that can only POST CloudEvents over HTTP. Served by the HTTP adapter with a bearer token
// (INGRESS_TOKEN, or INGRESS_TOKEN_FILE naming a mounted Secret); takes `ai.flexinfer.foreground.request` only
// (binary, structured or a batch), validated by the catalog, and publishes each to its per-model subject as
// structured JSON (events/README.md), answering 202 once JetStream has stored it. Not in functionFactories: it
// consumes nothing from JetStream (a runner consuming foreground requests would re-publish them forever).
import { catalog } from '../../events/catalog.js'
import { type EventFunction, PermanentError } from '../../transport/function.js'

export const INGRESS_TYPES = ['ai.flexinfer.foreground.request'] as const

export const ingress: EventFunction = {
  name: 'ingress',
  subscriptions: [],
  concurrency: 256,
  async handle(event, deps) {
    if (event.type !== 'ai.flexinfer.foreground.request') throw new PermanentError(`ingress takes ${INGRESS_TYPES}`)
    // The event id (per source) de-duplicates a gateway's retry within the stream's duplicate window.
    // A relay: the gateway's trace context (traceparent/tracestate) goes on unchanged.
    const { id, source, time, extensions } = event
    await deps.bus.publish(event.type, event.data, { id, source, time, extensions, msgID: `ingress:${source}:${id}` })
  },
}

export const INGRESS_SUBJECT = catalog['ai.flexinfer.foreground.request'].subject
