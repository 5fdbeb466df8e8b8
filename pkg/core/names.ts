// Deterministic names and keys: every replica, every retry and every replay derives the same ones,
// which is what makes Job creation and KV writes idempotent.
import { createHash } from 'node:crypto'

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')

// Every reconcile derives its backfill's label value, and observe() every listed Job's: the same few names hashed
// again and again. Remembered, bounded (the oldest forgotten first).
const NAME_HASH_MEMO_MAX = 1024
const nameHashes = new Map<string, string>()
const nameHash = (name: string) => {
  let h = nameHashes.get(name)
  if (h === undefined) {
    h = sha256(name)
    if (nameHashes.size >= NAME_HASH_MEMO_MAX) nameHashes.delete(nameHashes.keys().next().value as string)
    nameHashes.set(name, h)
  }
  return h
}

/**
 * `<backfill>-<attempt>-<first 8 hex of sha256(backfill)>`, DNS-safe, at most 63 characters. A long name is trimmed
 * in its backfill part only: the attempt and the hash are what keep every attempt's (and every backfill's) name
 * distinct, so they always survive.
 */
export function jobName(backfill: string, attempt: number): string {
  const suffix = `-${attempt}-${nameHash(backfill).slice(0, 8)}`
  const prefix = backfill
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .replace(/^-+/, '')
    .slice(0, 63 - suffix.length)
    .replace(/-+$/, '')
  return `${prefix}${suffix}`
}

/** Value of the `ai.flexinfer/model-backfill` label: first 16 hex of sha256(backfill name). */
export const backfillLabelValue = (backfill: string) => nameHash(backfill).slice(0, 16)

export const LABEL_BACKFILL = 'ai.flexinfer/model-backfill'

/**
 * One admission's Job, told from a same-named Job of another admission (a later try on a fresh window reuses the
 * attempt number, a re-created declaration its name): cancel deletes many attempts' Jobs with one set-based selector
 * on it, which — unlike a DELETE by name — takes no UID precondition. 16 hex of sha256(owner UID, Job name,
 * admission time).
 */
export const LABEL_ATTEMPT = 'ai.flexinfer/attempt'
export const attemptLabelValue = (ownerUid: string, jobName: string, admittedAt: string) =>
  sha256(`${ownerUid}\n${jobName}\n${admittedAt}`).slice(0, 16)
export const ANNOTATION_MODEL = 'ai.flexinfer/backfill-model'
export const ANNOTATION_NODE = 'ai.flexinfer/backfill-node'
/**
 * On an attempt's pods (its pod template): the ModelBackfill's name, which the hashed label cannot give back. The
 * pods outlive a preempted attempt's Job by their grace period, and lifecycle reads their termination messages
 * (pkg/core/pod-report.ts) when no Job is left to name the owner.
 */
export const ANNOTATION_BACKFILL = 'ai.flexinfer/backfill'
export const WORKLOAD_CLASS_ENV = 'FLEXINFER_WORKLOAD_CLASS'

/**
 * A name a namespaced Kubernetes object (a Model, a CronJob) can have: a DNS-1123 subdomain. Refs are checked
 * against it before anything is read with them: "gemma 4" is no valid KV key (the read throws), and ".." in an API
 * path would read something else than the object named.
 */
export const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/
export const isObjectName = (name: unknown): name is string =>
  typeof name === 'string' && name.length <= 253 && DNS_SUBDOMAIN.test(name)

/** NATS KV keys allow [-/_=.a-zA-Z0-9]; Kubernetes names are DNS labels/subdomains, so they fit as they are. */
export const modelKey = (namespace: string, model: string) => `${namespace}.${model}`
export const backfillKey = (namespace: string, backfill: string) => `${namespace}.${backfill}`

/** The claims bucket's keys (`flexinfer-claims`): one claim per model and one per node (pkg/core/state.ts Claim). */
export const modelClaimKey = (namespace: string, model: string) => `model.${modelKey(namespace, model)}`
export const nodeClaimKey = (node: string) => `node.${node}`
export const claimKeys = (namespace: string, model: string, node: string) => ({
  model: modelClaimKey(namespace, model),
  node: nodeClaimKey(node),
})
