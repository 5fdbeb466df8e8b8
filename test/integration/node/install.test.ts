// The documented install (docs/install.md: dev/scripts/install.sh), executed onto the real node, as a platform team runs
// it: FlexInfer's CRDs and KEDA's present (KEDA's operator is the real binary, as a process beside the apiserver),
// NATS a nats-server pod (deploy/images/build.sh's nats image) that mounts the generated auth Secret and includes it
// (nats-server.yaml), then `dev/scripts/install.sh install` with MBF_WAIT=true and the project's image built from the
// Dockerfile. Proven per mode (keda, then helm-keda after the keda install's uninstall, in the same namespace):
//   - the provision Job completes in a pod and every always-on function pod is Ready (the script's own wait);
//   - KEDA keeps admit and lifecycle at zero when idle and scales admit up when a ModelBackfill needs it;
//   - the ModelBackfill story with real containers: a CronJob template running busybox → after idleFor its Job's pod
//     runs → a gateway pod (the nats CLI with the generated gateway Secret) publishes a foreground request → the Job
//     is deleted, its container gets SIGTERM and exits;
//   - the operator identity reads the state from outside the cluster (nats CLI context written by gen:secrets).
// Slow (two installs, ~5 min): `npm run test:install` (MBF_INSTALL_TEST=1); skipped otherwise.
import { readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { V1Pod } from '@kubernetes/client-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { repoRoot } from '../../env/binaries.js'
import { run, runOk, waitFor } from '../../env/exec.js'
import { ensureNodeImages, type NodeImages, nodeUnavailableReason } from '../../env/node.js'
import type { Manifest } from '../support/deploy.js'
import { gatewayPod, type InstallCluster, startInstallCluster } from './install-cluster.js'
import { containerLog } from './node-support.js'

const unavailable =
  nodeUnavailableReason() ?? (process.env.MBF_INSTALL_TEST ? undefined : 'slow: npm run test:install runs it')
const NS = 'model-backfill'
const GRACE_SECONDS = 30

let c: InstallCluster
let images: NodeImages
const kubectl: InstallCluster['kubectl'] = (...a) => c.kubectl(...a)
const kubectlOk: InstallCluster['kubectlOk'] = (...a) => c.kubectlOk(...a)
const apply: InstallCluster['apply'] = (m) => c.apply(m)
const jsonOf: InstallCluster['jsonOf'] = (a) => c.jsonOf(a)
const script: InstallCluster['script'] = (...a) => c.script(...a)

beforeAll(async () => {
  if (unavailable) return
  images = await ensureNodeImages({ app: true, nats: true })
  // A cluster with FlexInfer's kinds only (its CRDs, as FlexInfer installs them): ModelBackfill's is the script's.
  c = await startInstallCluster({
    tmpPrefix: 'install-node-',
    crdsFrom: repoRoot,
    namespace: NS,
    archives: [(images.nats as { archive: string }).archive],
  })
}, 600_000)

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
  ((await jsonOf(['-n', NS, 'get', 'deploy', `model-backfill-${fn}`])).spec.replicas ?? 1) as number

/** The whole documented install in one mode; returns the install's directory (its secrets). */
async function install(mode: 'keda' | 'helm-keda') {
  const dir = join(c.tmp, mode)
  const settings = { MBF_MODE: mode, MBF_DIR: dir, MBF_NATS_REPLICAS: '1' }
  // The documented order: the NATS identities first (nats-server must know them), then NATS, then the install.
  const auth = await script('nats-auth', settings)
  expect(auth.code, auth.stderr).toBe(0)
  const natsIp = await startNats()
  const started = Date.now()
  const r = await script('install', {
    ...settings,
    MBF_IMAGE: (images.app as { ref: string }).ref,
    // KEDA runs beside the apiserver here, outside the cluster's DNS: the monitoring endpoint by its ClusterIP.
    MBF_NATS_MONITOR: `${natsIp}:8222`,
    MBF_WAIT: 'true',
    MBF_TIMEOUT: '240s',
  })
  expect(r.code, r.stderr).toBe(0)
  console.log(`[install] ${mode}: installed and Ready in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  // The script's wait: the provision Job completed in a pod; every always-on Deployment rolled out and Ready.
  const jobs = (await jsonOf(['-n', NS, 'get', 'job', '-l', 'app.kubernetes.io/component=provision'])).items
  expect(jobs.some((j: { status?: { succeeded?: number } }) => j.status?.succeeded === 1)).toBe(true)
  for (const fn of ['source', 'demand', 'cancel', 'ingress']) {
    const d = await jsonOf(['-n', NS, 'get', 'deploy', `model-backfill-${fn}`])
    expect(d.status.readyReplicas, fn).toBeGreaterThanOrEqual(1)
    expect(d.spec.template.spec.containers[0].image).toBe((images.app as { ref: string }).ref)
  }
  // KEDA's cooldown is 300 s (the shipped ScaledObjects); the test shortens it for admit and lifecycle to see them
  // go back to zero within its time.
  for (const fn of ['admit', 'lifecycle']) {
    await kubectlOk([
      '-n',
      NS,
      'patch',
      'scaledobject',
      `model-backfill-${fn}`,
      '--type=merge',
      '-p',
      '{"spec":{"cooldownPeriod":10}}',
    ])
  }
  await waitFor(
    'KEDA: admit and lifecycle at zero while idle',
    async () => (await replicas('admit')) === 0 && (await replicas('lifecycle')) === 0,
    {
      timeoutMs: 120_000,
      intervalMs: 1000,
    },
  )
  return dir
}

/** The ModelBackfill story in namespace `ns`: a Job's container runs; a gateway pod's request stops it with SIGTERM. */
async function story(ns: string, dir: string) {
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

describe.skipIf(unavailable)('the documented install on the real node', () => {
  it('keda: dev/scripts/install.sh installs, KEDA scales admit and lifecycle, a gateway pod preempts a real container', {
    timeout: 600_000,
  }, async () => {
    const dir = await install('keda')
    await story('team-keda', dir)
    await waitFor('KEDA: admit back at zero after the work', async () => (await replicas('admit')) === 0, {
      timeoutMs: 120_000,
      intervalMs: 1000,
    })
    // The operator identity, from outside the cluster: the generated nats context (with the NATS host reachable).
    const natsIp = (await jsonOf(['-n', 'nats', 'get', 'service', 'nats'])).spec.clusterIP
    const context = JSON.parse(await readFile(join(dir, 'secrets', 'operator', 'nats-context.json'), 'utf8'))
    const ctxPath = join(c.tmp, 'operator-context.json')
    await writeFile(ctxPath, JSON.stringify({ ...context, url: `nats://${natsIp}:4222` }))
    const { NATS_URL: _, ...noUrl } = process.env
    const info = await runOk(
      c.env.binaries.nats,
      ['--context', ctxPath, 'stream', 'info', 'FLEXINFER_EVENTS', '--json'],
      {
        env: noUrl,
      },
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

    const gone = await script('uninstall', { MBF_MODE: 'keda', MBF_DIR: dir })
    expect(gone.code, gone.stderr).toBe(0)
    expect((await kubectl(['get', 'crd', 'modelbackfills.ai.flexinfer'])).code).toBe(0)
    // The overlay's namespace went with it (keda/namespace.yaml): the next install may reuse the name once it is gone.
    await kubectlOk(['wait', '--for=delete', `namespace/${NS}`, '--timeout=180s'])
  })

  it('helm-keda: the chart by the same script, in the same namespace, adopting the CRD; the same story', {
    timeout: 600_000,
  }, async () => {
    const dir = await install('helm-keda')
    await story('team-helm', dir)
    const gone = await script('uninstall', { MBF_MODE: 'helm-keda', MBF_DIR: join(c.tmp, 'helm-keda') })
    expect(gone.code, gone.stderr).toBe(0)
  })
})
