// The event catalog: every CloudEvent type the system produces or consumes, its NATS subject and its data
// schema. The zod schemas here validate at runtime and generate events/schemas/*.json (`npm run gen:events`).
import { z } from 'zod'
import { DNS_SUBDOMAIN } from '../pkg/core/names.js'
import { RESYNC_REASONS } from '../pkg/core/resync.js'

/** Subjects are NATS tokens: names are DNS labels/subdomains, so they need no escaping except for '*' and '>'. */
const name = z
  .string()
  .min(1)
  .max(253)
  .regex(DNS_SUBDOMAIN, 'must be a Kubernetes object name (lower-case DNS subdomain)')
const namespace = z
  .string()
  .min(1)
  .max(63)
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'must be a Kubernetes namespace name (lower-case DNS label)')
const time = z.iso.datetime({ offset: true })

export const STREAM_EVENTS = 'FLEXINFER_EVENTS'
/** Foreground requests on the subject contract.md documents for them (the firehose): kept apart from the control events. */
export const STREAM_FOREGROUND = 'FLEXINFER_FOREGROUND'
/** Foreground requests on per-model subjects: the newest per model, read by admission without demand. */
export const STREAM_FOREGROUND_LAST = 'FLEXINFER_FOREGROUND_LAST'
export const STREAM_TIMERS = 'FLEXINFER_TIMERS'
export const STREAM_DEAD_LETTER = 'FLEXINFER_DEADLETTER'
export const BUCKET_MODEL_IDLE = 'flexinfer-model-idle'
export const BUCKET_BACKFILLS = 'flexinfer-backfills'
export const BUCKET_CLAIMS = 'flexinfer-claims'
export const SOURCE = 'flexinfer/model-backfill'

/** ApiServerSource (Resource mode) event types: the functions accept exactly these from Kubernetes. */
export const APISERVER_TYPES = [
  'dev.knative.apiserver.resource.add',
  'dev.knative.apiserver.resource.update',
  'dev.knative.apiserver.resource.delete',
] as const

export const catalog = {
  'ai.flexinfer.foreground.request': {
    subject: 'flexinfer.events.foreground.request',
    /** Also `<subject>.<namespace>.<model>` (foreground only): see foregroundSubject. */
    producer: 'gateway (clients/: TypeScript, Python, Go, LiteLLM; the ingress, or any NATS client)',
    consumers: ['demand'],
    description: 'A foreground request reached a model. Resets its idle window and preempts any backfill on it.',
    data: z.object({
      namespace,
      model: name,
      workloadClass: z.enum(['foreground', 'background']).optional(),
    }),
  },
  'ai.flexinfer.backfill.cancel': {
    subject: 'flexinfer.events.backfill.cancel',
    producer: 'demand, lifecycle, admit',
    consumers: ['cancel'],
    description: 'Delete the named attempt Job now; the cancel function owns Job deletion.',
    data: z.object({
      namespace,
      backfill: name,
      jobName: name,
      reason: z.string().min(1),
      /** Time of the signal that won (for foreground: the request time). */
      at: time,
    }),
  },
  'ai.flexinfer.backfill.admit': {
    subject: 'flexinfer.events.backfill.admit',
    producer: 'lifecycle, cancel',
    consumers: ['admit'],
    description: 'Run the admission gates for a backfill now (a state change may have opened them).',
    data: z.object({ namespace, backfill: name }),
  },
  'ai.flexinfer.timer.fired': {
    subject: 'flexinfer.events.timer',
    subjectIsPrefix: true,
    producer: 'JetStream message schedule (armed by any function)',
    consumers: ['admit'],
    description:
      'A per-backfill timer came due (idle window end, repeat cooldown, re-check). Stale timers are harmless.',
    data: z.object({ namespace, backfill: name, due: time }),
  },
  'ai.flexinfer.backfill.changed': {
    subject: 'flexinfer.events.backfill.changed',
    producer: 'source (from ApiServerSource events)',
    consumers: ['lifecycle'],
    description: 'A ModelBackfill was added, updated (spec, suspend, finalizers) or deleted.',
    data: z.object({
      namespace,
      backfill: name,
      generation: z.number().int().optional(),
      /** metadata.deletionTimestamp is set (the finalizer holds the object). */
      deleting: z.boolean().optional(),
      deleted: z.boolean(),
    }),
  },
  'ai.flexinfer.model.ready': {
    subject: 'flexinfer.events.model.ready',
    producer: 'source (from ApiServerSource events)',
    consumers: ['lifecycle'],
    description: 'A Model changed: readiness, node, GPU group or lastActiveTime (a foreground signal).',
    data: z.object({
      namespace,
      model: name,
      ready: z.boolean(),
      node: z.string().optional(),
      lastActiveTime: z.string().optional(),
      deleted: z.boolean(),
    }),
  },
  'ai.flexinfer.gaming.session': {
    subject: 'flexinfer.events.gaming.session',
    producer: 'source (from ApiServerSource events)',
    consumers: ['lifecycle'],
    description: 'A GamingSession appeared, changed or went away.',
    data: z.object({ namespace, name, nodeName: z.string().optional(), deleted: z.boolean() }),
  },
  'ai.flexinfer.gpu.lease': {
    subject: 'flexinfer.events.gpu.lease',
    producer: 'source (from ApiServerSource events)',
    consumers: ['lifecycle'],
    description: 'A GPULease appeared, changed or went away.',
    data: z.object({
      namespace,
      name,
      node: z.string().optional(),
      group: z.string().optional(),
      deleted: z.boolean(),
    }),
  },
  'ai.flexinfer.job.completed': {
    subject: 'flexinfer.events.job.completed',
    producer: 'source (from ApiServerSource events)',
    consumers: ['lifecycle'],
    description: 'A backfill Job started, finished (Complete or Failed) or was deleted.',
    data: z.object({
      namespace,
      job: name,
      backfill: name.optional(),
      outcome: z.enum(['Complete', 'Failed', 'Started', 'Deleted']),
    }),
  },
  'ai.flexinfer.resync.due': {
    subject: 'flexinfer.events.resync.due',
    /** Fired by a message schedule, so it lives in FLEXINFER_TIMERS with the schedule (not FLEXINFER_EVENTS). */
    stream: STREAM_TIMERS,
    producer: 'JetStream message schedule (repeating, every RESYNC_MS; armed by lifecycle and the provision step)',
    consumers: ['lifecycle'],
    description:
      'Time for a resync sweep: re-decide every backfill whose stored state cannot be right, so convergence never depends on one event being delivered.',
    data: z.object({ intervalMs: z.number().int().positive() }),
  },
  'ai.flexinfer.backfill.resync': {
    subject: 'flexinfer.events.backfill.resync',
    producer: 'lifecycle (resync sweep, or a backfill whose reconcile failed in a cluster-wide re-decide)',
    consumers: ['lifecycle'],
    description: 'Re-decide this backfill now, whatever its state says (the reason says what looked wrong).',
    data: z.object({ namespace, backfill: name, reason: z.enum([...RESYNC_REASONS, 'ReconcileFailed']) }),
  },
} as const

export type EventType = keyof typeof catalog
export type EventData<T extends EventType> = z.infer<(typeof catalog)[T]['data']>
export const EVENT_TYPES = Object.keys(catalog) as EventType[]

export const isCatalogType = (type: string): type is EventType => type in catalog

/**
 * The per-model subject of a foreground request: `flexinfer.events.foreground.request.<namespace>.<model>`. The
 * stream keeps the newest message per subject, so admission reads a model's last request (with the server's store
 * time) in one lookup, whether or not demand has processed it. Foreground requests only: a background-class
 * request there would count as foreground. The namespace is one token (a DNS label); the model may hold dots.
 */
export const foregroundSubject = (namespace: string, model: string) =>
  `${catalog['ai.flexinfer.foreground.request'].subject}.${namespace}.${model}`

/**
 * Core NATS (no stream, nothing stored): demand publishes here when a foreground request breaks the window of the
 * attempt holding the model, beside its cancel request, so the attempt's background gate closes without waiting for
 * the Job's deletion. Not a CloudEvent: the subject is the message; the body ({ at, job }) is for logs only.
 * One namespace per gate identity: deploy/nats/auth.conf lets a namespace's gate subscribe to `flexinfer.preempt.<ns>.>`.
 */
export const PREEMPT_PREFIX = 'flexinfer.preempt'
export const preemptSubject = (namespace: string, model: string) => `${PREEMPT_PREFIX}.${namespace}.${model}`

/** Subject an event of this type is published on; timers get one subject per backfill. */
export function subjectFor<T extends EventType>(type: T, data: EventData<T>): string {
  const entry = catalog[type]
  if (type === 'ai.flexinfer.foreground.request') {
    const d = data as EventData<'ai.flexinfer.foreground.request'>
    // Background requests stay on the foreground subject: they must never look like a model's last request.
    return d.workloadClass === 'background' ? entry.subject : foregroundSubject(d.namespace, d.model)
  }
  if ('subjectIsPrefix' in entry) {
    const d = data as EventData<'ai.flexinfer.timer.fired'>
    return `${entry.subject}.${d.namespace}.${d.backfill}`
  }
  return entry.subject
}

/** Where a backfill's single timer schedule lives (one schedule per subject; re-publishing replaces it). */
export const scheduleSubject = (namespace: string, backfill: string) => `flexinfer.schedules.${namespace}.${backfill}`
/** The repeating resync schedule: one token after the prefix, so it never matches a backfill's `<namespace>.<name>`. */
export const RESYNC_SCHEDULE_SUBJECT = 'flexinfer.schedules.resync'
/** Every backfill timer schedule (and not the resync schedule): the sweep's filter for the stored ones. */
export const BACKFILL_SCHEDULES_FILTER = 'flexinfer.schedules.*.*'

/** Subjects for raw ApiServerSource events the local watcher publishes (the `source` function consumes them). */
export const apiserverSubject = (resource: string) => `flexinfer.events.k8s.${resource}`

export const deadLetterSubject = (fn: string) => `flexinfer.deadletter.${fn}`
