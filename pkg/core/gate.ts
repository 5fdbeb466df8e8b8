// The background gate, as the Job carries it: which ModelBackfills opt in (annotations: the API stays the
// reference's), what the sidecar is told, and the pod spec with the sidecar injected. Pure: admit's observation
// (gateProblem) and the Job build (injectGate) share every rule here, so what blocks and what is built cannot drift.
import type { V1Container, V1EnvVar, V1PodSpec, V1Volume } from '@kubernetes/client-node'
import type { ModelBackfill } from './api.js'
import { WORKLOAD_CLASS_ENV } from './names.js'

/** Opt-in: names the template's environment variable holding the engine's URL (e.g. OPENAI_BASE_URL). */
export const ANNOTATION_GATE_ENDPOINT_ENV = 'ai.flexinfer/gate-endpoint-env'
/** How requests are marked background for the engine: vllm (default) | sglang | llamacpp | none (the header only). */
export const ANNOTATION_GATE_ENGINE = 'ai.flexinfer/gate-engine'
/** Background requests in flight through the gate at once (default DEFAULT_GATE_MAX_IN_FLIGHT). */
export const ANNOTATION_GATE_MAX_IN_FLIGHT = 'ai.flexinfer/gate-max-in-flight'

export const GATE_ENGINES = ['vllm', 'sglang', 'llamacpp', 'none'] as const
export type GateEngine = (typeof GATE_ENGINES)[number]

/**
 * The `priority` each engine is given for a background request, in its own direction. vLLM with
 * `--scheduling-policy priority` serves lower values first (the default is 0), so background is above it. SGLang with
 * `--enable-priority-scheduling` serves higher values first unless `--schedule-low-priority-values-first`, so
 * background is below its default; with that flag set, `vllm` is the right profile. llama.cpp's server has no request
 * priority (the field is dropped); its profile streams every completion so a disconnect ends it (cmd/gate/collect.ts).
 * `none`: no body field (TGI, gateways), only the header.
 */
export const ENGINE_PRIORITY: Record<GateEngine, number | undefined> = {
  vllm: 10,
  sglang: -10,
  llamacpp: undefined,
  none: undefined,
}

/**
 * The cap on background requests in flight, the gate's main lever on foreground tail latency: a batch that holds few
 * background sequences leaves the engine's slots and step time to foreground.
 */
export const DEFAULT_GATE_MAX_IN_FLIGHT = 2
export const MAX_GATE_MAX_IN_FLIGHT = 64

export const GATE_CONTAINER = 'flexinfer-gate'
/** The gate listens on the pod's loopback only: nothing outside the pod can reach it. */
export const GATE_PORT = 18077
/**
 * The gate's health and metrics, on the pod's own address: the kubelet probes from the node's network namespace, where
 * 127.0.0.1 is the node's loopback, not the pod's. This listener answers the probes and /metrics and proxies nothing.
 */
export const GATE_HEALTH_PORT = 18078
/** The gate's own endpoints (healthz, readyz, state, metrics); everything else is proxied. */
export const GATE_PATH = '/flexinfer-gate/'
/**
 * On every answer the gate gives itself (a refusal): its state then. A workload reads `closed` as its attempt's end —
 * the model's foreground has it — not as a failure of the item it was doing.
 */
export const GATE_STATE_HEADER = 'x-flexinfer-gate-state'
/** The gate's NATS credential in the backfill's namespace (an NKey seed under key `seed`): nats/README.md. */
export const GATE_SECRET = 'model-backfill-gate'
export const GATE_SECRET_KEY = 'seed'
const GATE_VOLUME = 'flexinfer-gate-nats'
const GATE_SEED_DIR = '/var/run/flexinfer-gate'

/** What admit's installation gives every gate it injects (admit's GATE_IMAGE, GATE_NATS_URL). */
export interface GateDeployment {
  image: string
  /** NATS as the gate reaches it from the user's namespace; the user part names its inbox prefix only. */
  natsUrl: string
}

export interface GateSettings {
  endpointEnv: string
  engine: GateEngine
  maxInFlight: number
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/

/** The gate a ModelBackfill asks for: undefined without the opt-in annotation; a problem for a bad value. */
export function gateSettings(backfill: ModelBackfill): { settings?: GateSettings; problem?: string } {
  const a = backfill.metadata.annotations ?? {}
  const endpointEnv = a[ANNOTATION_GATE_ENDPOINT_ENV]
  if (endpointEnv === undefined) return {}
  if (!ENV_NAME.test(endpointEnv))
    return { problem: `${ANNOTATION_GATE_ENDPOINT_ENV}="${endpointEnv}" is not an environment variable name` }
  const engine = a[ANNOTATION_GATE_ENGINE] ?? 'vllm'
  if (!(GATE_ENGINES as readonly string[]).includes(engine))
    return { problem: `${ANNOTATION_GATE_ENGINE}="${engine}": expected one of ${GATE_ENGINES.join(', ')}` }
  const rawCap = a[ANNOTATION_GATE_MAX_IN_FLIGHT]
  const maxInFlight = rawCap === undefined ? DEFAULT_GATE_MAX_IN_FLIGHT : Number(rawCap)
  if (!Number.isInteger(maxInFlight) || maxInFlight < 1 || maxInFlight > MAX_GATE_MAX_IN_FLIGHT)
    return {
      problem: `${ANNOTATION_GATE_MAX_IN_FLIGHT}="${rawCap}": expected a whole number from 1 to ${MAX_GATE_MAX_IN_FLIGHT}`,
    }
  return { settings: { endpointEnv, engine: engine as GateEngine, maxInFlight } }
}

/** The gate's plan for a pod: the upstream it proxies to and the loopback URL the workload is given instead. */
export interface GatePlan extends GateSettings {
  upstream: string
  replacement: string
}

/**
 * Where the workload's endpoint variable points, from the pod's regular containers as the Job will run them
 * (spec.env applied). Every container that sets it must set the same literal URL: a valueFrom hides the value from
 * the gate, and two upstreams cannot share one gate.
 */
export function planGate(pod: V1PodSpec, settings: GateSettings): { plan?: GatePlan; problem?: string } {
  const name = settings.endpointEnv
  const values = new Set<string>()
  if ([...(pod.initContainers ?? []), ...pod.containers].some((c) => c.name === GATE_CONTAINER))
    return { problem: `container name ${GATE_CONTAINER} is reserved for the gate` }
  if (pod.volumes?.some((v) => v.name === GATE_VOLUME))
    return { problem: `volume name ${GATE_VOLUME} is reserved for the gate` }
  // The pod's containers share one network namespace: a workload port there would take the gate's.
  for (const c of [...(pod.initContainers ?? []), ...pod.containers])
    for (const p of c.ports ?? [])
      if (p.containerPort === GATE_PORT || p.containerPort === GATE_HEALTH_PORT)
        return { problem: `container ${c.name} declares port ${p.containerPort}, which the gate uses` }
  for (const c of pod.containers) {
    for (const e of c.env ?? []) {
      if (e.name !== name) continue
      if (e.value === undefined)
        return { problem: `container ${c.name} sets ${name} by valueFrom; the gate needs it literal` }
      values.add(e.value)
    }
  }
  if (values.size === 0) return { problem: `no container sets ${name}, the endpoint the gate was asked to take over` }
  if (values.size > 1) return { problem: `containers set ${name} to different URLs; one gate serves one upstream` }
  const raw = [...values][0] as string
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return { problem: `${name}="${raw}" is not a URL` }
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    return { problem: `${name}="${raw}": the gate proxies http and https only` }
  if (url.username || url.password)
    return { problem: `${name} carries credentials in its URL; the gate will not copy them` }
  // The path (e.g. /v1) stays the workload's: requests arrive with it and go upstream unchanged.
  const replacement = `http://127.0.0.1:${GATE_PORT}${url.pathname === '/' ? '' : url.pathname}${url.search}`
  return { plan: { ...settings, upstream: url.origin, replacement } }
}

/** Everything the sidecar reads at start (cmd/gate/config.ts parses the same names). */
export const GATE_ENV = {
  upstream: 'GATE_UPSTREAM',
  namespace: 'GATE_NAMESPACE',
  model: 'GATE_MODEL',
  job: 'GATE_JOB',
  engine: 'GATE_ENGINE',
  maxInFlight: 'GATE_MAX_IN_FLIGHT',
  port: 'GATE_PORT',
  healthPort: 'GATE_HEALTH_PORT',
  healthHost: 'GATE_HEALTH_HOST',
} as const

export interface GateTarget {
  namespace: string
  model: string
  job: string
}

const setValue = (env: V1EnvVar[], name: string, value: string) =>
  env.map((e) => (e.name === name ? { name, value } : e))

/**
 * The pod with the gate: a native sidecar (an init container with restartPolicy Always, first, so it is up — its
 * startup probe answered — before any other container starts and stays up until they end), the workload's endpoint
 * variable pointed at it, and the NATS seed mounted into the gate alone. The workload's containers are otherwise
 * unchanged.
 */
export function injectGate(pod: V1PodSpec, plan: GatePlan, target: GateTarget, deployment: GateDeployment): V1PodSpec {
  const env: Record<string, string> = {
    FUNCTION: 'gate',
    NATS_URL: deployment.natsUrl,
    NATS_NKEY_SEED_FILE: `${GATE_SEED_DIR}/${GATE_SECRET_KEY}`,
    [GATE_ENV.upstream]: plan.upstream,
    [GATE_ENV.namespace]: target.namespace,
    [GATE_ENV.model]: target.model,
    [GATE_ENV.job]: target.job,
    [GATE_ENV.engine]: plan.engine,
    [GATE_ENV.maxInFlight]: String(plan.maxInFlight),
    [GATE_ENV.port]: String(GATE_PORT),
    [GATE_ENV.healthPort]: String(GATE_HEALTH_PORT),
    [WORKLOAD_CLASS_ENV]: 'background',
  }
  // No host: the kubelet connects to the pod's IP, where the health listener is (GATE_HEALTH_PORT's comment).
  const probe = (path: string) => ({ httpGet: { path, port: GATE_HEALTH_PORT }, periodSeconds: 1 })
  const sidecar: V1Container = {
    name: GATE_CONTAINER,
    image: deployment.image,
    restartPolicy: 'Always',
    env: [
      ...Object.entries(env).map(([name, value]) => ({ name, value })),
      { name: GATE_ENV.healthHost, valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
    ],
    ports: [{ name: 'gate-health', containerPort: GATE_HEALTH_PORT, protocol: 'TCP' }],
    resources: { requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '256Mi' } },
    startupProbe: { ...probe('/flexinfer-gate/healthz'), failureThreshold: 30 },
    // Ready while it admits background requests: `kubectl mbf explain` shows a closed gate as not ready.
    readinessProbe: probe('/flexinfer-gate/readyz'),
    volumeMounts: [{ name: GATE_VOLUME, mountPath: GATE_SEED_DIR, readOnly: true }],
    securityContext: {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
      capabilities: { drop: ['ALL'] },
    },
  }
  const volume: V1Volume = {
    name: GATE_VOLUME,
    // 0444: the files belong to root and the gate runs as the image's non-root user (no fsGroup is set on the
    // workload's pod); the volume is mounted into the gate's container alone.
    secret: { secretName: GATE_SECRET, items: [{ key: GATE_SECRET_KEY, path: GATE_SECRET_KEY }], defaultMode: 0o444 },
  }
  return {
    ...pod,
    initContainers: [sidecar, ...(pod.initContainers ?? [])],
    containers: pod.containers.map((c) =>
      c.env?.some((e) => e.name === plan.endpointEnv)
        ? { ...c, env: setValue(c.env, plan.endpointEnv, plan.replacement) }
        : c,
    ),
    volumes: [...(pod.volumes ?? []), volume],
  }
}
