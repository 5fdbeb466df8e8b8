// A real node for the test environment (startEnvironment({ node: true }), `npm run env:up -- --node`): containerd
// with runc, a kubelet registered against the environment's apiserver, kube-scheduler, kube-proxy and CoreDNS, so
// pods run real containers. Everything it makes on the machine is named after the environment and undone by one
// script, <dir>/node/cleanup.sh, which the reaper runs after the processes are stopped (env.stop(), env:down, or
// the test run being killed):
//   processes     containerd's shims and every process in the node's cgroups (containers outlive containerd)
//   mounts        everything mounted under <dir> (rootfs overlays, pod volumes, network namespaces)
//   cgroups       /sys/fs/cgroup/*/<cgroupRoot>, the kubelet's cgroupRoot (never the machine's /kubepods)
//   network       the bridge, this environment's iptables rules, kube-proxy's rules, CNI's result cache
//   sysctls       the kernel settings the kubelet and the bridge plugin change, put back as they were
//   files         /var/log/containers links into <dir>, containerd's shim sockets under /run/containerd/s
// Network: pods live on a bridge of their own (a /24 of 10.244.0.0/16 no route on the machine uses) whose address
// is the host's side; no NAT is set up (ipMasq off) and forwarding between the bridge and any other interface is
// dropped, so pod traffic stays between the pods and this machine. CoreDNS listens on the bridge address.
// kube-proxy's rules are host-wide (KUBE-* chains), so one node runs per machine at a time (a lock, below).
import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { mkdir, readdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { stringify } from 'yaml'
import { type Binaries, cacheDir, repoRoot } from './binaries.js'
import { run, runOk, waitFor } from './exec.js'
import { forwarderCommand } from './forwarder.js'
import { freePorts, httpGet, LOOPBACK } from './net.js'
import { issue, leaf, type Pki, writeKubeconfig } from './pki.js'
import type { Reaper, ServerProcess } from './supervisor.js'
import { whileRunning } from './supervisor.js'

export const NODE_NAME = 'mbf-node'
export const CLUSTER_DOMAIN = 'cluster.local'
/** containerd's namespace for Kubernetes (the CRI plugin's), where images are imported. */
export const K8S_NAMESPACE = 'k8s.io'
/** The machine's packages the node runs (Debian: containerd runc containernetworking-plugins iptables). */
export const CONTAINERD = '/usr/bin/containerd'
export const CTR = '/usr/bin/ctr'
export const RUNC = '/usr/sbin/runc'
export const CNI_BIN_DIR = '/usr/lib/cni'
/** One node per machine: kube-proxy's chains are host-wide. Held by kube-proxy's flock wrapper while it runs. */
export const NODE_LOCK = '/run/lock/modelbackfill-node.lock'
/** The cgroup v1 controllers (and the unified hierarchy of a hybrid layout) the cgroupRoot is made in. */
const CGROUP_FS = '/sys/fs/cgroup'
/** Kernel settings the kubelet (setupKernelTunables) and the CNI bridge plugin (ip_forward) change. */
export const TOUCHED_SYSCTLS = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
  'net/ipv4/ip_forward',
]

export interface NodeImages {
  pause: { ref: string; archive: string }
  busybox: { ref: string; archive: string }
  /** nats-server and the nats CLI on busybox (deploy/images/build.sh, once the test servers are built). */
  nats: { ref: string; archive: string } | null
  /** The project's image (deploy/images/build.sh --app), when built. */
  app: { ref: string; archive: string; from: string } | null
}

export interface NodeInfo {
  name: string
  /** The pods' /24 (the CNI bridge's subnet). */
  podCidr: string
  /** The bridge's address: the host's side of the pod network, the node's InternalIP, and where DNS answers. */
  hostIp: string
  bridge: string
  /** The kubelet's cgroupRoot (under every hierarchy of /sys/fs/cgroup). */
  cgroupRoot: string
  containerdAddress: string
  kubeletRootDir: string
  /** Where the kubelet writes container logs (<namespace>_<pod>_<uid>/<container>/<n>.log, CRI format). */
  podLogsDir: string
  cleanupScript: string
  images: NodeImages
}

export interface NodeContext {
  dir: string
  pki: Pki
  apiserverUrl: string
  adminKubeconfig: string
  binaries: Binaries
  reaper: Reaper
  start: (name: string, command: string, args: string[]) => ServerProcess
  log: (line: string) => void
  elapsed: () => string
  /** Also import the project's image, when deploy/images/build.sh --app has made it. */
  appImage?: boolean
  /** The pod network (planNodeNetwork), chosen before the apiserver starts: it advertises the host's address on it. */
  network: NodeNetwork
  /** The apiserver's port on loopback: pods reach it through the kubernetes Service (below, the forwarder). */
  apiserverPort: number
}

/** The node's pod network, fixed before anything starts. */
export interface NodeNetwork {
  id: string
  podCidr: string
  hostIp: string
}

/**
 * The pod network of an environment in `dir`: a /24 of 10.244.0.0/16 no route of the machine uses. Known before the
 * apiserver starts, which advertises the bridge address as the kubernetes Service's endpoint: pods reach the
 * apiserver there (through a forwarder to its loopback port), not on loopback, which a pod's packets cannot reach.
 */
export async function planNodeNetwork(dir: string): Promise<NodeNetwork> {
  const id = createHash('sha256').update(dir).digest('hex').slice(0, 8)
  const third = await choosePodCidr(id)
  return { id, podCidr: `10.244.${third}.0/24`, hostIp: `10.244.${third}.1` }
}

function ctr(address: string, args: string[]) {
  return runOk(CTR, ['--address', address, '--namespace', K8S_NAMESPACE, ...args], { timeoutMs: 120_000 })
}

/** Imports docker-archives (deploy/images/build.sh) into the node's containerd, where the kubelet finds them. */
export async function importImages(containerdAddress: string, archives: string[]): Promise<void> {
  for (const archive of archives) await ctr(containerdAddress, ['images', 'import', '--no-unpack', archive])
}

/** Certificates the apiserver needs for a node (created before the apiserver starts). */
export async function nodeApiserverPki(pki: Pki): Promise<{ kubeletClientCert: string; kubeletClientKey: string }> {
  const c = await issue(pki.dir, 'apiserver-kubelet-client', '/CN=kube-apiserver-kubelet-client', leaf('clientAuth'), {
    cert: pki.caCert,
    key: pki.caKey,
  })
  return { kubeletClientCert: c.cert, kubeletClientKey: c.key }
}

/** Why this machine cannot run the node, or undefined when it can. */
export function nodeUnavailableReason(): string | undefined {
  if (process.getuid?.() !== 0) return 'the node needs root (containerd, cgroups, network namespaces, iptables)'
  const missing = [CONTAINERD, CTR, RUNC, join(CNI_BIN_DIR, 'bridge'), join(CNI_BIN_DIR, 'host-local')]
    .concat(['/usr/sbin/iptables', '/usr/bin/flock', '/usr/sbin/ip', '/usr/sbin/conntrack'])
    .filter((p) => !existsSync(p))
  if (missing.length > 0) {
    return `missing ${missing.join(', ')} (apt-get install containerd runc containernetworking-plugins iptables conntrack, as .ci/run does)`
  }
  if (!existsSync(join(CGROUP_FS, 'cpu')) && !existsSync(join(CGROUP_FS, 'cgroup.controllers'))) {
    return `no cgroup hierarchy under ${CGROUP_FS}`
  }
  return undefined
}

/** The images' manifest (deploy/images/build.sh), made first when missing (pause and busybox take seconds). */
export async function ensureNodeImages(opts: { app?: boolean; nats?: boolean } = {}): Promise<NodeImages> {
  const path = join(cacheDir(), 'images', 'images.json')
  const read = (): NodeImages | undefined => {
    try {
      const m = JSON.parse(readFileSync(path, 'utf8')) as NodeImages
      const files = [
        m.pause.archive,
        m.busybox.archive,
        ...(opts.app ? [m.app?.archive ?? ''] : []),
        ...(opts.nats ? [m.nats?.archive ?? ''] : []),
      ]
      return files.every((f) => f && existsSync(f)) ? m : undefined
    } catch {
      return undefined
    }
  }
  const cached = read()
  // The app image is keyed by its inputs: deploy/images/build.sh decides whether the cached one is current.
  if (cached && !opts.app) return cached
  const r = await run('bash', [join(repoRoot, 'deploy/images/build.sh'), ...(opts.app ? ['--app'] : [])], {
    timeoutMs: 30 * 60_000,
  })
  const made = read()
  if (r.code !== 0 || !made)
    throw new Error(`deploy/images/build.sh failed (exit ${r.code}):\n${r.stderr.slice(-3000)}`)
  return made
}

/** A /24 of 10.244.0.0/16 that no route of this machine overlaps, chosen from the environment's id. */
async function choosePodCidr(id: string): Promise<number> {
  const routes = (await runOk('ip', ['-4', 'route', 'show'])).stdout
  const used = new Set([...routes.matchAll(/\b10\.244\.(\d+)\./g)].map((m) => Number(m[1])))
  const start = Number.parseInt(id.slice(0, 4), 16) % 254
  for (let i = 0; i < 254; i++) {
    const third = ((start + i) % 254) + 1
    if (!used.has(third)) return third
  }
  throw new Error('no free /24 in 10.244.0.0/16 for the pod network')
}

function sysctlPath(key: string): string {
  return join('/proc/sys', key)
}

/** The script that undoes everything the node did on this machine; idempotent, safe to run at any point. */
function cleanupScript(v: {
  dir: string
  id: string
  cgroupRoot: string
  bridge: string
  network: string
  containerdAddress: string
  stateDir: string
  kubeProxy: string
  sysctls: [string, string][]
}): string {
  const q = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`
  return `#!/usr/bin/env bash
# Undoes what the test environment's node (test/env/node.ts) did on this machine. Idempotent; run by the reaper
# after the node's processes were stopped, and safe to run again.
dir=${q(v.dir)}
cgroup_root=${q(v.cgroupRoot)}
bridge=${q(v.bridge)}
comment=${q(`modelbackfill-node-${v.id}`)}
address=${q(v.containerdAddress)}
tasks=${q(join(v.stateDir, 'io.containerd.runtime.v2.task', K8S_NAMESPACE))}
sandboxes=${q(join(v.stateDir, 'io.containerd.grpc.v1.cri', 'sandboxes'))}
network=${q(v.network)}

# containerd's shims (a session of their own, so the process-group kill missed them), then every process left in
# the node's cgroups: the containers.
for p in /proc/[0-9]*; do
  cmd=$(tr '\\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
  case $cmd in *containerd-shim*"$address"*) kill -KILL "\${p#/proc/}" 2>/dev/null ;; esac
done
for i in $(seq 50); do
  procs=$(find ${CGROUP_FS}/*/"$cgroup_root" -name cgroup.procs -exec cat {} + 2>/dev/null)
  [ -z "$procs" ] && break
  kill -KILL $procs 2>/dev/null
  sleep 0.1
done

# A killed shim leaves its socket: /run/containerd/s/<sha256 of address/namespace/id> (containerd 1.6).
if [ -d "$tasks" ]; then
  for t in "$tasks"/*; do
    [ -e "$t" ] || continue
    h=$(printf '%s' "$address/${K8S_NAMESPACE}/\${t##*/}" | sha256sum | cut -d' ' -f1)
    rm -f "/run/containerd/s/$h"
  done
fi
rmdir /run/containerd/s /run/containerd 2>/dev/null

# Mounts under the environment (network namespaces, rootfs overlays, pod volumes), deepest first.
for i in 1 2 3; do
  mounts=$(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  [ -z "$mounts" ] && break
  for m in $mounts; do umount -l "$m" 2>/dev/null; done
done

for c in ${CGROUP_FS}/*/"$cgroup_root"; do
  [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
done

ip link del "$bridge" 2>/dev/null
for table in filter nat; do
  iptables-save -t "$table" 2>/dev/null | grep -F -- "--comment $comment" | sed 's/^-A /-D /' |
    while read -r rule; do iptables -t "$table" $rule 2>/dev/null; done
done
# The KUBE-* chains of kube-proxy and the kubelet (KUBE-FIREWALL, canaries), unless another environment's node
# (holding the lock) is using them.
kube_chains() {
  local cmd=$1 table
  for table in filter nat mangle; do
    "$cmd-save" -t "$table" 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | sed 's/^-A /-D /' |
      while read -r rule; do eval "$cmd -t $table $rule" 2>/dev/null; done
    for chain in $("$cmd-save" -t "$table" 2>/dev/null | awk -F'[: ]' '/^:KUBE-/ { print $2 }'); do
      "$cmd" -t "$table" -F "$chain" 2>/dev/null
    done
    for chain in $("$cmd-save" -t "$table" 2>/dev/null | awk -F'[: ]' '/^:KUBE-/ { print $2 }'); do
      "$cmd" -t "$table" -X "$chain" 2>/dev/null
    done
  done
}
export -f kube_chains
export kube_proxy=${q(v.kubeProxy)}
flock -n ${q(NODE_LOCK)} bash -c '"$kube_proxy" --cleanup >/dev/null 2>&1; kube_chains iptables; kube_chains ip6tables'
# libcni's result cache of each pod sandbox (its own network and the loopback containerd adds).
for s in "$sandboxes"/* "$tasks"/*; do
  [ -e "$s" ] && rm -f "/var/lib/cni/results/$network-\${s##*/}-"* "/var/lib/cni/results/cni-loopback-\${s##*/}-"*
done
rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null
find /var/log/containers -maxdepth 1 -lname "$dir/*" -delete 2>/dev/null
rmdir /var/log/containers 2>/dev/null

# Kernel settings as they were before the node started.
${v.sysctls.map(([key, value]) => `echo ${q(value)} >${q(sysctlPath(key))} 2>/dev/null`).join('\n')}
exit 0
`
}

function containerdConfig(v: { root: string; state: string; address: string; cniConfDir: string; pause: string }) {
  // TOML by hand: the few values are paths and names; JSON string quoting is valid TOML basic-string quoting.
  const s = JSON.stringify
  return `version = 2
root = ${s(v.root)}
state = ${s(v.state)}
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing"]

[grpc]
  address = ${s(v.address)}

[ttrpc]
  address = ${s(`${v.address}.ttrpc`)}

[plugins."io.containerd.internal.v1.opt"]
  path = ${s(join(v.root, 'opt'))}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ${s(v.pause)}
  # Pods' network namespaces under the state directory, not the machine's /var/run/netns.
  netns_mounts_under_state_dir = true
  # This machine's root lacks CAP_SYS_RESOURCE (as in a container or a restricted VM): lowering oom_score_adj below
  # containerd's own fails runc's start ("failed to update /proc/self/oom_score_adj: Permission denied"), so the
  # kubelet's -998 for sandboxes and Guaranteed pods is clamped to containerd's value.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = ${s(RUNC)}
        Root = ${s(join(v.state, 'runc'))}
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = ${s(CNI_BIN_DIR)}
    conf_dir = ${s(v.cniConfDir)}
    max_conf_num = 1
`
}

/** Starts the node's components in the environment; the apiserver and controller manager are up. */
export async function startNode(ctx: NodeContext): Promise<NodeInfo> {
  const why = nodeUnavailableReason()
  if (why) throw new Error(`cannot start the node: ${why}`)
  const { dir, pki, binaries, log, elapsed } = ctx
  const { id, podCidr, hostIp } = ctx.network
  const nodeDir = join(dir, 'node')
  const cgroupRoot = `modelbackfill-${id}`
  const bridge = `mbf${id.slice(0, 8)}`
  const network = `mbf-${id}`
  const containerdDir = join(nodeDir, 'containerd')
  const containerdAddress = join(containerdDir, 'containerd.sock')
  const stateDir = join(containerdDir, 'state')
  const kubeletRootDir = join(nodeDir, 'kubelet')
  const podLogsDir = join(nodeDir, 'pod-logs')
  const cniConfDir = join(nodeDir, 'cni', 'net.d')
  const cleanupPath = join(nodeDir, 'cleanup.sh')
  const images = await ensureNodeImages()
  await Promise.all(
    [containerdDir, kubeletRootDir, podLogsDir, cniConfDir, join(nodeDir, 'cni', 'ipam')].map((d) =>
      mkdir(d, { recursive: true }),
    ),
  )

  // The way back first: from here on, whatever happens, the reaper undoes it.
  const sysctls = TOUCHED_SYSCTLS.map((k): [string, string] => [k, readFileSync(sysctlPath(k), 'utf8').trim()])
  await writeFile(
    cleanupPath,
    cleanupScript({
      dir,
      id,
      cgroupRoot,
      bridge,
      network,
      containerdAddress,
      stateDir,
      kubeProxy: binaries.kubeProxy,
      sysctls,
    }),
    { mode: 0o700 },
  )
  ctx.reaper.runScript(cleanupPath)

  // cgroups: the kubelet's root in every hierarchy (cpuset needs its cpus and mems before tasks can join).
  for (const h of await readdir(CGROUP_FS)) {
    const path = join(CGROUP_FS, h, cgroupRoot)
    if (!existsSync(join(CGROUP_FS, h, 'cgroup.procs'))) continue
    await mkdir(path, { recursive: true })
    if (h === 'cpuset') {
      for (const f of ['cpuset.cpus', 'cpuset.mems']) {
        await writeFile(join(path, f), readFileSync(join(CGROUP_FS, h, f), 'utf8').trim())
      }
    }
  }

  // The pod network: the bridge with the host's address, no NAT, no forwarding off it.
  await runOk('ip', ['link', 'add', 'name', bridge, 'type', 'bridge'])
  await runOk('ip', ['addr', 'add', `${hostIp}/24`, 'dev', bridge])
  await runOk('ip', ['link', 'set', bridge, 'up'])
  const comment = ['-m', 'comment', '--comment', `modelbackfill-node-${id}`]
  await runOk('iptables', ['-I', 'FORWARD', '1', '-i', bridge, '!', '-o', bridge, ...comment, '-j', 'DROP'])
  await runOk('iptables', ['-I', 'FORWARD', '1', '-o', bridge, '!', '-i', bridge, ...comment, '-j', 'DROP'])
  // The kubernetes Service's endpoint (the bridge address, on the apiserver's port) to the apiserver on loopback: TLS
  // stays end to end (the serving certificate names 10.0.0.1).
  const forwarder = ctx.start('apiserver-forwarder', ...forwarderCommand(hostIp, ctx.apiserverPort, LOOPBACK))
  await writeFile(
    join(cniConfDir, '10-modelbackfill.conflist'),
    `${JSON.stringify(
      {
        cniVersion: '1.0.0',
        name: network,
        plugins: [
          {
            type: 'bridge',
            bridge,
            isGateway: true,
            isDefaultGateway: true,
            ipMasq: false,
            hairpinMode: true,
            ipam: {
              type: 'host-local',
              ranges: [[{ subnet: podCidr, gateway: hostIp }]],
              dataDir: join(nodeDir, 'cni', 'ipam'),
            },
          },
        ],
      },
      null,
      2,
    )}\n`,
  )

  // containerd, then the images the pods use (imported into its k8s.io namespace).
  const containerdConfigPath = join(containerdDir, 'config.toml')
  await writeFile(
    containerdConfigPath,
    containerdConfig({
      root: join(containerdDir, 'root'),
      state: stateDir,
      address: containerdAddress,
      cniConfDir,
      pause: images.pause.ref,
    }),
  )
  const containerd = ctx.start('containerd', CONTAINERD, ['--config', containerdConfigPath])
  await whileRunning(
    containerd,
    waitFor('containerd', async () => (await ctr(containerdAddress, ['version'])).code === 0, {
      timeoutMs: 30_000,
      intervalMs: 100,
    }),
  )
  // The project's image (~250 MB) only when asked: importing it takes seconds most tests do not need.
  const archives = [
    images.pause.archive,
    images.busybox.archive,
    ...(ctx.appImage && images.app ? [images.app.archive] : []),
  ]
  await importImages(containerdAddress, archives)
  log(`containerd ready, ${archives.length} images imported (${elapsed()})`)

  // Identities: the kubelet (a Node), kube-proxy, kube-scheduler and CoreDNS, each with its own certificate.
  const ca = { cert: pki.caCert, key: pki.caKey }
  const [kubeletClient, kubeletServing, proxyClient, schedulerClient, dnsClient] = await Promise.all([
    issue(pki.dir, 'kubelet', `/O=system:nodes/CN=system:node:${NODE_NAME}`, leaf('clientAuth'), ca),
    issue(
      pki.dir,
      'kubelet-serving',
      `/CN=${NODE_NAME}`,
      leaf('serverAuth', `subjectAltName = IP:${hostIp},DNS:${NODE_NAME}\n`),
      ca,
    ),
    issue(pki.dir, 'kube-proxy', '/CN=system:kube-proxy', leaf('clientAuth'), ca),
    issue(pki.dir, 'kube-scheduler', '/CN=system:kube-scheduler', leaf('clientAuth'), ca),
    issue(pki.dir, 'coredns', '/CN=system:coredns', leaf('clientAuth'), ca),
  ])
  const kubeconfig = async (name: string, c: { cert: string; key: string }, user: string) => {
    const path = join(nodeDir, `${name}.kubeconfig`)
    await writeKubeconfig(path, {
      server: ctx.apiserverUrl,
      caCert: pki.caCert,
      clientCert: c.cert,
      clientKey: c.key,
      user,
    })
    return path
  }
  const [kubeletKc, proxyKc, schedulerKc, dnsKc] = await Promise.all([
    kubeconfig('kubelet', kubeletClient, `system:node:${NODE_NAME}`),
    kubeconfig('kube-proxy', proxyClient, 'system:kube-proxy'),
    kubeconfig('kube-scheduler', schedulerClient, 'system:kube-scheduler'),
    kubeconfig('coredns', dnsClient, 'system:coredns'),
  ])
  // What the built-in roles do not cover: the apiserver's calls to the kubelet (logs, exec) and CoreDNS's reads.
  await runOk(
    binaries.kubectl,
    [
      '--kubeconfig',
      ctx.adminKubeconfig,
      'apply',
      '--server-side',
      '--field-manager=modelbackfill-test-env',
      '-f',
      '-',
    ],
    {
      input: NODE_RBAC,
    },
  )

  const [kubeletPort, kubeletHealthz, schedulerPort, proxyHealthz, proxyMetrics, dnsHealth, dnsReady] =
    await freePorts(7)
  const kubeletConfigPath = join(nodeDir, 'kubelet.yaml')
  const resolvConf = join(nodeDir, 'resolv.conf')
  await writeFile(resolvConf, `nameserver ${hostIp}\n`)
  await writeFile(
    kubeletConfigPath,
    stringify({
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      address: hostIp,
      port: kubeletPort,
      readOnlyPort: 0,
      healthzBindAddress: LOOPBACK,
      healthzPort: kubeletHealthz,
      tlsCertFile: kubeletServing.cert,
      tlsPrivateKeyFile: kubeletServing.key,
      authentication: {
        anonymous: { enabled: false },
        webhook: { enabled: false },
        x509: { clientCAFile: pki.caCert },
      },
      authorization: { mode: 'Webhook' },
      cgroupDriver: 'cgroupfs',
      cgroupRoot: `/${cgroupRoot}`,
      containerRuntimeEndpoint: `unix://${containerdAddress}`,
      failSwapOn: false,
      // Its default -999 needs CAP_SYS_RESOURCE (see restrict_oom_score_adj in containerd's configuration).
      oomScoreAdj: 0,
      clusterDNS: [hostIp],
      clusterDomain: CLUSTER_DOMAIN,
      resolvConf,
      podLogsDir,
      volumePluginDir: join(nodeDir, 'volume-plugins'),
      staticPodPath: '',
      // The machine's disk is shared: no image garbage collection or eviction of our few pods because of it.
      imageGCHighThresholdPercent: 100,
      evictionHard: { 'memory.available': '100Mi', 'nodefs.available': '1%', 'imagefs.available': '1%' },
      // Quick pod status after a container stops (the preemption test reads it).
      syncFrequency: '10s',
      nodeStatusUpdateFrequency: '5s',
      serializeImagePulls: false,
      registerNode: true,
      maxPods: 30,
    }),
  )
  const kubelet = ctx.start('kubelet', binaries.kubelet, [
    `--config=${kubeletConfigPath}`,
    `--kubeconfig=${kubeletKc}`,
    `--root-dir=${kubeletRootDir}`,
    `--cert-dir=${join(kubeletRootDir, 'pki')}`,
    `--hostname-override=${NODE_NAME}`,
    `--node-ip=${hostIp}`,
    '--v=1',
  ])
  const scheduler = ctx.start('kube-scheduler', binaries.kubeScheduler, [
    `--kubeconfig=${schedulerKc}`,
    `--authentication-kubeconfig=${schedulerKc}`,
    `--authorization-kubeconfig=${schedulerKc}`,
    `--bind-address=${LOOPBACK}`,
    `--secure-port=${schedulerPort}`,
    `--cert-dir=${join(nodeDir, 'kube-scheduler')}`,
    '--leader-elect=false',
  ])
  const proxyConfigPath = join(nodeDir, 'kube-proxy.yaml')
  await writeFile(
    proxyConfigPath,
    stringify({
      apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
      kind: 'KubeProxyConfiguration',
      clientConnection: { kubeconfig: proxyKc },
      hostnameOverride: NODE_NAME,
      oomScoreAdj: 0,
      mode: 'iptables',
      clusterCIDR: podCidr,
      healthzBindAddress: `${LOOPBACK}:${proxyHealthz}`,
      metricsBindAddress: `${LOOPBACK}:${proxyMetrics}`,
      nodePortAddresses: [`${hostIp}/32`],
      // Leave the machine's conntrack and localnet settings alone.
      conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
      iptables: { localhostNodePorts: false, masqueradeAll: false },
    }),
  )
  // flock -n: a second node on this machine fails here, with this message, instead of fighting over KUBE-* chains.
  const proxy = ctx.start('kube-proxy', '/usr/bin/flock', [
    '-n',
    '-E',
    '75',
    NODE_LOCK,
    binaries.kubeProxy,
    `--config=${proxyConfigPath}`,
  ])
  const corefile = join(nodeDir, 'Corefile')
  await writeFile(
    corefile,
    `.:53 {
    bind ${hostIp}
    errors
    health ${LOOPBACK}:${dnsHealth}
    ready ${LOOPBACK}:${dnsReady}
    kubernetes ${CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {
        kubeconfig ${dnsKc} system:coredns
        pods insecure
    }
    cache 5
    loadbalance
}
`,
  )
  const dns = ctx.start('coredns', binaries.coredns, ['-conf', corefile])

  const adminTls = {
    ca: readFileSync(pki.caCert),
    cert: readFileSync(pki.adminCert),
    key: readFileSync(pki.adminKey),
  }
  const nodeReady = waitFor(
    `Node ${NODE_NAME} Ready`,
    async () => {
      const r = await httpGet(`${ctx.apiserverUrl}/api/v1/nodes/${NODE_NAME}`, adminTls)
      if (r.status !== 200) throw new Error(`GET node ${r.status}`)
      const node = JSON.parse(r.body) as {
        status?: { conditions?: { type: string; status: string; message?: string }[] }
      }
      const ready = node.status?.conditions?.find((c) => c.type === 'Ready')
      if (ready?.status !== 'True') throw new Error(`Ready=${ready?.status}: ${ready?.message}`)
      return true
    },
    { timeoutMs: 90_000, intervalMs: 250 },
  )
  const proxyReady = waitFor(
    'kube-proxy /healthz',
    async () => (await httpGet(`http://${LOOPBACK}:${proxyHealthz}/healthz`)).status === 200,
    { timeoutMs: 60_000, intervalMs: 250 },
  )
  const schedulerReady = waitFor(
    'kube-scheduler /healthz',
    async () => (await httpGet(`https://${LOOPBACK}:${schedulerPort}/healthz`, { insecure: true })).status === 200,
    { timeoutMs: 60_000, intervalMs: 250 },
  )
  const dnsUp = waitFor(
    'CoreDNS /ready',
    async () => (await httpGet(`http://${LOOPBACK}:${dnsReady}/ready`)).status === 200,
    { timeoutMs: 60_000, intervalMs: 250 },
  )
  const forwarding = waitFor(
    'the apiserver forwarder',
    async () =>
      (await httpGet(`https://${hostIp}:${ctx.apiserverPort}/readyz`, { ...adminTls, insecure: true })).status === 200,
    { timeoutMs: 30_000, intervalMs: 100 },
  )
  await Promise.all([
    whileRunning(forwarder, forwarding),
    whileRunning(kubelet, nodeReady),
    whileRunning(proxy, proxyReady),
    whileRunning(scheduler, schedulerReady),
    whileRunning(dns, dnsUp),
  ])
  log(
    `node ${NODE_NAME} Ready: kubelet, kube-scheduler, kube-proxy, CoreDNS on ${hostIp}, pods ${podCidr} (${elapsed()})`,
  )
  return {
    name: NODE_NAME,
    podCidr,
    hostIp,
    bridge,
    cgroupRoot,
    containerdAddress,
    kubeletRootDir,
    podLogsDir,
    cleanupScript: cleanupPath,
    images,
  }
}

/** RBAC the built-in roles lack for the node's components (applied once the apiserver is up). */
const NODE_RBAC = stringify({
  apiVersion: 'v1',
  kind: 'List',
  items: [
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'modelbackfill-test-env:apiserver-kubelet-client' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:kubelet-api-admin' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'kube-apiserver-kubelet-client' }],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'modelbackfill-test-env:coredns' },
      rules: [
        { apiGroups: [''], resources: ['services', 'pods', 'namespaces'], verbs: ['list', 'watch'] },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'watch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'modelbackfill-test-env:coredns' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'modelbackfill-test-env:coredns' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'system:coredns' }],
    },
  ],
})

/**
 * What a node can leave on this machine outside its directory (the things cleanup.sh undoes), as comparable lists:
 * equal before a node starts and after it is gone means nothing was left behind.
 */
export interface Footprint {
  cgroups: string[]
  links: string[]
  iptables: string[]
  mounts: string[]
  processes: string[]
  files: string[]
  sysctls: string[]
}

export async function machineFootprint(): Promise<Footprint> {
  const lines = async (cmd: string, args: string[]) =>
    (await run(cmd, args)).stdout.split('\n').filter((l) => l && !l.startsWith('#'))
  const ls = async (dir: string) => (await readdir(dir).catch(() => [] as string[])).map((f) => join(dir, f))
  const cgroups: string[] = []
  for (const h of await readdir(CGROUP_FS).catch(() => [] as string[])) {
    for (const d of await ls(join(CGROUP_FS, h))) if (/\/(modelbackfill-|kubepods)/.test(d)) cgroups.push(d)
  }
  const rules = async (cmd: string) =>
    (await lines(cmd, [])).filter((l) => /KUBE-|modelbackfill/.test(l)).map((l) => `${cmd}: ${l}`)
  const processes = [] as string[]
  for (const pid of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(pid)) continue
    let cmd = ''
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ')
    } catch {
      continue
    }
    if (/containerd-shim|\/pause\b/.test(cmd)) processes.push(cmd.trim())
  }
  return {
    cgroups: cgroups.sort(),
    links: (await lines('ip', ['-o', 'link', 'show']))
      .map((l) => l.split(':')[1]?.trim().split('@')[0] ?? '')
      .filter((n) => /^(mbf|veth|cni)/.test(n))
      .sort(),
    iptables: [...(await rules('iptables-save')), ...(await rules('ip6tables-save'))],
    mounts: readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' ')[4] ?? '')
      .filter((m) => /modelbackfill-env-|\/run\/containerd|\/var\/lib\/kubelet|\/run\/netns\/cni-/.test(m))
      .sort(),
    processes: processes.sort(),
    files: [
      ...(await ls('/run/containerd/s')),
      ...(await ls('/var/log/containers')),
      ...(await ls('/var/log/pods')),
      ...(await ls('/var/lib/cni/results')),
      ...(await ls('/var/lib/cni/networks')),
    ].sort(),
    sysctls: TOUCHED_SYSCTLS.map((k) => `${k}=${readFileSync(sysctlPath(k), 'utf8').trim()}`),
  }
}
