// The decoded event types, apart from the codec so the decoders it delegates to can name them without importing it.
import type { APISERVER_TYPES, EventData, EventType } from './catalog.js'

export type ApiServerType = (typeof APISERVER_TYPES)[number]

/** A decoded, validated event. ApiServerSource events carry the Kubernetes object as data. */
export type InboundEvent =
  | {
      [T in EventType]: {
        type: T
        id: string
        source: string
        time: string
        subject?: string
        /** When the transport accepted it (JetStream's store time, ms): a clock the sender cannot skew. */
        storedAt?: number
        /** Extension attributes (e.g. traceparent/tracestate), when the event has any. */
        extensions?: Extensions
        data: EventData<T>
      }
    }[EventType]
  | {
      type: ApiServerType
      id: string
      source: string
      time: string
      subject?: string
      storedAt?: number
      extensions?: Extensions
      data: KubeObject
    }

/** CloudEvents extension attributes, by lower-case alphanumeric name. */
export type Extensions = Record<string, string | number | boolean>

export interface KubeObject {
  apiVersion?: string
  kind?: string
  metadata: { name: string; namespace?: string; [key: string]: unknown }
  [key: string]: unknown
}

export type DecodeResult = { ok: true; event: InboundEvent } | { ok: false; reason: string }
