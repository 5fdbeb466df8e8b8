// The real test environment: etcd, kube-apiserver (TLS, RBAC, service-account tokens), kube-controller-manager
// (garbage collector, Job controller, service accounts, namespaces) and nats-server with JetStream, all on free
// loopback ports, with the repo's CRDs applied. Used by the vitest global setup, by `npm run env:up` and by tests.
import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { mkdir, readdir, readFile, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { type Binaries, ensureBinaries, repoRoot } from './binaries.js'
import {
  type EngineInfo,
  type EngineOptions,
  engineShellExports,
  launchEngine,
  planEngine,
  relayEngineToNode,
} from './engine.js'
import { cmdline, isAlive, run, runOk, waitFor } from './exec.js'
import { relayToNode } from './forwarder.js'
import { type NatsServerInfo, natsClusterFromEnv, natsServerReady, natsUrlOf, writeNatsConfigs } from './nats.js'
import { freePorts, httpGet, LOOPBACK } from './net.js'
import { type NodeInfo, nodeApiserverPki, planNodeNetwork, startNode } from './node.js'
import { createPki, type Pki, writeKubeconfig } from './pki.js'
import { type PostgresInfo, startPostgres } from './postgres.js'
import {
  DEFAULT_STOP_GRACE_SECONDS,
  Reaper,
  reapGroups,
  type ServerProcess,
  startServer,
  whileRunning,
} from './supervisor.js'

export const MIN_NATS_SERVER_VERSION = [2, 12, 0] as const

/** Controllers kube-controller-manager runs (names as `kube-controller-manager --help` lists them for v1.34). */
export const CONTROLLERS = [
  'garbage-collector-controller',
  'job-controller',
  'namespace-controller',
  'serviceaccount-controller',
  'serviceaccount-token-controller',
  'root-ca-certificate-publisher-controller',
  'clusterrole-aggregation-controller',
]

/**
 * With a node, also: the node lifecycle controller (it lifts the not-ready taint a kubelet registers with, and
 * taints a node that stops reporting), EndpointSlices for Services (kube-proxy and CoreDNS read them), and the
 * workload controllers an installation's pods come from (Deployments, StatefulSets, DaemonSets, PDBs).
 */
export const NODE_CONTROLLERS = [
  'node-lifecycle-controller',
  'endpointslice-controller',
  'deployment-controller',
  'replicaset-controller',
  'statefulset-controller',
  'daemonset-controller',
  'disruption-controller',
]

export const SERVICE_ACCOUNT_ISSUER = 'https://kubernetes.default.svc.cluster.local'

/** Everything a client needs, JSON-serializable (vitest `provide`, `<dir>/env.json`). */
export interface EnvironmentInfo {
  dir: string
  detached: boolean
  kubeconfigPath: string
  apiserverUrl: string
  caCertPath: string
  etcdUrl: string
  /** Every server's client URL, comma-separated in a cluster (what NATS_URL carries). */
  natsUrl: string
  /** The first server's monitoring URL. */
  natsMonitorUrl: string
  /** NATS as the node's pods reach it (a relay of the first server on the bridge address), with a node. */
  natsNodeUrl?: string
  /** Whether NATS runs as a 3-server JetStream cluster (StartOptions.natsCluster). */
  natsCluster: boolean
  /** Each nats-server: name (`nats-server`, or `nats-0`…`nats-2` in a cluster), URLs, store directory. */
  natsServers: NatsServerInfo[]
  envShPath: string
  kubernetesVersion: string
  natsServerVersion: string
  binaries: Binaries
  /** Names of the CustomResourceDefinitions applied from crds/. */
  crds: string[]
  processes: { name: string; pid: number; logPath: string }[]
  startupMs: number
  /** The node (StartOptions.node): where pods run, its network, its containerd. */
  node?: NodeInfo
  /** The apiserver's audit log of Job creates and deletes (StartOptions.auditJobs). */
  auditLogPath?: string
  /** The PostgreSQL server (StartOptions.postgres). */
  postgres?: PostgresInfo
  /** The inference engine (StartOptions.engine): its servers' URLs, on loopback and, with a node, for the pods. */
  engine?: EngineInfo
}

/**
 * Servers of a running environment that can be stopped and started again (chaos testing). In a NATS cluster,
 * `nats-0`…`nats-2` name one server and `nats-server` all three together.
 */
export type RestartableServer = 'nats-server' | 'kube-apiserver' | `nats-${number}`

export interface Environment extends EnvironmentInfo {
  stop(): Promise<void>
  /**
   * Stops one server of the running environment (`signal`, default SIGTERM; SIGKILL after the grace period) and
   * waits until it is gone. Its data, port and configuration stay, so startServer brings the same server back
   * (nats-server: the same JetStream store directory).
   */
  stopServer(name: RestartableServer, signal?: NodeJS.Signals): Promise<void>
  /** Starts a server stopped by stopServer again, with the same command line, and waits until it is ready. */
  startServer(name: RestartableServer): Promise<void>
}

export interface StartOptions {
  /** Directory for all state (certs, data, logs, kubeconfig, env.sh); created, must be absent or empty. Default: a fresh temp dir. */
  dir?: string
  /** Keep the servers running after this process exits (npm run env:up). Default false: they die with it. */
  detached?: boolean
  /** Override binaries from the manifest (tests use this to inject a failing component). */
  binaries?: Partial<Binaries>
  /** Directory with CRD manifests (*.yaml, *.yml) to apply; default crds/ in the repo. */
  crdsDir?: string
  /** Progress lines; default to stderr. */
  log?: (line: string) => void
  /** A 3-server JetStream cluster instead of one nats-server. Default: MBF_NATS_CLUSTER=1 in the environment. */
  natsCluster?: boolean
  /**
   * A real node: containerd + runc, a kubelet, kube-scheduler, kube-proxy and CoreDNS (test/env/node.ts), so pods
   * run containers. Needs root and the machine's containerd/runc/CNI packages. Default false: pods stay Pending.
   * `{ appImage: true }` also imports the project's image (deploy/images/build.sh --app) into it.
   */
  node?: boolean | { appImage?: boolean }
  /**
   * The apiserver writes an audit log of Job creates and deletes (`auditLogPath`, JSON lines): when each happened
   * to the microsecond and who asked, from the apiserver itself (the chaos oracle's creation and deletion times;
   * creationTimestamp has 1 s resolution and a watch delivers late under load). Default false.
   */
  auditJobs?: boolean
  /**
   * A PostgreSQL server on loopback, its data in the environment's directory (./postgres.ts): the evaluation
   * workload's durable store. Needs Debian's postgresql package. Default false.
   */
  postgres?: boolean
  /**
   * The real inference engine (test/env/engine.ts): llama-server with SmolLM2 135M on the chat API and Gemma 3 270M
   * on completions, on loopback and, with a node, on its bridge address. `{ … }` tunes it (threads, slots, …).
   * Default false.
   */
  engine?: boolean | EngineOptions
}

/**
 * Audit only what the oracle reads (Jobs created and deleted, at the end of each request), everything else not at
 * all: one short line per Job write. The log backend blocks the request until its line is written, so the file holds
 * every Job write whose response was sent.
 */
async function auditJobsFlags(dir: string, logPath: string) {
  const policy = join(dir, 'audit-policy.yaml')
  await writeFile(
    policy,
    [
      'apiVersion: audit.k8s.io/v1',
      'kind: Policy',
      'omitStages: [RequestReceived, ResponseStarted, Panic]',
      'rules:',
      '  - level: Metadata',
      '    verbs: [create, delete, deletecollection]',
      '    resources: [{ group: batch, resources: [jobs] }]',
      '  - level: None',
      '',
    ].join('\n'),
  )
  return [
    `--audit-policy-file=${policy}`,
    `--audit-log-path=${logPath}`,
    '--audit-log-format=json',
    '--audit-log-mode=blocking',
  ]
}

const owned = new WeakMap<object, Reaper>()
/** How each server of an environment started here was launched, so a test can kill and restart one. */
const restartable = new WeakMap<
  object,
  { reaper: Reaper; commands: Map<string, { command: string; args: string[]; env?: NodeJS.ProcessEnv }> }
>()

function serverOf(env: Environment, name: string) {
  const entry = env.processes.find((p) => p.name === name)
  const own = restartable.get(env)
  const spec = own?.commands.get(name)
  if (!entry || !own || !spec) throw new Error(`no server "${name}" started by this process in ${env.dir}`)
  return { entry, spec, reaper: own.reaper }
}

/** Kills one server of an environment this process started with SIGKILL (a crash, not a shutdown). */
export async function killServer(env: Environment, name: string): Promise<void> {
  const { entry } = serverOf(env, name)
  process.kill(entry.pid, 'SIGKILL')
  await waitFor(`${name} to die`, () => !isAlive(entry.pid), { timeoutMs: 10_000 })
}

/** Starts a killed server again with the same arguments and data; env.stop() stops it with the others. */
export function restartServer(env: Environment, name: string): void {
  const { entry, spec, reaper } = serverOf(env, name)
  if (isAlive(entry.pid)) throw new Error(`${name} is still running`)
  const p = startServer(reaper, name, spec.command, spec.args, { cwd: env.dir, logPath: entry.logPath, env: spec.env })
  entry.pid = p.pid
}

export async function startEnvironment(opts: StartOptions = {}): Promise<Environment> {
  const started = Date.now()
  const log = opts.log ?? ((line: string) => process.stderr.write(`[test-env] ${line}\n`))
  const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)}s`
  const binaries: Binaries = { ...ensureBinaries(), ...opts.binaries }

  const dir = resolve(opts.dir ?? join(tmpdir(), `modelbackfill-env-${randomBytes(6).toString('hex')}`))
  if (opts.dir && (await readdir(dir).catch(() => [])).length > 0) {
    throw new Error(`environment directory ${dir} is not empty`)
  }
  // The reaper learns about the directory before it exists: from here on, whenever this process dies, it cleans up.
  const reaper = new Reaper()
  reaper.removeDir(dir)
  const processes: ServerProcess[] = []
  const commands = new Map<string, { command: string; args: string[]; env?: NodeJS.ProcessEnv }>()
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 })
    const logs = join(dir, 'logs')
    await mkdir(logs)
    const natsCluster = opts.natsCluster ?? natsClusterFromEnv()
    const [pki, ports, natsServerVersion, natsServers] = await Promise.all([
      createPki(join(dir, 'pki')),
      freePorts(4),
      checkNatsServerVersion(binaries.natsServer),
      writeNatsConfigs(dir, natsCluster),
    ])
    const [etcdPort, etcdPeerPort, apiserverPort, kcmPort] = ports as [number, number, number, number]
    // Command lines (`commands`, above) and readiness probes by name, so a run can stop one server and start it again.
    const readiness = new Map<string, (p: ServerProcess) => Promise<unknown>>()
    const start = (name: string, command: string, args: string[], env?: NodeJS.ProcessEnv) => {
      commands.set(name, { command, args, env })
      const p = startServer(reaper, name, command, args, { cwd: dir, logPath: join(logs, `${name}.log`), env })
      processes.push(p)
      return p
    }

    // NATS first: it is ready long before the apiserver. A cluster is ready once every server knows the meta leader.
    const natsUrl = natsUrlOf(natsServers)
    const natsMonitorUrl = (natsServers[0] as NatsServerInfo).monitorUrl
    const natsReady = Promise.all(
      natsServers.map((server) => {
        const ready = (p: ServerProcess) =>
          whileRunning(
            p,
            waitFor(`${server.name} ready`, () => natsServerReady(server, natsCluster), { timeoutMs: 60_000 }),
          )
        readiness.set(server.name, ready)
        return ready(start(server.name, binaries.natsServer, ['-c', server.configPath]))
      }),
    ).then(() =>
      log(
        `${natsCluster ? `${natsServers.length}-server JetStream cluster` : 'nats-server'} ${natsServerVersion} ready at ${natsUrl} (${elapsed()})`,
      ),
    )
    natsReady.catch(() => {})
    // PostgreSQL beside the others (initdb is a second or two of its own).
    const postgresReady = opts.postgres
      ? startPostgres({ dir, reaper, start }).then(({ info }) => {
          log(`${info.version} ready at ${info.host}:${info.port} (${elapsed()})`)
          return info
        })
      : Promise.resolve(undefined)
    postgresReady.catch(() => {})
    // The engine loads its models while the rest starts (seconds); the node's relay to it comes once the node is up.
    const engineOptions = opts.engine === true ? {} : opts.engine || undefined
    const engine = engineOptions ? await planEngine(binaries, logs, engineOptions) : undefined
    const engineReady = engine
      ? launchEngine(engine, start, engineOptions).then(() =>
          log(`${engine.servers.map((s) => `${s.name} (${s.model})`).join(', ')} ready (${elapsed()})`),
        )
      : Promise.resolve()
    engineReady.catch(() => {})

    const etcdUrl = `http://${LOOPBACK}:${etcdPort}`
    const peerUrl = `http://${LOOPBACK}:${etcdPeerPort}`
    const etcd = start('etcd', binaries.etcd, [
      '--name=default',
      `--data-dir=${join(dir, 'etcd')}`,
      `--listen-client-urls=${etcdUrl}`,
      `--advertise-client-urls=${etcdUrl}`,
      `--listen-peer-urls=${peerUrl}`,
      `--initial-advertise-peer-urls=${peerUrl}`,
      `--initial-cluster=default=${peerUrl}`,
      '--unsafe-no-fsync', // throwaway data; fsync dominates write latency on small machines
      '--log-level=warn',
    ])
    await whileRunning(
      etcd,
      waitFor('etcd /health', async () => JSON.parse((await httpGet(`${etcdUrl}/health`)).body).health === 'true'),
    )
    log(`etcd ready (${elapsed()})`)

    const apiserverUrl = `https://${LOOPBACK}:${apiserverPort}`
    // With a node: its kubelet is authorized as a node (Node authorizer, NodeRestriction), and the apiserver reaches
    // the kubelet (logs, exec) with a client certificate of its own, verifying the kubelet's against the CA.
    const nodeNetwork = opts.node ? await planNodeNetwork(dir) : undefined
    const nodeFlags = opts.node
      ? await nodeApiserverPki(pki).then((c) => [
          '--authorization-mode=Node,RBAC',
          '--enable-admission-plugins=NodeRestriction',
          `--kubelet-client-certificate=${c.kubeletClientCert}`,
          `--kubelet-client-key=${c.kubeletClientKey}`,
          `--kubelet-certificate-authority=${pki.caCert}`,
          '--kubelet-preferred-address-types=InternalIP',
        ])
      : ['--authorization-mode=RBAC']
    const auditLogPath = opts.auditJobs ? join(logs, 'audit-jobs.log') : undefined
    const auditFlags = auditLogPath ? await auditJobsFlags(dir, auditLogPath) : []
    const apiserver = start('kube-apiserver', binaries.kubeApiserver, [
      `--etcd-servers=${etcdUrl}`,
      `--bind-address=${LOOPBACK}`,
      // With a node, the kubernetes Service's endpoint is the bridge address, where the node relays to loopback.
      `--advertise-address=${nodeNetwork?.hostIp ?? LOOPBACK}`,
      `--secure-port=${apiserverPort}`,
      `--tls-cert-file=${pki.apiserverCert}`,
      `--tls-private-key-file=${pki.apiserverKey}`,
      `--client-ca-file=${pki.caCert}`,
      ...nodeFlags,
      `--service-account-issuer=${SERVICE_ACCOUNT_ISSUER}`,
      `--service-account-key-file=${pki.serviceAccountPub}`,
      `--service-account-signing-key-file=${pki.serviceAccountKey}`,
      `--api-audiences=${SERVICE_ACCOUNT_ISSUER}`,
      '--service-cluster-ip-range=10.0.0.0/24',
      '--allow-privileged=true',
      '--profiling=false',
      `--cert-dir=${join(dir, 'apiserver')}`,
      ...auditFlags,
    ])
    const tls = await adminTls(pki)
    readiness.set('kube-apiserver', (p) =>
      whileRunning(
        p,
        waitFor(
          'kube-apiserver /readyz',
          async () => {
            const r = await httpGet(`${apiserverUrl}/readyz`, tls)
            if (r.status !== 200) throw new Error(`/readyz ${r.status}: ${r.body.slice(-400)}`)
            return true
          },
          { timeoutMs: 90_000, intervalMs: 200 },
        ),
      ),
    )
    await (readiness.get('kube-apiserver') as (p: ServerProcess) => Promise<unknown>)(apiserver)
    log(`kube-apiserver ready at ${apiserverUrl} (${elapsed()})`)

    const kubeconfigPath = join(dir, 'kubeconfig')
    const kcmKubeconfig = join(dir, 'kube-controller-manager.kubeconfig')
    await Promise.all([
      writeKubeconfig(kubeconfigPath, {
        server: apiserverUrl,
        caCert: pki.caCert,
        clientCert: pki.adminCert,
        clientKey: pki.adminKey,
        user: 'admin',
      }),
      writeKubeconfig(kcmKubeconfig, {
        server: apiserverUrl,
        caCert: pki.caCert,
        clientCert: pki.controllerManagerCert,
        clientKey: pki.controllerManagerKey,
        user: 'system:kube-controller-manager',
      }),
    ])

    // CRDs before the controller manager, so its garbage collector discovers them on its first sync.
    const crds = await applyCrds(binaries.kubectl, kubeconfigPath, opts.crdsDir ?? join(repoRoot, 'crds'), dir)
    if (crds.length > 0) log(`${crds.length} CRDs established (${elapsed()})`)

    const kcm = start('kube-controller-manager', binaries.kubeControllerManager, [
      `--kubeconfig=${kcmKubeconfig}`,
      `--authentication-kubeconfig=${kcmKubeconfig}`,
      `--authorization-kubeconfig=${kcmKubeconfig}`,
      `--bind-address=${LOOPBACK}`,
      `--secure-port=${kcmPort}`,
      `--cert-dir=${join(dir, 'kube-controller-manager')}`,
      `--controllers=${[...CONTROLLERS, ...(opts.node ? NODE_CONTROLLERS : [])].join(',')}`,
      `--root-ca-file=${pki.caCert}`,
      `--service-account-private-key-file=${pki.serviceAccountKey}`,
      '--use-service-account-credentials=true',
      '--leader-elect=false',
    ])
    await whileRunning(
      kcm,
      waitFor(
        'kube-controller-manager /healthz and the default ServiceAccount',
        async () => {
          const health = await httpGet(`https://${LOOPBACK}:${kcmPort}/healthz`, { insecure: true })
          if (health.status !== 200) throw new Error(`/healthz ${health.status}: ${health.body}`)
          // The serviceaccount controller at work: the proof that controllers actually run.
          const sa = await httpGet(`${apiserverUrl}/api/v1/namespaces/default/serviceaccounts/default`, tls)
          if (sa.status !== 200) throw new Error(`default ServiceAccount: ${sa.status}`)
          return true
        },
        { timeoutMs: 60_000, intervalMs: 200 },
      ),
    )
    log(`kube-controller-manager ready (${elapsed()})`)
    const node = nodeNetwork
      ? await startNode({
          network: nodeNetwork,
          apiserverPort,
          dir,
          pki,
          apiserverUrl,
          adminKubeconfig: kubeconfigPath,
          binaries,
          reaper,
          start,
          log,
          elapsed,
          appImage: typeof opts.node === 'object' && opts.node.appImage === true,
        })
      : undefined
    await natsReady
    const postgres = await postgresReady
    await engineReady
    if (engine && node) await relayEngineToNode(engine, node.hostIp, start)
    // Pods cannot reach loopback: NATS (the gate sidecar's) and PostgreSQL (the evaluation workload's) are relayed.
    let natsNodeUrl: string | undefined
    if (node) {
      const first = new URL((natsServers[0] as NatsServerInfo).url)
      natsNodeUrl = `nats://${await relayToNode(start, 'nats-relay', node.hostIp, Number(first.port))}`
    }
    if (postgres && node) {
      const at = await relayToNode(start, 'postgres-relay', node.hostIp, postgres.port)
      const url = new URL(postgres.url)
      url.host = at
      postgres.nodeUrl = url.toString()
    }

    // A bin/ with just kubectl and nats, so env.sh can put exactly those first on PATH.
    const bin = join(dir, 'bin')
    await mkdir(bin)
    await Promise.all([symlink(binaries.kubectl, join(bin, 'kubectl')), symlink(binaries.nats, join(bin, 'nats'))])
    const envShPath = join(dir, 'env.sh')
    await writeFile(
      envShPath,
      [
        '# The ModelBackfill local test environment. Source it: . .testenv/env.sh',
        `export KUBECONFIG=${shellQuote(kubeconfigPath)}`,
        `export NATS_URL=${shellQuote(natsUrl)}`,
        `export NATS_MONITOR_URL=${shellQuote(natsMonitorUrl)}`,
        `export NATS_MONITOR_URLS=${shellQuote(natsServers.map((n) => n.monitorUrl).join(','))}`,
        // What the provision step gives streams, buckets and consumers (cmd/manager/provision.ts): 3 on a cluster.
        `export NATS_REPLICAS=${natsCluster ? natsServers.length : 1}`,
        `export PATH=${shellQuote(bin)}:"$PATH"`,
        // `ctr images ls`, `ctr tasks ls`: the node's containerd (not the machine's default socket).
        ...(node
          ? [`export CONTAINERD_ADDRESS=${shellQuote(node.containerdAddress)}`, 'export CONTAINERD_NAMESPACE=k8s.io']
          : []),
        ...(engine ? engineShellExports(engine, shellQuote) : []),
        '',
      ].join('\n'),
    )

    const info: EnvironmentInfo = {
      dir,
      detached: opts.detached ?? false,
      kubeconfigPath,
      apiserverUrl,
      caCertPath: pki.caCert,
      etcdUrl,
      natsUrl,
      natsMonitorUrl,
      natsNodeUrl,
      natsCluster,
      natsServers,
      envShPath,
      kubernetesVersion: binaries.kubernetesVersion,
      natsServerVersion,
      binaries,
      crds,
      processes: processes.map((p) => ({ name: p.name, pid: p.pid, logPath: p.logPath })),
      startupMs: Date.now() - started,
      node,
      auditLogPath,
      postgres,
      engine,
    }
    await writeFile(join(dir, 'env.json'), `${JSON.stringify(info, null, 2)}\n`)
    const current = (name: string) => processes.findLast((p) => p.name === name)
    // In a cluster, `nats-server` is every NATS server at once (what a single-server chaos fault means).
    const natsGroup = (name: string) =>
      natsCluster && name === 'nats-server' ? natsServers.map((n) => n.name) : undefined
    const env: Environment = {
      ...info,
      stop: () => stopEnvironment(env),
      async stopServer(name, signal = 'SIGTERM') {
        const group = natsGroup(name)
        if (group) {
          await Promise.all(group.map((n) => env.stopServer(n as RestartableServer, signal)))
          return
        }
        const p = current(name)
        if (!p || p.hasExited()) return
        process.kill(-p.pid, signal)
        const killed = setTimeout(() => {
          if (!p.hasExited()) process.kill(-p.pid, 'SIGKILL')
        }, DEFAULT_STOP_GRACE_SECONDS * 1000)
        await p.exited
        clearTimeout(killed)
        if (!opts.detached) reaper.forgetGroup(p.pid)
      },
      async startServer(name) {
        const group = natsGroup(name)
        if (group) {
          await Promise.all(group.map((n) => env.startServer(n as RestartableServer)))
          return
        }
        const spec = commands.get(name)
        const ready = readiness.get(name)
        if (!spec || !ready || opts.detached) throw new Error(`${name} cannot be restarted here`)
        if (current(name)?.hasExited() === false) throw new Error(`${name} is running`)
        const p = start(name, spec.command, spec.args, spec.env)
        const recorded = env.processes.find((r) => r.name === name)
        if (recorded) recorded.pid = p.pid
        await ready(p)
      },
    }
    restartable.set(env, { reaper, commands })
    if (opts.detached) await reaper.release()
    else owned.set(env, reaper)
    log(`environment up in ${elapsed()} (${dir})`)
    return env
  } catch (err) {
    await reaper.reap()
    throw err
  }
}

/**
 * Stops every process of the environment (SIGTERM, SIGKILL after the grace period) and removes its directory.
 * Works for an environment this process started and for one described by its env.json (e.g. from `env:up`).
 */
export async function stopEnvironment(
  env: Pick<EnvironmentInfo, 'dir' | 'processes'>,
  graceSeconds = DEFAULT_STOP_GRACE_SECONDS,
): Promise<void> {
  const reaper = owned.get(env)
  if (reaper) {
    owned.delete(env)
    await reaper.reap()
    return
  }
  const pids = env.processes.filter((p) => belongsTo(p.pid, env.dir)).map((p) => p.pid)
  // A node's cleanup script undoes what it did outside the directory (mounts, cgroups, network, sysctls).
  const cleanup = join(env.dir, 'node', 'cleanup.sh')
  await reapGroups(pids, [env.dir], graceSeconds, existsSync(cleanup) ? [cleanup] : [])
  // Servers of a detached environment were re-parented to init when their starter exited; give init a moment to
  // reap them so they do not even linger as zombies (harmless, but they show up in `pgrep`).
  await waitFor('init to reap the stopped servers', () => pids.every((pid) => !existsSync(`/proc/${pid}`)), {
    timeoutMs: 10_000,
  }).catch(() => {})
}

/** True when pid is alive and is one of this environment's servers (guards against pid reuse). */
export function belongsTo(pid: number, dir: string): boolean {
  return cmdline(pid)?.includes(dir) ?? false
}

/** Reads `<dir>/env.json` of an environment, or undefined when there is none. */
export async function readEnvironmentInfo(dir: string): Promise<EnvironmentInfo | undefined> {
  try {
    return JSON.parse(await readFile(join(resolve(dir), 'env.json'), 'utf8')) as EnvironmentInfo
  } catch {
    return undefined
  }
}

async function adminTls(pki: Pki) {
  const [ca, cert, key] = await Promise.all([readFile(pki.caCert), readFile(pki.adminCert), readFile(pki.adminKey)])
  return { ca, cert, key }
}

async function checkNatsServerVersion(natsServer: string): Promise<string> {
  const r = await runOk(natsServer, ['--version'])
  const m = /v?(\d+)\.(\d+)\.(\d+)/.exec(r.stdout + r.stderr)
  if (!m) throw new Error(`cannot parse the nats-server version from: ${r.stdout}${r.stderr}`)
  const version = [Number(m[1]), Number(m[2]), Number(m[3])]
  const [wantMajor, wantMinor] = MIN_NATS_SERVER_VERSION
  const [major = 0, minor = 0] = version
  if (major < wantMajor || (major === wantMajor && minor < wantMinor)) {
    throw new Error(
      `nats-server ${version.join('.')} at ${natsServer} is too old: JetStream message schedules need ≥ ${MIN_NATS_SERVER_VERSION.join('.')}`,
    )
  }
  return `v${version.join('.')}`
}

async function applyCrds(kubectl: string, kubeconfig: string, crdsDir: string, dir: string): Promise<string[]> {
  let files: string[]
  try {
    files = (await readdir(crdsDir)).filter((f) => /\.ya?ml$/.test(f)).sort()
  } catch {
    return []
  }
  if (files.length === 0) return []
  const base = ['--kubeconfig', kubeconfig, '--cache-dir', join(dir, 'kubectl-cache')]
  const applied = await run(kubectl, [
    ...base,
    'apply',
    '--server-side',
    '--force-conflicts',
    '--field-manager=modelbackfill-test-env',
    '-o',
    'name',
    ...files.flatMap((f) => ['-f', join(crdsDir, f)]),
  ])
  if (applied.code !== 0) throw new Error(`kubectl apply of ${crdsDir}/*.yaml failed:\n${applied.stderr}`)
  const names = applied.stdout
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.startsWith('customresourcedefinition'))
  if (names.length > 0) {
    await runOk(kubectl, [...base, 'wait', '--for=condition=Established', '--timeout=60s', ...names])
  }
  return names.map((n) => n.slice(n.indexOf('/') + 1))
}

function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`
}
