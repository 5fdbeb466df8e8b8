// Knative Eventing's real components (knative.dev/eventing, built by dev/scripts/install-binaries.sh) as local
// processes against the test environment's kube-apiserver — the way the KEDA operator runs in the tests, plus what
// a cluster would give them:
//
//   - its CRDs, ConfigMaps (config/ of the pinned module, applied from the Go module cache) in a system namespace
//     of its own (`SYSTEM_NAMESPACE`, a fresh name per run);
//   - the eventing controller (Channels, Subscriptions, ApiServerSources…), the MTChannelBasedBroker controller
//     (Brokers, Triggers), the MT broker ingress and filter, the InMemoryChannel controller and dispatcher, each in
//     a network namespace of its own (netns.mjs: they bind fixed ports such as :8080 on every interface), reaching
//     the apiserver and each other through Unix sockets piped to loopback;
//   - cluster addresses: the Services broker-ingress, broker-filter and imc-dispatcher with Endpoints on the host
//     ports their processes are exposed on, and a forward proxy (cluster-proxy.ts, their HTTP_PROXY) that resolves
//     `*.svc.cluster.local` through Services and Endpoints as kube-dns + kube-proxy would;
//   - a kubelet for ApiServerSources: each receive-adapter Deployment the controller creates is run as a local
//     process with that Deployment's container env, as its ServiceAccount (a TokenRequest token, so the source's
//     RBAC is the real test), and its Deployment is marked Available as a kubelet's pod would make it.
//
// Not run: the eventing webhook (the apiserver here cannot call in-cluster webhooks: no Service network). What it
// would add is applied by applyDefaults() below (Trigger defaulting); its validation beyond the CRD schemas is
// missing. Every process runs in its own process group under a reaper: nothing outlives the test file.
import { randomBytes } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import net from 'node:net'
import { join } from 'node:path'
import { AppsV1Api, CoreV1Api, CustomObjectsApi, type KubeConfig, type V1Deployment } from '@kubernetes/client-node'
import { parseAllDocuments, stringify } from 'yaml'
import { repoRoot } from '../env/binaries.js'
import type { RunResult } from '../env/exec.js'
import { waitFor } from '../env/exec.js'
import { Reaper, type ServerProcess, startServer } from '../env/supervisor.js'
import { type ClusterProxy, LOCAL_ENDPOINT_IP, startClusterProxy } from './cluster-proxy.js'

const NETNS_SCRIPT = join(repoRoot, 'test/knative/netns.mjs')
const ADAPTER_LABEL = 'eventing.knative.dev/source=apiserver-source-controller'

export type Manifest = {
  apiVersion: string
  kind: string
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; generation?: number }
  // biome-ignore lint/suspicious/noExplicitAny: manifests are free-form YAML
  [k: string]: any
}

const parseYaml = (text: string): Manifest[] =>
  parseAllDocuments(text)
    .map((d) => d.toJS() as Manifest | null)
    .filter((d): d is Manifest => Boolean(d?.kind))

/** The pinned module's source directory (config/ lives there), as dev/scripts/install-binaries.sh recorded it. */
export function eventingModuleDir(binDir: string): string {
  const dir = readFileSync(join(binDir, 'module-dir'), 'utf8').trim()
  if (!existsSync(join(dir, 'config'))) throw new Error(`${dir} (from ${binDir}/module-dir) has no config/`)
  return dir
}

async function yamlFiles(dir: string): Promise<Manifest[]> {
  const out: Manifest[] = []
  for (const f of (await readdir(dir)).filter((f) => /\.ya?ml$/.test(f)).sort()) {
    out.push(...parseYaml(await readFile(join(dir, f), 'utf8')))
  }
  return out
}

/** Knative's CRDs of the pinned release (core + InMemoryChannel), without the conversion webhook (none runs here). */
export async function eventingCrds(moduleDir: string): Promise<Manifest[]> {
  const crds = [
    ...(await yamlFiles(join(moduleDir, 'config/core/resources'))),
    ...(await yamlFiles(join(moduleDir, 'config/channels/in-memory-channel/resources'))),
  ].filter((m) => m.kind === 'CustomResourceDefinition')
  for (const crd of crds) delete crd.spec.conversion
  return crds
}

/**
 * What Knative's defaulting webhook does to the objects this project creates, since no webhook runs here. Trigger:
 * the `eventing.knative.dev/broker` label (the Broker controller finds its Triggers by it), the subscriber's
 * namespace, a match-all filter.
 */
export function applyDefaults(manifests: Manifest[], namespace: string) {
  for (const m of manifests) {
    if (m.kind !== 'Trigger' || !m.apiVersion.startsWith('eventing.knative.dev/')) continue
    m.metadata.labels = { ...m.metadata.labels, 'eventing.knative.dev/broker': m.spec.broker }
    m.spec.filter ??= {}
    if (m.spec.subscriber?.ref && !m.spec.subscriber.ref.namespace) m.spec.subscriber.ref.namespace = namespace
  }
}

interface Component {
  name: string
  binary: string
  env: Record<string, string>
  /** Exposed as this Service (port 80, name http) in the system namespace, from the process's :8080. */
  service?: string
}

export interface KnativeEventing {
  systemNamespace: string
  proxy: ClusterProxy
  /** The receive adapters running now, by Deployment (namespace/name). */
  adapters: Map<string, ServerProcess>
  processes: ServerProcess[]
  /** Last log lines of every component (for failure messages). */
  logs(lines?: number): string
  stop(): Promise<void>
}

/** What the harness needs of the cluster (a test file's TestEnv has it all; the benchmark builds its own). */
export interface ClusterAccess {
  /** Admin credentials (the components run with them; the receive adapters with their ServiceAccount's). */
  kc: KubeConfig
  kubeconfigPath: string
  apiserverUrl: string
  kubectl(args: string[], opts?: { input?: string }): Promise<RunResult>
  /** A KubeConfig of that ServiceAccount (TokenRequest); only needed where ApiServerSources run. */
  saKubeConfig(serviceAccount: string, namespace: string): Promise<KubeConfig>
}

export interface KnativeEventingOptions {
  /** The directory of the built commands (binaries manifest `knativeEventing`). */
  binDir: string
  env: ClusterAccess
  /** Where receive-adapter Deployments of ApiServerSources are looked for (default: none). */
  namespaces?: string[]
}

/** A Unix socket that pipes every connection to 127.0.0.1:<port> on the host (what a netns' outbound port reaches). */
function hostPipe(socket: string, connect: () => net.Socket): Promise<net.Server> {
  const server = net.createServer((a) => {
    const b = connect()
    a.pipe(b).pipe(a)
    const close = () => {
      a.destroy()
      b.destroy()
    }
    for (const s of [a, b]) {
      s.on('error', close)
      s.on('close', close)
    }
  })
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    if (socket) server.listen(socket, () => resolve(server))
    else server.listen({ host: '127.0.0.1', port: 0 }, () => resolve(server))
  })
}

export async function startKnativeEventing(opts: KnativeEventingOptions): Promise<KnativeEventing> {
  const { env, binDir } = opts
  const moduleDir = eventingModuleDir(binDir)
  const kc: KubeConfig = env.kc
  const core = kc.makeApiClient(CoreV1Api)
  const apps = kc.makeApiClient(AppsV1Api)
  const systemNamespace = `knative-eventing-${randomBytes(3).toString('hex')}`
  // Short: Unix socket paths are limited to 108 bytes.
  const dir = await mkdtemp('/tmp/kn-')
  const reaper = new Reaper()
  reaper.removeDir(dir)
  const servers: net.Server[] = []
  const processes: ServerProcess[] = []
  const adapters = new Map<string, ServerProcess>()
  let proxy: ClusterProxy | undefined
  let stopped = false
  let adapterLoop: Promise<void> | undefined

  const stop = async () => {
    stopped = true
    await adapterLoop?.catch(() => {})
    // KNATIVE_TEST_LOGS=<dir>: keep every component's log there (the rest of the state goes).
    const keep = process.env.KNATIVE_TEST_LOGS
    if (keep) {
      await mkdir(keep, { recursive: true })
      for (const f of (await readdir(dir)).filter((f) => f.endsWith('.log')))
        await copyFile(join(dir, f), join(keep, f))
      if (proxy) await writeFile(join(keep, 'cluster-proxy.log'), `${proxy.recent().join('\n')}\n`)
    }
    await reaper.reap()
    for (const s of servers) s.close()
    await proxy?.stop()
    await core.deleteNamespace({ name: systemNamespace }).catch(() => {})
    await rm(dir, { recursive: true, force: true })
  }

  try {
    // CRDs of the pinned release (server-side apply, forced: the shared CRDs of ../shared/upstream-crds may be of
    // another commit).
    const crds = await eventingCrds(moduleDir)
    const applied = await env.kubectl(
      ['apply', '--server-side', '--force-conflicts', '--field-manager=modelbackfill-knative', '-o', 'name', '-f', '-'],
      { input: crds.map((c) => stringify(c)).join('---\n') },
    )
    if (applied.code !== 0) throw new Error(`applying Knative's CRDs failed:\n${applied.stderr}`)
    const names = applied.stdout.split('\n').filter((l) => l.startsWith('customresourcedefinition'))
    const established = await env.kubectl(['wait', '--for=condition=Established', '--timeout=60s', ...names])
    if (established.code !== 0) throw new Error(`Knative's CRDs not established:\n${established.stderr}`)

    // The system namespace and its ConfigMaps, as config/ has them (knative-eventing → ours).
    await core.createNamespace({
      body: {
        metadata: { name: systemNamespace, labels: { 'app.kubernetes.io/managed-by': 'modelbackfill-test-env' } },
      },
    })
    const configMaps = [
      ...(await yamlFiles(join(moduleDir, 'config/core/configmaps'))),
      ...(await yamlFiles(join(moduleDir, 'config/channels/in-memory-channel/configmaps'))),
    ].filter((m) => m.kind === 'ConfigMap')
    const cmYaml = configMaps
      .map((m) => stringify(m))
      .join('---\n')
      .replaceAll('knative-eventing', systemNamespace)
    const cms = await env.kubectl(['apply', '-n', systemNamespace, '-f', '-'], { input: cmYaml })
    if (cms.code !== 0) throw new Error(`applying Knative's ConfigMaps failed:\n${cms.stderr}`)

    proxy = await startClusterProxy(kc)
    const apiPort = Number(new URL(env.apiserverUrl).port)
    const apiSock = join(dir, 'api.sock')
    const proxySock = join(dir, 'proxy.sock')
    servers.push(await hostPipe(apiSock, () => net.connect(apiPort, '127.0.0.1')))
    servers.push(await hostPipe(proxySock, () => net.connect((proxy as ClusterProxy).port, '127.0.0.1')))
    const outbound = [
      { port: apiPort, socket: apiSock },
      { port: proxy.port, socket: proxySock },
    ]
    const baseEnv = (name: string, kubeconfig: string): Record<string, string> => ({
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: dir,
      KUBECONFIG: kubeconfig,
      SYSTEM_NAMESPACE: systemNamespace,
      POD_NAME: `${name}-local`,
      CONFIG_LOGGING_NAME: 'config-logging',
      CONFIG_OBSERVABILITY_NAME: 'config-observability',
      CLUSTER_DOMAIN: 'cluster.local',
      HTTP_PROXY: (proxy as ClusterProxy).url,
      http_proxy: (proxy as ClusterProxy).url,
      NO_PROXY: '127.0.0.1,localhost',
      no_proxy: '127.0.0.1,localhost',
    })

    /** Runs a command in its own network namespace; `expose`: its :8080 on a free host port (returned). */
    const spawnInNetns = async (
      name: string,
      binary: string,
      envVars: Record<string, string>,
      expose: boolean,
    ): Promise<{ proc: ServerProcess; hostPort?: number }> => {
      const inbound: { port: number; socket: string }[] = []
      let hostPort: number | undefined
      if (expose) {
        const socket = join(dir, `${name}.sock`)
        inbound.push({ port: 8080, socket })
        const server = await hostPipe('', () => net.connect(socket))
        servers.push(server)
        hostPort = (server.address() as net.AddressInfo).port
      }
      const proc = startServer(reaper, name, 'unshare', ['-n', process.execPath, NETNS_SCRIPT, '--', binary], {
        cwd: dir,
        logPath: join(dir, `${name}.log`),
        env: { ...envVars, MBF_NETNS: JSON.stringify({ outbound, inbound }) },
      })
      return { proc, hostPort }
    }

    const image = (what: string) => `local/${what}` // never pulled: the harness runs the adapters itself
    const components: Component[] = [
      {
        name: 'controller',
        binary: 'controller',
        env: {
          METRICS_DOMAIN: 'knative.dev/eventing',
          APISERVER_RA_IMAGE: image('apiserver_receive_adapter'),
          AUTH_PROXY_IMAGE: image('auth_proxy'),
          EVENT_TRANSFORM_JSONATA_IMAGE: image('transform-jsonata'),
          INTEGRATION_SOURCE_TIMER_IMAGE: image('timer-source'),
          INTEGRATION_SOURCE_AWS_S3_IMAGE: image('aws-s3-source'),
          INTEGRATION_SOURCE_AWS_SQS_IMAGE: image('aws-sqs-source'),
          INTEGRATION_SOURCE_AWS_DDB_STREAMS_IMAGE: image('aws-ddb-streams-source'),
          INTEGRATION_SINK_LOG_IMAGE: image('log-sink'),
          INTEGRATION_SINK_AWS_S3_IMAGE: image('aws-s3-sink'),
          INTEGRATION_SINK_AWS_SQS_IMAGE: image('aws-sqs-sink'),
          INTEGRATION_SINK_AWS_SNS_IMAGE: image('aws-sns-sink'),
        },
      },
      { name: 'mtchannel-broker', binary: 'mtchannel-broker', env: { METRICS_DOMAIN: 'knative.dev/eventing' } },
      {
        name: 'imc-controller',
        binary: 'imc-controller',
        env: {
          WEBHOOK_NAME: 'inmemorychannel-webhook',
          WEBHOOK_PORT: '8443',
          METRICS_DOMAIN: 'knative.dev/inmemorychannel-controller',
          DISPATCHER_IMAGE: image('channel_dispatcher'),
        },
      },
      {
        name: 'imc-dispatcher',
        binary: 'imc-dispatcher',
        service: 'imc-dispatcher',
        env: {
          METRICS_DOMAIN: 'knative.dev/inmemorychannel-dispatcher',
          CONTAINER_NAME: 'dispatcher',
          MAX_IDLE_CONNS: '1000',
          MAX_IDLE_CONNS_PER_HOST: '1000',
        },
      },
      {
        name: 'broker-ingress',
        binary: 'broker-ingress',
        service: 'broker-ingress',
        env: {
          NAMESPACE: systemNamespace,
          CONTAINER_NAME: 'ingress',
          METRICS_DOMAIN: 'knative.dev/internal/eventing',
          INGRESS_PORT: '8080',
        },
      },
      {
        name: 'broker-filter',
        binary: 'broker-filter',
        service: 'broker-filter',
        env: {
          NAMESPACE: systemNamespace,
          CONTAINER_NAME: 'filter',
          METRICS_DOMAIN: 'knative.dev/internal/eventing',
          FILTER_PORT: '8080',
        },
      },
    ]
    for (const c of components) {
      const { proc, hostPort } = await spawnInNetns(
        c.name,
        join(binDir, c.binary),
        { ...baseEnv(c.name, env.kubeconfigPath), ...c.env },
        c.service !== undefined,
      )
      processes.push(proc)
      if (c.service && hostPort) await exposeService(core, systemNamespace, c.service, hostPort)
    }

    // The InMemoryChannel controller checks its dispatcher's Deployment (config/'s, as applied) is Available.
    const dispatcher = (await yamlFiles(join(moduleDir, 'config/channels/in-memory-channel/deployments'))).find(
      (m) => m.kind === 'Deployment' && m.metadata.name === 'imc-dispatcher',
    )
    if (!dispatcher) throw new Error('config/ of the module has no imc-dispatcher Deployment')
    const dApplied = await env.kubectl(['apply', '-n', systemNamespace, '-o', 'json', '-f', '-'], {
      input: stringify(dispatcher).replaceAll('knative-eventing', systemNamespace),
    })
    if (dApplied.code !== 0) throw new Error(`applying the imc-dispatcher Deployment failed:\n${dApplied.stderr}`)
    await markAvailable(apps, JSON.parse(dApplied.stdout) as V1Deployment, 'imc-dispatcher runs as a local process')

    // The kubelet part: receive adapters for the ApiServerSources' Deployments.
    const namespaces = opts.namespaces ?? []
    const runAdapter = async (d: V1Deployment) => {
      const ns = d.metadata?.namespace as string
      const name = d.metadata?.name as string
      const container = d.spec?.template.spec?.containers[0]
      const sa = d.spec?.template.spec?.serviceAccountName ?? 'default'
      const vars: Record<string, string> = {}
      for (const e of container?.env ?? []) {
        if (e.value !== undefined) vars[e.name] = e.value
        else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.namespace') vars[e.name] = ns
        else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.name') vars[e.name] = `${name}-local`
      }
      const saKc = await env.saKubeConfig(sa, ns)
      const kubeconfig = join(dir, `${name}.kubeconfig`)
      await writeFile(kubeconfig, saKc.exportConfig(), { mode: 0o600 })
      const { proc } = await spawnInNetns(
        `adapter-${name}`,
        join(binDir, 'apiserver-receive-adapter'),
        { ...baseEnv(name, kubeconfig), ...vars },
        false,
      )
      adapters.set(`${ns}/${name}`, proc)
      await markAvailable(apps, d, 'receive adapter running as a local process (test harness)')
    }
    const seen = new Map<string, string>() // deployment → the env it was started with
    const syncAdapters = async () => {
      for (const namespace of namespaces) {
        const list = await apps.listNamespacedDeployment({ namespace, labelSelector: ADAPTER_LABEL })
        const present = new Set<string>()
        for (const d of list.items) {
          const key = `${namespace}/${d.metadata?.name}`
          present.add(key)
          const spec = JSON.stringify(d.spec?.template.spec?.containers[0]?.env ?? [])
          if (seen.get(key) === spec) continue
          const old = adapters.get(key)
          if (old) stopGroup(old)
          seen.set(key, spec)
          await runAdapter(d)
        }
        for (const key of [...seen.keys()].filter((k) => k.startsWith(`${namespace}/`) && !present.has(k))) {
          seen.delete(key)
          adapters.delete(key)
        }
      }
    }
    adapterLoop = (async () => {
      while (!stopped) {
        await syncAdapters().catch(() => {})
        await new Promise((r) => setTimeout(r, 500))
      }
    })()

    const logs = (lines = 15) =>
      `${[...processes, ...adapters.values()]
        .map((p) => {
          const tail = p
            .logTail(lines)
            .split('\n')
            .map((l) => l.replace(/,"stacktrace":".*?"(?=[,}])/, '').slice(0, 400))
          return `--- ${p.name} ---\n${tail.join('\n')}`
        })
        .join('\n')}\n--- cluster proxy ---\n${(proxy as ClusterProxy).recent().slice(-lines).join('\n')}`
    return { systemNamespace, proxy, adapters, processes, logs, stop }
  } catch (err) {
    await stop()
    throw err
  }
}

/** What the Deployment controller and a kubelet would report once its one pod is ready. */
async function markAvailable(apps: AppsV1Api, d: V1Deployment, message: string) {
  const now = new Date()
  await apps.replaceNamespacedDeploymentStatus({
    name: d.metadata?.name as string,
    namespace: d.metadata?.namespace as string,
    body: {
      ...d,
      status: {
        observedGeneration: d.metadata?.generation,
        replicas: 1,
        readyReplicas: 1,
        availableReplicas: 1,
        updatedReplicas: 1,
        conditions: [
          {
            type: 'Available',
            status: 'True',
            reason: 'MinimumReplicasAvailable',
            message,
            lastUpdateTime: now,
            lastTransitionTime: now,
          },
        ],
      },
    },
  })
}

/** SIGTERM to a process group the reaper watches (it is reaped at stop either way). */
function stopGroup(p: ServerProcess) {
  try {
    process.kill(-p.pid, 'SIGTERM')
  } catch {
    // already gone
  }
}

/**
 * A selector-less Service (port 80 "http") whose Endpoints stand for 127.0.0.1:<hostPort>: a cluster address for a
 * local process. The apiserver refuses loopback Endpoints, so the address written is LOCAL_ENDPOINT_IP (a
 * documentation address, RFC 5737, never routed), which cluster-proxy.ts reads as "this machine's loopback".
 */
export async function exposeService(core: CoreV1Api, namespace: string, name: string, hostPort: number) {
  const labels = { 'app.kubernetes.io/managed-by': 'modelbackfill-test-env' }
  const service = {
    metadata: { name, namespace, labels },
    spec: { ports: [{ name: 'http', port: 80, targetPort: hostPort }] },
  }
  const endpoints = {
    metadata: { name, namespace, labels },
    subsets: [{ addresses: [{ ip: LOCAL_ENDPOINT_IP }], ports: [{ name: 'http', port: hostPort }] }],
  }
  try {
    await core.createNamespacedService({ namespace, body: service })
  } catch (err) {
    if ((err as { code?: number }).code !== 409) throw err
  }
  try {
    await core.createNamespacedEndpoints({ namespace, body: endpoints })
  } catch (err) {
    if ((err as { code?: number }).code !== 409) throw err
    await core.replaceNamespacedEndpoints({ name, namespace, body: endpoints })
  }
}

/** Waits until a Knative object's Ready condition is True; a False with a reason fails only at the deadline. */
export async function waitReady(
  kc: KubeConfig,
  ref: { group: string; version: string; plural: string; namespace: string; name: string },
  knative: KnativeEventing,
  timeoutMs = 60_000,
): Promise<Manifest> {
  const custom = kc.makeApiClient(CustomObjectsApi)
  let last = ''
  try {
    return await waitFor(
      `${ref.plural} ${ref.namespace}/${ref.name} Ready`,
      async () => {
        const o = (await custom.getNamespacedCustomObject(ref)) as Manifest
        const ready = o.status?.conditions?.find((c: { type: string }) => c.type === 'Ready')
        last = JSON.stringify(o.status?.conditions ?? [])
        for (const p of knative.processes) {
          if (p.hasExited()) throw new Error(`${p.name} exited:\n${p.logTail(30)}`)
        }
        return ready?.status === 'True' ? o : undefined
      },
      { timeoutMs, intervalMs: 250 },
    )
  } catch (err) {
    ;(err as Error).message += `\nconditions: ${last}\n${knative.logs()}`
    throw err
  }
}
