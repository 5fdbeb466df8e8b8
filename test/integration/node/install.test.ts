// The documented install from a release (docs/install.md "Install from a release"), executed onto the real node as a
// platform team runs it: `npm run release` for real (the image step included: deploy/images/build.sh --app, saved as
// an OCI archive), the archive imported into the node's containerd by its digest (what a registry push and pull do),
// FlexInfer's CRDs and KEDA's present (KEDA's operator is the real binary, as a process beside the apiserver), NATS a
// nats-server pod (deploy/images/build.sh's nats image) that mounts the generated auth Secret and includes it
// (nats-server.yaml). Proven per way in, in the same namespace one after the other:
//   - the bundle: `model-backfill-secrets --out DIR`, `kubectl apply --server-side -f model-backfill.yaml`, the
//     generated Secrets by `kubectl apply -k`; the image by digest;
//   - the packaged chart: `helm install <tgz>` with the generated values and a values file using ingress.enabled=false,
//     extraEnv, nodeSelector, tolerations, podLabels (rendered into the pods; no ingress; admission still works);
//   - either way the provision Job completes, every always-on function is Ready, KEDA keeps admit and lifecycle at
//     zero when idle and scales admit up; a ModelBackfill goes Running (a busybox Job's container runs) and is
//     preempted: a gateway pod (the nats CLI with the generated gateway Secret) publishes a foreground request, the
//     Job's container gets SIGTERM;
//   - the plugin from its npm tarball on a clean HOME and npm prefix: `kubectl-mbf get` shows that ModelBackfill;
//   - the operator identity reads the state from outside the cluster (the nats context the secrets command wrote).
// Slow (a release and two installs): `npm run test:install` (MBF_INSTALL_TEST=1); skipped otherwise.
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { V1Pod } from '@kubernetes/client-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAllDocuments, stringify } from 'yaml'
import { repoRoot } from '../../env/binaries.js'
import { run, runOk, waitFor } from '../../env/exec.js'
import { CTR, ensureNodeImages, K8S_NAMESPACE, type NodeImages, nodeUnavailableReason } from '../../env/node.js'
import type { Manifest } from '../support/deploy.js'
import { gatewayPod, type InstallCluster, startInstallCluster } from './install-cluster.js'
import { containerLog } from './node-support.js'

const unavailable =
  nodeUnavailableReason() ?? (process.env.MBF_INSTALL_TEST ? undefined : 'slow: npm run test:install runs it')
const NS = 'model-backfill'
const GRACE_SECONDS = 30

const REPOSITORY = 'ghcr.io/flexinfer/model-backfill'
/** The workloads' name prefix: the bundle's, or the chart's for the release name the docs use (mbf). */
let workloads = 'model-backfill'

let c: InstallCluster
let images: NodeImages
/** `npm run release`'s folder, and the image digest it recorded. */
let release = ''
let digest = ''
let version = ''
const kubectl: InstallCluster['kubectl'] = (...a) => c.kubectl(...a)
const kubectlOk: InstallCluster['kubectlOk'] = (...a) => c.kubectlOk(...a)
const apply: InstallCluster['apply'] = (m) => c.apply(m)
const jsonOf: InstallCluster['jsonOf'] = (a) => c.jsonOf(a)

beforeAll(async () => {
  if (unavailable) return
  images = await ensureNodeImages({ nats: true })
  // A cluster with FlexInfer's kinds only (its CRDs, as FlexInfer installs them): ModelBackfill's is the release's.
  c = await startInstallCluster({
    tmpPrefix: 'install-node-',
    crdsFrom: repoRoot,
    namespace: NS,
    archives: [(images.nats as { archive: string }).archive],
  })
  release = join(c.tmp, 'release')
  const started = Date.now()
  const r = await run(process.execPath, ['--import', 'tsx', 'dev/scripts/release.ts', '--out', release], {
    cwd: repoRoot,
    timeoutMs: 30 * 60_000,
  })
  if (r.code !== 0) throw new Error(`npm run release failed (exit ${r.code}):\n${r.stderr.slice(-3000)}`)
  console.log(`[install] npm run release: ${((Date.now() - started) / 1000).toFixed(1)} s`)
  digest = (await readFile(join(release, 'image-digest.txt'), 'utf8')).trim()
  version = JSON.parse(await readFile(join(release, 'release.json'), 'utf8')).version
  // What pushing the archive to a registry and the kubelet pulling it by digest amount to: the OCI archive in the
  // node's image store under <repository>@<digest>, the name the bundle and the chart's image.digest give.
  const archive = join(release, `model-backfill-image-${version}.oci.tar`)
  const address = c.node.containerdAddress
  await runOk(
    CTR,
    [
      '--address',
      address,
      '--namespace',
      K8S_NAMESPACE,
      'images',
      'import',
      '--no-unpack',
      '--base-name',
      REPOSITORY,
      '--digests',
      archive,
    ],
    { timeoutMs: 300_000 },
  )
  const listed = (await runOk(CTR, ['--address', address, '--namespace', K8S_NAMESPACE, 'images', 'ls', '-q'])).stdout
  expect(listed.split('\n')).toContain(`${REPOSITORY}@${digest}`)
}, 1_800_000)

afterAll(async () => {
  await c?.stop()
}, 180_000)

/** NATS as users run it: nats-server.yaml with the nats image, mounting the generated auth Secret; restarted when
 * the Secret changed (another installation's identities). Returns the Service's ClusterIP. */
async function startNats(): Promise<string> {
  const manifest = (await readFile(join(import.meta.dirname, 'nats-server.yaml'), 'utf8')).replaceAll(
    'NATS_IMAGE',
    (images.nats as { ref: string }).ref,
  )
  const existed = (await kubectl(['-n', 'nats', 'get', 'deploy', 'nats'])).code === 0
  await kubectlOk(['apply', '-f', '-'], manifest)
  if (existed) await kubectlOk(['-n', 'nats', 'rollout', 'restart', 'deploy/nats'])
  const rolled = await kubectl(['-n', 'nats', 'rollout', 'status', 'deploy/nats', '--timeout=90s'])
  if (rolled.code !== 0) {
    const pods = await kubectl(['-n', 'nats', 'describe', 'pods'])
    const logs = await kubectl(['-n', 'nats', 'logs', 'deploy/nats', '--tail=20'])
    throw new Error(
      `nats-server not ready: ${rolled.stderr}\n${pods.stdout.slice(-3000)}\n${logs.stdout}${logs.stderr}`,
    )
  }
  return (await jsonOf(['-n', 'nats', 'get', 'service', 'nats'])).spec.clusterIP
}

const replicas = async (fn: string) =>
  ((await jsonOf(['-n', NS, 'get', 'deploy', `${workloads}-${fn}`])).spec.replicas ?? 1) as number

/** The release's secrets command, as a user runs it from the release folder alone. */
async function secrets(dir: string, ...args: string[]) {
  const r = await run(join(release, 'model-backfill-secrets'), ['--out', join(dir, 'secrets'), ...args], {
    cwd: c.tmp,
    timeoutMs: 60_000,
  })
  expect(r.code, r.stderr).toBe(0)
  // nats-server's side: its namespace, then the Secret it mounts (docs/nats.md).
  if ((await kubectl(['get', 'namespace', 'nats'])).code !== 0) await kubectlOk(['create', 'namespace', 'nats'])
  await kubectlOk(['apply', '-k', join(dir, 'secrets', 'nats')])
}

/** What every install must reach: provisioned, the always-on functions Ready on the release's image, KEDA at zero. */
async function installed(started: number, what: string) {
  await waitFor(
    'the provision Job completed',
    async () =>
      (await jsonOf(['-n', NS, 'get', 'job', '-l', 'app.kubernetes.io/component=provision'])).items.some(
        (j: { status?: { succeeded?: number } }) => j.status?.succeeded === 1,
      ),
    { timeoutMs: 240_000, intervalMs: 1000 },
  )
  for (const fn of ['source', 'demand', 'cancel']) {
    await kubectlOk(['-n', NS, 'rollout', 'status', `deploy/${workloads}-${fn}`, '--timeout=180s'])
    const d = await jsonOf(['-n', NS, 'get', 'deploy', `${workloads}-${fn}`])
    expect(d.spec.template.spec.containers[0].image).toBe(`${REPOSITORY}@${digest}`)
  }
  console.log(`[install] ${what}: installed and Ready in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  await waitFor(
    'KEDA: admit and lifecycle at zero while idle',
    async () => (await replicas('admit')) === 0 && (await replicas('lifecycle')) === 0,
    { timeoutMs: 120_000, intervalMs: 1000 },
  )
}

/** The bundle, as docs/install.md has it (after secrets() and NATS); returns the install's directory (its secrets). */
async function installBundle(natsIp: string) {
  const dir = join(c.tmp, 'bundle')
  const started = Date.now()
  await kubectlOk(['apply', '--server-side', '-f', join(release, 'model-backfill.yaml')])
  await kubectlOk(['-n', NS, 'apply', '-k', join(dir, 'secrets', 'model-backfill')])
  // The environment's differences, nothing else: KEDA runs beside the apiserver, outside the cluster's DNS (the
  // monitoring endpoint by its ClusterIP), and a short cooldown to see admit and lifecycle go back to zero in time.
  for (const fn of ['admit', 'lifecycle']) {
    const so = await jsonOf(['-n', NS, 'get', 'scaledobject', `${workloads}-${fn}`])
    const triggers = so.spec.triggers.map((t: { metadata: Record<string, string> }) => ({
      ...t,
      metadata: { ...t.metadata, natsServerMonitoringEndpoint: `${natsIp}:8222` },
    }))
    await kubectlOk([
      '-n',
      NS,
      'patch',
      'scaledobject',
      `${workloads}-${fn}`,
      '--type=merge',
      '-p',
      JSON.stringify({ spec: { cooldownPeriod: 10, triggers } }),
    ])
  }
  await installed(started, 'bundle')
  return dir
}

/** The packaged chart with the generated values and a values file of production settings. */
async function installChart(natsIp: string) {
  const dir = join(c.tmp, 'chart')
  workloads = 'mbf-model-backfill'
  const mine = join(dir, 'my-values.yaml')
  await writeFile(
    mine,
    stringify({
      image: { repository: REPOSITORY, digest },
      // The CRD is there from the bundle and kept by its removal (the chart would otherwise install its own).
      crd: { install: false },
      ingress: { enabled: false },
      extraEnv: [{ name: 'OTEL_SERVICE_NAME', value: 'mbf-install-test' }],
      podLabels: { 'team.example/owner': 'platform' },
      nodeSelector: { 'kubernetes.io/hostname': c.node.name },
      tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'backfill', effect: 'NoSchedule' }],
      nats: { monitoringEndpoint: `${natsIp}:8222`, replicas: 1 },
      keda: { cooldownPeriod: 10 },
    }),
  )
  const started = Date.now()
  const r = await run(
    c.env.binaries.helm as string,
    ['install', 'mbf', join(release, `model-backfill-${version}.tgz`), '-n', NS, '--create-namespace'].concat([
      '-f',
      join(dir, 'secrets', 'values.yaml'),
      '-f',
      mine,
      '--kubeconfig',
      c.env.kubeconfigPath,
    ]),
    { timeoutMs: 180_000 },
  )
  expect(r.code, r.stderr).toBe(0)
  await installed(started, 'chart')
  // The values reached the pods; ingress.enabled=false left no ingress behind.
  const demand = await jsonOf(['-n', NS, 'get', 'deploy', `${workloads}-demand`])
  const pod = demand.spec.template
  expect(pod.metadata.labels['team.example/owner']).toBe('platform')
  expect(pod.spec.nodeSelector).toEqual({ 'kubernetes.io/hostname': c.node.name })
  expect(pod.spec.tolerations).toContainEqual({
    key: 'dedicated',
    operator: 'Equal',
    value: 'backfill',
    effect: 'NoSchedule',
  })
  expect(pod.spec.containers[0].env).toContainEqual({ name: 'OTEL_SERVICE_NAME', value: 'mbf-install-test' })
  const names = (await jsonOf(['-n', NS, 'get', 'deploy,service'])).items.map((i: Manifest) => i.metadata.name)
  expect(names.filter((n: string) => n.includes('ingress'))).toEqual([])
  return dir
}

/** `npm install -g` of the plugin's tarball into a fresh HOME and prefix; `kubectl-mbf get` against the cluster. */
async function pluginGet(ns: string, dir: string, natsIp: string) {
  const home = join(c.tmp, 'plugin-home')
  const prefix = join(c.tmp, 'plugin-prefix')
  await mkdir(home, { recursive: true })
  const env = {
    PATH: `${join(prefix, 'bin')}:${process.env.PATH}`,
    HOME: home,
    npm_config_cache: join(home, '.npm'),
    npm_config_userconfig: join(home, '.npmrc'),
  }
  const tgz = join(release, `flexinfer-kubectl-mbf-${version}.tgz`)
  await runOk('npm', ['install', '-g', '--offline', '--prefix', prefix, tgz], { env, cwd: home, timeoutMs: 120_000 })
  const got = await runOk('kubectl-mbf', ['get', '-n', ns], {
    cwd: home,
    timeoutMs: 60_000,
    env: {
      ...env,
      KUBECONFIG: c.env.kubeconfigPath,
      NATS_URL: `nats://operator@${natsIp}:4222`,
      NATS_NKEY_SEED_FILE: join(dir, 'secrets', 'operator', 'seed.nk'),
    },
  })
  expect(got.stdout).toContain('eval-gemma')
}

/** The ModelBackfill story in namespace `ns`: a Job's container runs; a gateway pod's request stops it with SIGTERM. */
async function story(ns: string, dir: string, whileRunning?: () => Promise<void>) {
  await c.busyboxTemplate(ns, GRACE_SECONDS)
  expect(await replicas('admit')).toBe(0)
  await apply([
    {
      apiVersion: 'ai.flexinfer/v1alpha2',
      kind: 'ModelBackfill',
      metadata: { name: 'eval-gemma', namespace: ns },
      spec: { modelRef: 'gemma', templateRef: 'eval', idleFor: '2s' },
    } as Manifest,
  ])
  // Only admit creates a backfill Job: the Job's existence is KEDA having scaled admit up from zero.
  const pod = await waitFor(
    "the backfill Job's container started",
    async () => {
      const pods = (await jsonOf(['-n', ns, 'get', 'pods', '-l', 'job-name'])).items as V1Pod[]
      const p = pods.find((i) => i.status?.containerStatuses?.[0]?.state?.running)
      if (!p) return undefined
      return (await containerLog(c.node, p, 'eval')).some((l) => l.text === 'started') ? p : undefined
    },
    { timeoutMs: 120_000, intervalMs: 500 },
  )
  expect(pod.spec?.nodeName).toBe(c.node.name)
  await waitFor(
    'the ModelBackfill Running',
    async () => (await jsonOf(['-n', ns, 'get', 'mbf', 'eval-gemma'])).status?.phase === 'Running',
    { timeoutMs: 60_000, intervalMs: 500 },
  )
  await whileRunning?.()
  const containerId = (pod.status?.containerStatuses?.[0]?.containerID ?? '').replace(/^containerd:\/\//, '')
  const job = pod.metadata?.labels?.['job-name'] as string

  // The gateway: the nats CLI as the generated `gateway` identity, its Secret applied where gateways run.
  await kubectlOk(['-n', ns, 'apply', '-f', join(dir, 'secrets', 'gateway', 'secret.yaml')])
  const requestAt = Date.now()
  await apply([gatewayPod(ns, (images.nats as { ref: string }).ref)])
  const sigterm = await waitFor(
    'SIGTERM in the backfill container',
    async () => (await containerLog(c.node, pod, 'eval')).find((l) => l.text === 'SIGTERM'),
    { timeoutMs: 60_000, intervalMs: 100 },
  )
  const exitNs = await c.events.exitOf(containerId, 30_000)
  // The preemption can be over before the kubelet reports the gateway's container as started: its log once it ran.
  await kubectlOk(['-n', ns, 'wait', '--for=jsonpath={.status.phase}=Succeeded', '--timeout=60s', 'pod/gateway'])
  const gatewayLog = await kubectlOk(['-n', ns, 'logs', 'gateway'])
  expect(gatewayLog).toMatch(/Stored in Stream: FLEXINFER_FOREGROUND_LAST/)
  await waitFor(`Job ${job} gone`, async () => (await kubectl(['-n', ns, 'get', 'job', job])).code !== 0, {
    timeoutMs: 60_000,
  })
  const state = await jsonOf(['-n', ns, 'get', 'mbf', 'eval-gemma'])
  expect(state.status.attempts).toBeGreaterThanOrEqual(1)
  console.log(
    `[install] ${ns}: gateway pod created → SIGTERM ${sigterm.at - requestAt} ms, → exited ${Number(exitNs / 1_000_000n) - requestAt} ms (includes the gateway pod's start)`,
  )
  // The backfill stops here: deleted while the controller runs, so its finalizer is handled.
  await kubectlOk(['-n', ns, 'delete', 'mbf', 'eval-gemma', '--timeout=60s'])
}

describe.skipIf(unavailable)('the install from the release artifacts on the real node', () => {
  it('the bundle: kubectl apply --server-side, KEDA scales admit, a gateway pod preempts; the plugin from its tarball', {
    timeout: 600_000,
  }, async () => {
    await secrets(join(c.tmp, 'bundle'))
    const natsIp = await startNats()
    const dir = await installBundle(natsIp)
    await story('team-bundle', dir, () => pluginGet('team-bundle', dir, natsIp))
    await waitFor('KEDA: admit back at zero after the work', async () => (await replicas('admit')) === 0, {
      timeoutMs: 120_000,
      intervalMs: 1000,
    })
    // The operator identity, from outside the cluster: the generated nats context (with the NATS host reachable).
    const context = JSON.parse(await readFile(join(dir, 'secrets', 'operator', 'nats-context.json'), 'utf8'))
    const ctxPath = join(c.tmp, 'operator-context.json')
    await writeFile(ctxPath, JSON.stringify({ ...context, url: `nats://${natsIp}:4222` }))
    const { NATS_URL: _, ...noUrl } = process.env
    const info = await runOk(
      c.env.binaries.nats,
      ['--context', ctxPath, 'stream', 'info', 'FLEXINFER_EVENTS', '--json'],
      { env: noUrl },
    )
    expect(JSON.parse(info.stdout).config.name).toBe('FLEXINFER_EVENTS')
    const write = await run(
      c.env.binaries.nats,
      ['--context', ctxPath, 'pub', 'flexinfer.events.backfill.cancel', '{}'],
      {
        env: noUrl,
      },
    )
    expect(write.code).not.toBe(0)
    expect(write.stderr).toMatch(/Permissions Violation for Publish to "flexinfer.events.backfill.cancel"/)
    // Removing the bundle's workloads keeps the CRD: everything it applied but the CRD, the namespace included.
    const docs = parseAllDocuments(await readFile(join(release, 'model-backfill.yaml'), 'utf8'))
      .map((d) => d.toJS() as Manifest)
      .filter((m) => m && m.kind !== 'CustomResourceDefinition')
    await kubectlOk(
      ['delete', '--wait=false', '--ignore-not-found', '-f', '-'],
      docs.map((m) => stringify(m)).join('---\n'),
    )
    await kubectlOk(['wait', '--for=delete', `namespace/${NS}`, '--timeout=180s'])
    expect((await kubectl(['get', 'crd', 'modelbackfills.ai.flexinfer'])).code).toBe(0)
  })

  it('the packaged chart: helm install with ingress.enabled=false, extraEnv and scheduling settings; the same story', {
    timeout: 600_000,
  }, async () => {
    await secrets(join(c.tmp, 'chart'), '--format', 'helm')
    const natsIp = await startNats()
    const dir = await installChart(natsIp)
    await story('team-chart', dir)
    const r = await run(
      c.env.binaries.helm as string,
      ['uninstall', 'mbf', '-n', NS, '--kubeconfig', c.env.kubeconfigPath],
      {
        timeoutMs: 120_000,
      },
    )
    expect(r.code, r.stderr).toBe(0)
  })
})
