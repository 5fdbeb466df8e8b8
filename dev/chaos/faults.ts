// Faults that are not process signals: hostile events on the functions' subjects, foreign Jobs for forged cancels
// to aim at, and a ResourceQuota that refuses Job creation. (Kills, pauses and server restarts are in chaos.ts.)
import { BatchV1Api, CoreV1Api, type KubeConfig } from '@kubernetes/client-node'
import { jetstream } from '@nats-io/jetstream'
import type { NatsConnection } from '@nats-io/transport-node'
import { catalog } from '../../events/catalog.js'
import { backfillLabelValue, LABEL_BACKFILL } from '../../pkg/core/names.js'
import type { Rng } from './config.js'
import { FOREIGN_NAMESPACE, NAMESPACES, QUOTA_NAMESPACE } from './workload.js'

export const QUOTA_NAME = 'chaos-no-jobs'

/**
 * Jobs no ModelBackfill owns: plain ones in a namespace of their own, and some in a workload namespace carrying
 * our label (as if copied from an attempt) but no owner. Forged cancels name them; none may be deleted.
 */
export async function createForeignJobs(kc: KubeConfig): Promise<string[]> {
  const batch = kc.makeApiClient(BatchV1Api)
  const core = kc.makeApiClient(CoreV1Api)
  await core.createNamespace({ body: { metadata: { name: FOREIGN_NAMESPACE } } })
  const created: string[] = []
  const job = (namespace: string, name: string, labels?: Record<string, string>) =>
    batch
      .createNamespacedJob({
        namespace,
        body: {
          metadata: { name, labels },
          spec: {
            backoffLimit: 0,
            template: {
              spec: { restartPolicy: 'Never', containers: [{ name: 'work', image: 'busybox', command: ['true'] }] },
            },
          },
        },
      })
      .then(() => created.push(`${namespace}/${name}`))
  for (let i = 0; i < 4; i++) await job(FOREIGN_NAMESPACE, `foreign-${i}`)
  // Names an attempt of bf-0-0 could have, and its label value: only the owner reference tells them apart.
  for (let i = 0; i < 3; i++)
    await job(NAMESPACES[0], `bf-0-0-9${i}-unowned`, { [LABEL_BACKFILL]: backfillLabelValue('bf-0-0') })
  return created
}

export async function setQuota(kc: KubeConfig): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api)
  const hard = { 'count/jobs.batch': '0' }
  await core.createNamespacedResourceQuota({
    namespace: QUOTA_NAMESPACE,
    body: { metadata: { name: QUOTA_NAME }, spec: { hard } },
  })
  // No resource-quota controller runs here: write the status it would (used 0), so admission refuses with the
  // ordinary "exceeded quota" 403 rather than "status unknown".
  const current = await core.readNamespacedResourceQuota({ name: QUOTA_NAME, namespace: QUOTA_NAMESPACE })
  await core.replaceNamespacedResourceQuotaStatus({
    name: QUOTA_NAME,
    namespace: QUOTA_NAMESPACE,
    body: { ...current, status: { hard, used: { 'count/jobs.batch': '0' } } },
  })
}

export async function removeQuota(kc: KubeConfig): Promise<void> {
  await kc.makeApiClient(CoreV1Api).deleteNamespacedResourceQuota({ name: QUOTA_NAME, namespace: QUOTA_NAMESPACE })
}

const SUBJECTS = [
  catalog['ai.flexinfer.foreground.request'].subject,
  catalog['ai.flexinfer.backfill.cancel'].subject,
  catalog['ai.flexinfer.backfill.admit'].subject,
  catalog['ai.flexinfer.backfill.changed'].subject,
  catalog['ai.flexinfer.model.ready'].subject,
  catalog['ai.flexinfer.gaming.session'].subject,
  catalog['ai.flexinfer.gpu.lease'].subject,
  catalog['ai.flexinfer.job.completed'].subject,
  'flexinfer.events.k8s.modelbackfills',
  'flexinfer.events.k8s.jobs',
  'flexinfer.events.k8s.models',
  `flexinfer.events.timer.${NAMESPACES[0]}.bf-0-0`,
  'flexinfer.events.timer.chaos-foreign.foreign-0',
]

const CONTROL = '\r\n\u0000\u0007\u001b[31m\u007f\u2028'
const BAD_NAMES = ['gemma 4', 'Gemma', '../etc', `x${CONTROL}y`, 'a'.repeat(300), '*', '>', '', 'ünï', 'a.b>c']

/** One hostile message: [subject, payload, kind]. Never a valid foreground request for a workload model. */
export function hostileMessage(
  random: Rng,
  foreignJobs: string[],
  huge: boolean,
  poisonShare = 0,
): [string, string, string] {
  const subject = random.pick(SUBJECTS)
  const envelope = (type: string, data: unknown, extra: Record<string, unknown> = {}) =>
    JSON.stringify({
      specversion: '1.0',
      id: `hostile-${Math.floor(random.next() * 1e9)}`,
      source: 'chaos',
      type,
      time: new Date().toISOString(),
      datacontenttype: 'application/json',
      data,
      ...extra,
    })
  if (huge)
    return [
      subject,
      envelope('ai.flexinfer.foreground.request', { namespace: 'chaos-a', model: 'x'.repeat(1024 * 1024 - 4096) }),
      'huge body',
    ]
  if (random.next() < poisonShare)
    return [
      catalog['ai.flexinfer.backfill.cancel'].subject,
      envelope(`ai.flexinfer.backfill.cancel${CONTROL}`, { namespace: 'chaos-a', backfill: 'bf-0-0' }),
      'poison: unknown type with CR/LF on the cancel subject',
    ]
  const foreign = random.pick(foreignJobs).split('/') as [string, string]
  const kind = random.int(0, 11)
  switch (kind) {
    case 0: {
      const valid = envelope('ai.flexinfer.foreground.request', { namespace: 'chaos-a', model: 'model-0' })
      return [subject, valid.slice(0, random.int(1, valid.length - 1)), 'truncated JSON']
    }
    case 1:
      return [subject, Buffer.from(Array.from({ length: 64 }, () => random.int(0, 255))).toString('latin1'), 'binary']
    case 2:
      return [subject, envelope(`ai.flexinfer.unknown${CONTROL}Injected: header`, {}), 'unknown type with CR/LF']
    case 3:
      return [
        subject,
        envelope('ai.flexinfer.foreground.request', { namespace: `chaos-a${CONTROL}`, model: random.pick(BAD_NAMES) }),
        'control characters in names',
      ]
    case 4: {
      const depth = random.pick([100, 5_000, 50_000])
      return [
        subject,
        `{"specversion":"1.0","id":"deep","source":"chaos","type":"ai.flexinfer.foreground.request","data":${'['.repeat(depth)}${']'.repeat(depth)}}`,
        'deep nesting',
      ]
    }
    case 5:
      return [
        subject,
        envelope('ai.flexinfer.foreground.request', { namespace: 'chaos-a', model: random.pick(BAD_NAMES) }),
        'bad model name',
      ]
    case 6:
      return [
        catalog['ai.flexinfer.backfill.cancel'].subject,
        envelope('ai.flexinfer.backfill.cancel', {
          namespace: foreign[0],
          backfill: random.pick(['bf-0-0', 'foreign', foreign[1]]),
          jobName: foreign[1],
          reason: random.pick(['ForegroundDemand', `Forged${CONTROL}reason`]),
          at: new Date().toISOString(),
        }),
        'forged cancel of a foreign Job',
      ]
    case 7:
      return [
        catalog['ai.flexinfer.backfill.admit'].subject,
        envelope('ai.flexinfer.backfill.admit', { namespace: foreign[0], backfill: foreign[1] }),
        'forged admit naming a foreign Job',
      ]
    case 8:
      return [
        subject,
        envelope(random.pick(['dev.knative.apiserver.resource.delete', 'dev.knative.apiserver.resource.update']), {
          apiVersion: 'batch/v1',
          kind: 'Job',
          metadata: { name: foreign[1], namespace: foreign[0], labels: { 'ai.flexinfer/model-backfill': 'x' } },
          status: { conditions: [{ type: 'Complete', status: 'True' }] },
        }),
        'forged apiserver event',
      ]
    case 9:
      return [subject, random.pick(['null', '42', '"text"', '[]', '{}', '{"specversion":"1.0"}']), 'not an event']
    case 10:
      return [
        subject,
        envelope(`x${random.int(0, 1e6)}.unknown`, { namespace: 'chaos-a', model: 'model-0' }, { BadExt: 1 }),
        'unknown type, bad extension',
      ]
    default:
      return [
        `flexinfer.events.timer.${random.pick(['chaos-foreign', NAMESPACES[0]])}.${random.pick(['foreign-0', 'nope'])}`,
        envelope('ai.flexinfer.timer.fired', {
          namespace: foreign[0],
          backfill: foreign[1],
          due: random.pick(['yesterday', new Date().toISOString()]),
        }),
        'forged timer',
      ]
  }
}

/** Publishes `count` hostile messages over `forMs` (bounded by both); returns how many JetStream stored. */
export async function publishHostile(
  nc: NatsConnection,
  random: Rng,
  foreignJobs: string[],
  count: number,
  huge: number,
  forMs: number,
  poisonShare: number,
): Promise<{ stored: number; refused: number; kinds: Record<string, number> }> {
  const js = jetstream(nc, { timeout: 5_000 })
  const kinds: Record<string, number> = {}
  let stored = 0
  let refused = 0
  const started = Date.now()
  const batch = 25
  for (let sent = 0; sent < count; ) {
    const pending: Promise<void>[] = []
    for (let i = 0; i < batch && sent < count; i++, sent++) {
      const [subject, payload, kind] = hostileMessage(
        random,
        foreignJobs,
        sent % Math.ceil(count / huge) === 0,
        poisonShare,
      )
      kinds[kind] = (kinds[kind] ?? 0) + 1
      pending.push(
        js.publish(subject, payload).then(
          () => {
            stored++
          },
          () => {
            refused++
          },
        ),
      )
    }
    await Promise.all(pending)
    // Spread over the interval: never ahead of the schedule, never past the deadline.
    const due = started + (sent / count) * forMs
    if (Date.now() < due) await new Promise((r) => setTimeout(r, due - Date.now()))
    if (Date.now() > started + forMs * 2) break
  }
  return { stored, refused, kinds }
}
