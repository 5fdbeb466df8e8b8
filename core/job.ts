// Copies an attempt's Job out of the CronJob template, exactly as contract.md pins it.
import type { V1Container, V1CronJob, V1EnvVar, V1Job } from '@kubernetes/client-node'
import { API_VERSION, type ModelBackfill } from './api.js'
import { ANNOTATION_MODEL, ANNOTATION_NODE, backfillLabelValue, LABEL_BACKFILL, WORKLOAD_CLASS_ENV } from './names.js'

export interface GpuViolation {
  container: string
  resource: string
  quantity: string
}

const isGpuResource = (name: string) => name.toLowerCase().includes('gpu') || name.startsWith('nvidia.com/mig-')
// Kubernetes quantities: "0", "0.0", "0m", "0Gi" are zero; anything with a non-zero digit is not.
const isNonZero = (quantity: unknown) => /[1-9]/.test(String(quantity).replace(/[a-zA-Z]+$/, ''))

const allContainers = (template: V1CronJob): V1Container[] => {
  const pod = template.spec?.jobTemplate?.spec?.template?.spec
  return [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])]
}

/** The GPU guard: backfill shares a warm model and must never ask the scheduler for a GPU of its own. */
export function gpuViolations(template: V1CronJob): GpuViolation[] {
  const found: GpuViolation[] = []
  for (const container of allContainers(template)) {
    for (const [kind, list] of Object.entries({
      requests: container.resources?.requests,
      limits: container.resources?.limits,
    })) {
      for (const [resource, quantity] of Object.entries(list ?? {})) {
        if (isGpuResource(resource) && isNonZero(quantity)) {
          found.push({ container: container.name, resource: `${kind}.${resource}`, quantity: String(quantity) })
        }
      }
    }
  }
  return found
}

function setEnv(env: V1EnvVar[], name: string, value: string): V1EnvVar[] {
  const index = env.findIndex((e) => e.name === name)
  const entry: V1EnvVar = { name, value }
  if (index < 0) return [...env, entry]
  return env.map((e, i) => (i === index ? entry : e))
}

function withEnv(container: V1Container, overrides: Record<string, string> | undefined): V1Container {
  let env = setEnv(container.env ?? [], WORKLOAD_CLASS_ENV, 'background')
  if (overrides) {
    const absent: string[] = []
    for (const name of Object.keys(overrides)) {
      if (env.some((e) => e.name === name)) env = setEnv(env, name, overrides[name] as string)
      else absent.push(name)
    }
    env = [...env, ...absent.sort().map((name) => ({ name, value: overrides[name] as string }))]
  }
  return { ...container, env }
}

export interface JobParams {
  backfill: ModelBackfill
  template: V1CronJob
  name: string
  node: string
  maxRunDurationMs: number
}

/**
 * The attempt's Job: the template's jobTemplate, owned by the ModelBackfill (controller reference, so the garbage
 * collector removes it with its owner), labelled for the contender gate, bounded by maxRunDuration, and forced to
 * the background workload class in every container and init container. spec.env applies to regular containers.
 */
export function buildJob({ backfill, template, name, node, maxRunDurationMs }: JobParams): V1Job {
  const jobTemplate = structuredClone(template.spec?.jobTemplate ?? { spec: { template: {} } })
  const spec = jobTemplate.spec ?? { template: {} }
  const podSpec = spec.template.spec ?? { containers: [] }
  const meta = backfill.metadata
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name,
      namespace: meta.namespace,
      labels: { ...(jobTemplate.metadata?.labels ?? {}), [LABEL_BACKFILL]: backfillLabelValue(meta.name) },
      annotations: {
        ...(jobTemplate.metadata?.annotations ?? {}),
        [ANNOTATION_MODEL]: backfill.spec.modelRef,
        [ANNOTATION_NODE]: node,
      },
      ownerReferences: [
        {
          apiVersion: API_VERSION,
          kind: 'ModelBackfill',
          name: meta.name,
          uid: meta.uid ?? '',
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: {
      ...spec,
      activeDeadlineSeconds: Math.max(1, Math.floor(maxRunDurationMs / 1000)),
      template: {
        ...spec.template,
        spec: {
          ...podSpec,
          initContainers: podSpec.initContainers?.map((c) => withEnv(c, undefined)),
          containers: (podSpec.containers ?? []).map((c) => withEnv(c, backfill.spec.env)),
        },
      },
    },
  }
}
