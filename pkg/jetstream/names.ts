// The names a function's durable consumers get on each stream: KEDA's ScaledObjects, the provision step and
// admission's fence all name them the same way.

/** Durable consumer name of a function on a stream (KEDA's ScaledObjects name these). */
export const consumerName = (fn: string, stream: string) =>
  stream === 'FLEXINFER_EVENTS' ? fn : `${fn}-${stream.replace(/^FLEXINFER_/, '').toLowerCase()}`

/** A function's name under a runner's instance name: its durable consumers carry it (pkg/transport/deps.ts scoped). */
export const instanceName = (fn: string, instance?: string) => (instance ? `${fn}-${instance}` : fn)
