// The documented install from a release, executed onto the real node as a platform team runs it: the docs' own shell
// blocks, read from the pages (test/support/doc-commands.ts: each marked `<!-- install-test: NAME -->`) and run as
// written by `bash -euo pipefail` from a folder holding `release/`, with only what a reader's shell has (kubectl and
// helm on PATH, KUBECONFIG, a clean HOME, npm's global prefix): README.md's first-screen install (`bundle`, the same
// commands as docs/install.md's, test/unit/doc-commands.test.ts), docs/install.md's `version` with its `chart` and its
// `plugin` blocks. `npm run release` runs for real (the image step included: deploy/images/build.sh --app, saved as an
// OCI archive); FlexInfer's CRDs and KEDA's are present (KEDA's operator is the real binary, as a process beside the
// apiserver), NATS a nats-server pod (deploy/images/build.sh's nats image) that mounts the generated auth Secret and
// includes it (nats-server.yaml).
//
// What this environment does in place of a reader's own steps, the only departures from the docs' text (the blocks
// themselves are never edited):
//   - the image: no registry here, so instead of pushing the OCI archive (docs/install.md's skopeo copy) it is
//     imported into the node's containerd under the bundle's name by its digest, which is what a push and a pull do;
//   - NATS: the docs have nats-server include the Secret and reload (docs/nats.md); here the test (re)starts its
//     nats-server after the block applied the Secret, and the functions connect once it is up;
//   - KEDA runs outside the cluster's DNS: after the bundle, its ScaledObjects get the NATS monitoring endpoint by
//     ClusterIP and a short cooldown (to see admit and lifecycle go back to zero in time); for the chart the same
//     settings are in the reader's own my-values.yaml, with production settings (ingress.enabled=false, extraEnv,
//     nodeSelector, tolerations, podLabels: rendered into the pods; no ingress; admission still works);
//   - `kubectl mbf get` and the operator's nats context, inline in the docs with a NATS host reachable from where they
//     run, are run by the test with the ClusterIP.
// Proven per way in, in the same namespace one after the other: the provision Job completes, every always-on function
// is Ready on the release's image, KEDA keeps admit and lifecycle at zero when idle and scales admit up; a
// ModelBackfill goes Running (a busybox Job's container runs) and is preempted: a gateway pod (the nats CLI with the
// generated gateway Secret) publishes a foreground request, the Job's container gets SIGTERM. The plugin from its npm
// tarball on a clean HOME and npm prefix shows that ModelBackfill; the operator identity reads the state from outside
// the cluster and can write nothing. A doc command changed to something broken fails the test naming its page and
// marker. Not run here: the install script from a clone (test/integration/deploy runs dev/scripts/install.sh), and the
// README's "try it locally" and "by hand" parts (test/unit/docs.test.ts checks the scripts and files they name).
// Slow (a release and two installs): `npm run test:install` (MBF_INSTALL_TEST=1); skipped otherwise.
import { mkdir, readFile, symlink, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import type { V1Pod } from '@kubernetes/client-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAllDocuments, stringify } from 'yaml'
import { repoRoot } from '../../env/binaries.js'
import { run, runOk, waitFor } from '../../env/exec.js'
import { CTR, ensureNodeImages, K8S_NAMESPACE, type NodeImages, nodeUnavailableReason } from '../../env/node.js'
import { type DocBlock, readMarkedBlock } from '../../support/doc-commands.js'
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
  // The reader's tools, by the names the docs use: this cluster's kubectl and helm.
  const bin = join(c.tmp, 'reader-bin')
  await mkdir(bin)
  await symlink(c.env.binaries.kubectl, join(bin, 'kubectl'))
  await symlink(c.env.binaries.helm as string, join(bin, 'helm'))
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

/** A folder of a reader's own that holds the release as downloaded (`release/`); the docs' commands run from it. */
async function readerDir(name: string): Promise<string> {
  const dir = join(c.tmp, name)
  await mkdir(join(dir, 'home'), { recursive: true })
  await symlink(release, join(dir, 'release'))
  return dir
}

/**
 * What a reader's shell has and nothing of the test's: kubectl and helm on PATH (this cluster's versions), node, npm
 * and the system's tools, KUBECONFIG, a HOME of the reader's folder; `path` goes first on PATH.
 */
function readerEnv(dir: string, extra: Record<string, string> = {}, path: string[] = []): NodeJS.ProcessEnv {
  return {
    PATH: [...path, join(c.tmp, 'reader-bin'), dirname(process.execPath), '/usr/local/bin', '/usr/bin', '/bin'].join(
      ':',
    ),
    HOME: join(dir, 'home'),
    KUBECONFIG: c.env.kubeconfigPath,
    LANG: 'C.UTF-8',
    ...extra,
  }
}

/** The docs' blocks as written, one after the other in one shell (a reader's session), from `cwd`. */
async function runDocs(blocks: DocBlock[], cwd: string, env: NodeJS.ProcessEnv) {
  const what = blocks.map((b) => `${b.doc} <!-- install-test: ${b.marker} -->`).join(' + ')
  const started = Date.now()
  // -x: a failure's stderr shows the command it stopped at, as the page has it. --norc: bash reads the system's bashrc
  // when its stdin is a socket (as for sshd), which a reader's script does not.
  const r = await run('bash', ['--norc', '-xeuo', 'pipefail', '-c', blocks.map((b) => b.text).join('')], {
    cwd,
    env,
    timeoutMs: 300_000,
  })
  if (r.code !== 0)
    throw new Error(`${what}, run as written from ${cwd}, failed (exit ${r.code}):\n${r.stderr.slice(-3000)}`)
  console.log(`[install] ${what}: ran as written in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  return r
}

const installDoc = (marker: string) => readMarkedBlock(repoRoot, 'docs/install.md', marker)

const replicas = async (fn: string) =>
  ((await jsonOf(['-n', NS, 'get', 'deploy', `${workloads}-${fn}`])).spec.replicas ?? 1) as number

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
  ).catch(async (err) => {
    throw new Error(`${(err as Error).message}\n${await kedaState()}`)
  })
}

/** What KEDA saw, for a wait on it that timed out: the replicas, the ScaledObjects' conditions, the HPAs' status. */
async function kedaState(): Promise<string> {
  const lines: string[] = []
  for (const fn of ['admit', 'lifecycle']) {
    const so = await jsonOf(['-n', NS, 'get', 'scaledobject', `${workloads}-${fn}`]).catch(() => undefined)
    lines.push(
      `${fn}: replicas ${await replicas(fn).catch(() => '?')}; ScaledObject ${JSON.stringify(so?.status ?? {})}`,
    )
  }
  const hpa = await kubectl(['-n', NS, 'get', 'hpa', '-o', 'wide'])
  return `${lines.join('\n')}\n${hpa.stdout}${hpa.stderr}`
}

/** The environment's differences after the bundle, nothing else: KEDA runs beside the apiserver, outside the cluster's
 * DNS (the monitoring endpoint by its ClusterIP), and a short cooldown to see admit and lifecycle go back to zero. */
async function kedaOutsideDns(natsIp: string) {
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
}

/** The reader's own values file for the chart: production settings, and this environment's NATS monitoring address. */
const myValues = (natsIp: string) =>
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
  })

/** The chart's values reached the pods; ingress.enabled=false left no ingress behind. */
async function chartValuesApplied() {
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
}

/** docs/install.md's plugin block on a clean HOME and npm prefix; then `kubectl mbf get` through it, as the operator. */
async function plugin(ns: string, dir: string, natsIp: string) {
  const prefix = join(dir, 'npm-global')
  // npm's global prefix and its bin on PATH: what `npm install -g` needs of a reader's setup.
  const env = readerEnv(dir, { NPM_CONFIG_PREFIX: prefix }, [join(prefix, 'bin')])
  const help = await runDocs([installDoc('version'), installDoc('plugin')], dir, env)
  expect(help.stdout).toMatch(/\bget\b/)
  const got = await runOk(c.env.binaries.kubectl, ['mbf', 'get', '-n', ns], {
    cwd: dir,
    timeoutMs: 60_000,
    env: {
      ...env,
      NATS_URL: `nats://operator@${natsIp}:4222`,
      NATS_NKEY_SEED_FILE: join(dir, 'model-backfill-install', 'secrets', 'operator', 'seed.nk'),
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
    const reader = await readerDir('bundle')
    // NATS's namespace is there before ModelBackfill (a prerequisite): the block applies nats-server's Secret into it.
    if ((await kubectl(['get', 'namespace', 'nats'])).code !== 0) await kubectlOk(['create', 'namespace', 'nats'])
    const started = Date.now()
    await runDocs([readMarkedBlock(repoRoot, 'README.md', 'bundle')], reader, readerEnv(reader))
    const natsIp = await startNats()
    await kedaOutsideDns(natsIp)
    await installed(started, 'bundle')
    const dir = join(reader, 'model-backfill-install')
    await story('team-bundle', dir, () => plugin('team-bundle', reader, natsIp))
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
    const reader = await readerDir('chart')
    workloads = 'mbf-model-backfill'
    // NATS runs before the install, with the bundle's identities; the block gives it this install's, then it reloads.
    const natsIp = (await jsonOf(['-n', 'nats', 'get', 'service', 'nats'])).spec.clusterIP
    await writeFile(join(reader, 'my-values.yaml'), myValues(natsIp))
    const started = Date.now()
    await runDocs([installDoc('version'), installDoc('chart')], reader, readerEnv(reader))
    await startNats()
    await installed(started, 'chart')
    await chartValuesApplied()
    await story('team-chart', join(reader, 'model-backfill-install'))
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
