// Scratch functions for transport tests: event functions on subjects of their own in FLEXINFER_EVENTS, run by the real
// JetStream adapter against the test environment's nats-server, stopped and their consumers deleted after the file.
import { randomBytes, randomUUID } from 'node:crypto'
import { Writable } from 'node:stream'
import { afterAll, beforeAll } from 'vitest'
import { STREAM_EVENTS } from '../../../events/catalog.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { consumerName } from '../../../pkg/jetstream/names.js'
import { Kube } from '../../../pkg/kube/client.js'
import { createLogger } from '../../../pkg/observability/log.js'
import type { Deps, EventFunction } from '../../../pkg/transport/function.js'
import {
  type JetStreamOptions,
  type RunningFunction,
  runOnJetStream,
} from '../../../pkg/transport/jetstream-adapter.js'
import type { useTestEnv } from '../../env/fixture.js'

/** A ConfigMap `add` as an ApiServerSource delivers it: an event every function's decoder accepts. */
export const configMapEvent = (name: string, namespace: string) =>
  JSON.stringify({
    specversion: '1.0',
    id: randomUUID(),
    source: 'test',
    type: 'dev.knative.apiserver.resource.add',
    time: new Date().toISOString(),
    data: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace } },
  })

/** The ConfigMap name a configMapEvent carries. */
export const eventName = (data: unknown) => (data as { metadata: { name: string } }).metadata.name

export function useScratchFunctions(env: ReturnType<typeof useTestEnv>, prefix: string) {
  const quiet = new Writable({ write: (_c, _e, done) => done() })
  const running: RunningFunction[] = []
  const consumers: string[] = []
  let bus: Bus
  let kube: Kube
  beforeAll(async () => {
    bus = await Bus.open(env.nc)
    kube = new Kube(env.kc)
  })
  afterAll(async () => {
    for (const r of running) await r.stop().catch(() => {})
    for (const name of consumers) await bus.jsm.consumers.delete(STREAM_EVENTS, name).catch(() => {})
    kube?.close()
  })
  const deps = (): Deps => ({ kube, bus, log: createLogger(`${prefix}-test`, quiet), now: Date.now })
  return {
    get bus() {
      return bus
    },
    /** A fresh name and the subject prefix its events go to. */
    fresh() {
      const name = `${prefix}-${randomBytes(4).toString('hex')}`
      return { name, base: `flexinfer.events.k8s.${name}`, consumer: consumerName(name, STREAM_EVENTS) }
    },
    /** Runs `fn` (its subscriptions on STREAM_EVENTS); stopped and its consumer deleted after the file. */
    async run(fn: EventFunction, opts: JetStreamOptions = {}) {
      consumers.push(consumerName(fn.name, STREAM_EVENTS))
      const r = await runOnJetStream(deps(), fn, opts)
      running.push(r)
      return r
    },
  }
}
