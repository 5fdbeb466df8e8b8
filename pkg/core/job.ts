// Copies an attempt's Job out of the CronJob template, exactly as contract.md pins it.
import type { V1Container, V1CronJob, V1EnvVar, V1Job, V1PodSpec } from '@kubernetes/client-node'
import { API_VERSION, type ModelBackfill } from './api.js'
import { type GateDeployment, gateSettings, injectGate, planGate } from './gate.js'
import {
  ANNOTATION_BACKFILL,
  ANNOTATION_MODEL,
  ANNOTATION_NODE,
  attemptLabelValue,
  backfillLabelValue,
  LABEL_ATTEMPT,
  LABEL_BACKFILL,
  WORKLOAD_CLASS_ENV,
} from './names.js'
import { ATTEMPT_ENV, RUN_ID_ENV } from './run.js'

export interface GpuViolation {
  container: string
  resource: string
  quantity: string
}

// Resource names are matched case-insensitively: extended resource names are case-sensitive to Kubernetes, so
// `nvidia.com/MIG-2g.10gb` is a real (if unusual) name that must not slip past the guard.
const isGpuResource = (name: string) => {
  const lower = name.toLowerCase()
  return lower.includes('gpu') || lower.startsWith('nvidia.com/mig-')
}
// Kubernetes quantities: "0", "0.0", "0m", "0Gi" are zero; anything with a non-zero digit is not.
const isNonZero = (quantity: unknown) => /[1-9]/.test(String(quantity).replace(/[a-zA-Z]+$/, ''))

type Resources = { requests?: Record<string, unknown>; limits?: Record<string, unknown> } | undefined

function resourceViolations(container: string, resources: Resources, found: GpuViolation[]) {
  for (const [kind, list] of Object.entries({ requests: resources?.requests, limits: resources?.limits })) {
    for (const [resource, quantity] of Object.entries(list ?? {})) {
      if (isGpuResource(resource) && isNonZero(quantity)) {
        found.push({ container, resource: `${kind}.${resource}`, quantity: String(quantity) })
      }
    }
  }
}

/**
 * The GPU guard: backfill shares a warm model and must never ask the scheduler for a GPU of its own. Beyond the
 * reference, pod-level `resources` and DRA `resourceClaims` are guarded too (container '' means the pod itself):
 * both reserve accelerators. Any claim counts, since what a claim allocates is decided by its DeviceClass, which
 * the template cannot show; a CPU-only backfill has no reason to claim a device.
 */
export function gpuViolations(template: V1CronJob): GpuViolation[] {
  const found: GpuViolation[] = []
  const pod = template.spec?.jobTemplate?.spec?.template?.spec
  for (const container of [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])]) {
    resourceViolations(container.name, container.resources, found)
  }
  resourceViolations('', pod?.resources, found)
  for (const claim of pod?.resourceClaims ?? []) {
    const source = claim.resourceClaimName
      ? `resourceClaim ${claim.resourceClaimName}`
      : `resourceClaimTemplate ${claim.resourceClaimTemplateName ?? '(none)'}`
    found.push({ container: '', resource: `resourceClaims.${claim.name}`, quantity: source })
  }
  return found
}

/**
 * Sets every entry of `name` (Kubernetes uses the last of a duplicated name, so forcing only the first would let
 * a later one win), in place; appends one when there is none. A valueFrom is dropped for the literal value.
 */
function setEnv(env: V1EnvVar[], name: string, value: string): V1EnvVar[] {
  if (!env.some((e) => e.name === name)) return [...env, { name, value }]
  return env.map((e) => (e.name === name ? { name, value } : e))
}

function withEnv(container: V1Container, overrides: Record<string, string> | undefined): V1Container {
  let env = setEnv(container.env ?? [], WORKLOAD_CLASS_ENV, 'background')
  // spec.env cannot name the reserved variable (CEL and checkSpec refuse it), so the forced value stands.
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
  /** The installation's gate settings; a backfill that opts in cannot get a Job without them. */
  gate?: GateDeployment
  /** When this attempt was admitted (its state's startedAt): makes the attempt label this admission's own. */
  admittedAt?: string
  /** The attempt's run (its state's runId, runAttempt): set in every container, the gate's too. */
  run?: { id: string; attempt: number }
}

/** The run's identity and the attempt's number in every container and init container, replacing any the template has. */
function withRun(pod: V1PodSpec, run: { id: string; attempt: number }): V1PodSpec {
  const set = (c: V1Container): V1Container => ({
    ...c,
    env: setEnv(setEnv(c.env ?? [], RUN_ID_ENV, run.id), ATTEMPT_ENV, String(run.attempt)),
  })
  return { ...pod, initContainers: pod.initContainers?.map(set), containers: (pod.containers ?? []).map(set) }
}

/** The pod spec as the template and spec.env give it, before any gate. */
function workloadPod(backfill: ModelBackfill, podSpec: V1PodSpec): V1PodSpec {
  return {
    ...podSpec,
    initContainers: podSpec.initContainers?.map((c) => withEnv(c, undefined)),
    containers: (podSpec.containers ?? []).map((c) => withEnv(c, backfill.spec.env)),
  }
}

/**
 * Why this backfill's Job cannot carry the gate it asks for (undefined: it asks for none, or the gate fits). Checked
 * at admission beside the GPU guard, so a bad annotation or template blocks with this message instead of failing
 * the Job build.
 */
export function gateProblem(backfill: ModelBackfill, template: V1CronJob, gate?: GateDeployment): string | undefined {
  const { settings, problem } = gateSettings(backfill)
  if (problem) return problem
  if (!settings) return undefined
  if (!gate) return 'the gate is not enabled in this installation (admit has no GATE_IMAGE and GATE_NATS_URL)'
  const pod = template.spec?.jobTemplate?.spec?.template?.spec ?? { containers: [] }
  return planGate(workloadPod(backfill, pod), settings).problem
}

/**
 * The attempt's Job: the template's jobTemplate, owned by the ModelBackfill (controller reference, so the garbage
 * collector removes it with its owner), labelled for the contender gate, bounded by maxRunDuration, and forced to
 * the background workload class in every container and init container. spec.env applies to regular containers. The
 * run's identity and the attempt's number (FLEXINFER_RUN_ID, FLEXINFER_ATTEMPT) go in every container.
 */
export function buildJob({
  backfill,
  template,
  name,
  node,
  maxRunDurationMs,
  gate,
  admittedAt,
  run,
}: JobParams): V1Job {
  const jobTemplate = structuredClone(template.spec?.jobTemplate ?? { spec: { template: {} } })
  const spec = jobTemplate.spec ?? { template: {} }
  const podSpec = spec.template.spec ?? { containers: [] }
  const meta = backfill.metadata
  let pod = workloadPod(backfill, podSpec)
  // Admission blocks on gateProblem first; this is the last line: an opted-in Job never runs without its gate.
  const { settings, problem: badSetting } = gateSettings(backfill)
  if (settings || badSetting) {
    const problem = gateProblem(backfill, template, gate)
    const plan = settings && planGate(pod, settings).plan
    if (problem || !plan || !gate)
      throw new Error(`backfill ${meta.name} asks for a gate that cannot be built: ${problem}`)
    pod = injectGate(pod, plan, { namespace: meta.namespace ?? '', model: backfill.spec.modelRef, job: name }, gate)
  }
  // spec.env cannot name these either (CEL and checkSpec refuse them), so the controller's values stand.
  if (run) pod = withRun(pod, run)
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name,
      namespace: meta.namespace,
      labels: {
        ...(jobTemplate.metadata?.labels ?? {}),
        [LABEL_BACKFILL]: backfillLabelValue(meta.name),
        [LABEL_ATTEMPT]: attemptLabelValue(meta.uid ?? '', name, admittedAt ?? ''),
      },
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
        // The pods carry the backfill's label (lifecycle's pod watch selects on it) and its name: their
        // termination messages are read after a preempted attempt's Job is gone (pkg/core/pod-report.ts).
        metadata: {
          ...spec.template.metadata,
          labels: { ...(spec.template.metadata?.labels ?? {}), [LABEL_BACKFILL]: backfillLabelValue(meta.name) },
          annotations: { ...(spec.template.metadata?.annotations ?? {}), [ANNOTATION_BACKFILL]: meta.name },
        },
        spec: pod,
      },
    },
  }
}
