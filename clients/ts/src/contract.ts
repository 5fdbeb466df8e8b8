// The foreground-request contract as a gateway sees it (events/README.md, "The gateway contract"): the event's
// type, its subjects, its envelope and the names it may carry. The Python and Go clients hold the same constants;
// clients/conformance/ is what keeps the three in step.

export const EVENT_TYPE = 'ai.flexinfer.foreground.request'
/** The foreground subject: the one contract.md documents for foreground requests, with no model in it; foreground requests go on `<it>.<namespace>.<model>` (the model's newest request). */
export const SUBJECT = 'flexinfer.events.foreground.request'
export const WORKLOAD_CLASS_HEADER = 'x-flexinfer-workload-class'
export const WORKLOAD_CLASS_ENV = 'FLEXINFER_WORKLOAD_CLASS'

/** A Kubernetes namespace (DNS-1123 label), as the event's JSON Schema requires. */
const NAMESPACE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/
/** A Model's name (DNS-1123 subdomain). */
const NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/

/** Why a namespace/model pair cannot be published, or undefined when it can. */
export function invalidTarget(namespace: unknown, model: unknown): string | undefined {
  if (typeof namespace !== 'string' || namespace.length > 63 || !NAMESPACE.test(namespace))
    return `namespace ${JSON.stringify(namespace)} is not a Kubernetes namespace name (DNS-1123 label)`
  if (typeof model !== 'string' || model.length > 253 || !NAME.test(model))
    return `model ${JSON.stringify(model)} is not a Kubernetes object name (DNS-1123 subdomain)`
  return undefined
}

export const perModelSubject = (namespace: string, model: string) => `${SUBJECT}.${namespace}.${model}`

/** Whether a request is background class: never foreground, never published. */
export function isBackground(workloadClass: string | undefined | null): boolean {
  return workloadClass?.trim().toLowerCase() === 'background'
}

/** The structured-mode CloudEvent (JSON) of one foreground request. */
export function encodeForegroundRequest(r: {
  namespace: string
  model: string
  id: string
  time: Date
  source: string
  extensions?: Record<string, string>
}): string {
  return JSON.stringify({
    specversion: '1.0',
    id: r.id,
    source: r.source,
    type: EVENT_TYPE,
    time: r.time.toISOString(),
    datacontenttype: 'application/json',
    data: { namespace: r.namespace, model: r.model, workloadClass: 'foreground' },
    ...r.extensions,
  })
}
