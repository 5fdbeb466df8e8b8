// The workload: Ready models on nodes, one CronJob template per namespace, several ModelBackfills per model with
// short windows, and bursty foreground traffic per model published as a gateway does (CloudEvents on the
// foreground subject). Every accepted request is logged with its PubAck: that log, not the functions' KV state,
// is what the oracle judges the idle windows by.
import type { KubeConfig } from '@kubernetes/client-node'
import { jetstream } from '@nats-io/jetstream'
import type { NatsConnection } from '@nats-io/transport-node'
import { catalog } from '../../events/catalog.js'
import { encode } from '../../events/codec.js'
import { BackfillWorld } from '../../test/integration/support/backfill-world.js'
import type { ChaosConfig, Rng } from './config.js'

export const NAMESPACES = ['chaos-a', 'chaos-b'] as const
/** The namespace the quota fault applies to. */
export const QUOTA_NAMESPACE = 'chaos-b'
export const FOREIGN_NAMESPACE = 'chaos-foreign'
export const TEMPLATE = 'chaos-tpl'
export const FOREGROUND_SUBJECT = catalog['ai.flexinfer.foreground.request'].subject

export interface DeclaredBackfill {
  namespace: string
  name: string
  model: string
  node: string
  idleForMs: number
  /** A ModelBackfill with a hostile modelRef: it must end Blocked, and must not disturb the others. */
  hostile: boolean
}

export interface ForegroundRequest {
  /** `<namespace>/<model>` */
  model: string
  sentAt: number
  /** PubAck received: the message was stored (JetStream store time ∈ [sentAt, ackAt]). */
  ackAt: number
  seq: number
  background: boolean
}

export const modelKey = (namespace: string, model: string) => `${namespace}/${model}`

/** Hostile modelRefs: what a typo, a copy-paste or a hostile user may put in a ModelBackfill. */
export const HOSTILE_MODEL_REFS = [
  'gemma 4',
  'Gemma',
  'gemma*',
  'gemma>',
  '-gemma',
  'gemma.',
  'gémma',
  'a/b',
  'x'.repeat(300),
  'gemma\ttab',
]

export interface Workload {
  backfills: DeclaredBackfill[]
  /** Model key → node. */
  nodeOf: Map<string, string>
  worlds: Map<string, BackfillWorld>
}

export const emptyWorkload = (): Workload => ({ backfills: [], nodeOf: new Map(), worlds: new Map() })

/** Creates the workload's objects, filling `workload` as it goes (the oracle already watches it). */
export async function declareWorkload(
  kc: KubeConfig,
  nc: NatsConnection,
  config: ChaosConfig,
  random: Rng,
  log: (line: string) => void,
  workload: Workload,
): Promise<void> {
  const { backfills, nodeOf, worlds } = workload
  for (const ns of NAMESPACES) worlds.set(ns, new BackfillWorld(kc, ns, nc))
  for (const world of worlds.values()) await world.template(TEMPLATE)
  for (let i = 0; i < config.models; i++) {
    const namespace = NAMESPACES[i % NAMESPACES.length] as string
    const world = worlds.get(namespace) as BackfillWorld
    const model = `model-${i}`
    const node = `node-${i % config.nodes}`
    nodeOf.set(modelKey(namespace, model), node)
    await world.model(model, { node })
    for (let j = 0; j < config.backfillsPerModel; j++) {
      const name = `bf-${i}-${j}`
      const idleForS = random.int(config.idleForMinS, config.idleForMaxS)
      await world.backfill(name, {
        modelRef: model,
        templateRef: TEMPLATE,
        idleFor: `${idleForS}s`,
        maxRunDuration: '1h',
      })
      backfills.push({ namespace, name, model, node, idleForMs: idleForS * 1000, hostile: false })
    }
  }
  // Hostile refs in the first namespace: a sweep that stops at the first bad object would skip the rest.
  const first = worlds.get(NAMESPACES[0]) as BackfillWorld
  let accepted = 0
  for (const [k, ref] of HOSTILE_MODEL_REFS.entries()) {
    try {
      await first.backfill(`hostile-${k}`, { modelRef: ref, templateRef: TEMPLATE, idleFor: '3s' })
      backfills.push({
        namespace: NAMESPACES[0],
        name: `hostile-${k}`,
        model: ref,
        node: '',
        idleForMs: 3000,
        hostile: true,
      })
      accepted++
    } catch {
      // refused by the CRD's validation: nothing to check
    }
  }
  log(
    `workload: ${backfills.length - accepted} backfills over ${config.models} models on ${config.nodes} nodes; ` +
      `${accepted}/${HOSTILE_MODEL_REFS.length} hostile modelRefs accepted by the apiserver`,
  )
}

/** Per-model on/off bursts until stop(); every request acknowledged by JetStream lands in `log`. */
export function startTraffic(nc: NatsConnection, workload: Workload, config: ChaosConfig, random: Rng) {
  const js = jetstream(nc, { timeout: 3_000 })
  const requests: ForegroundRequest[] = []
  let failed = 0
  let stopped = false
  const wake = new Set<() => void>()
  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(t)
        wake.delete(done)
        resolve()
      }
      const t = setTimeout(done, ms)
      wake.add(done)
    })
  const models = [...workload.nodeOf.keys()]
  const loops = models.map(async (key) => {
    const [namespace, model] = key.split('/') as [string, string]
    await sleep(random.between(0, config.quietMaxMs))
    while (!stopped) {
      const burstEnd = Date.now() + random.between(config.burstMinMs, config.burstMaxMs)
      while (!stopped && Date.now() < burstEnd) {
        const background = random.next() < config.backgroundShare
        const sentAt = Date.now()
        try {
          const ack = await js.publish(
            FOREGROUND_SUBJECT,
            encode('ai.flexinfer.foreground.request', {
              namespace,
              model,
              ...(background ? { workloadClass: 'background' as const } : {}),
            }),
          )
          requests.push({ model: key, sentAt, ackAt: Date.now(), seq: ack.seq, background })
        } catch {
          failed++ // not accepted by NATS (e.g. while it restarts): it does not count as a request
        }
        await sleep(random.between(config.requestGapMinMs, config.requestGapMaxMs))
      }
      await sleep(random.between(config.quietMinMs, config.quietMaxMs))
    }
  })
  return {
    requests,
    failed: () => failed,
    async stop() {
      stopped = true
      for (const w of [...wake]) w()
      await Promise.all(loops)
    },
  }
}
