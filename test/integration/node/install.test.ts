// The documented install (docs/install.md: scripts/install.sh), executed onto the real node, as a platform team runs
// it: FlexInfer's CRDs and KEDA's present (KEDA's operator is the real binary, as a process beside the apiserver),
// NATS a nats-server pod (images/build.sh's nats image) that mounts the generated auth Secret and includes it
// (nats-server.yaml), then `scripts/install.sh install` with MBF_WAIT=true and the project's image built from the
// Dockerfile. Proven per mode (keda, then helm-keda after the keda install's uninstall, in the same namespace):
//   - the provision Job completes in a pod and every always-on function pod is Ready (the script's own wait);
//   - KEDA keeps admit and lifecycle at zero when idle and scales admit up when a ModelBackfill needs it;
//   - the ModelBackfill story with real containers: a CronJob template running busybox → after idleFor its Job's pod
//     runs → a gateway pod (the nats CLI with the generated gateway Secret) publishes a foreground request → the Job
//     is deleted, its container gets SIGTERM and exits;
//   - the operator identity reads the state from outside the cluster (nats CLI context written by gen:secrets).
// Slow (two installs, ~5 min): `npm run test:install` (MBF_INSTALL_TEST=1); skipped otherwise.
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { V1Pod } from '@kubernetes/client-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { pinnedKedaVersion, repoRoot } from '../../env/binaries.js'
import { type Environment, startEnvironment } from '../../env/environment.js'
import { run, runOk, waitFor } from '../../env/exec.js'
import {
  ensureNodeImages,
  importImages,
  type NodeImages,
  type NodeInfo,
  nodeUnavailableReason,
} from '../../env/node.js'
import { type Manifest, toYaml } from '../support/deploy.js'
import { type KedaOperator, startKedaOperator } from '../support/keda.js'
import { containerLog, TaskEvents } from './node-support.js'

const unavailable =
  nodeUnavailableReason() ?? (process.env.MBF_INSTALL_TEST ? undefined : 'slow: npm run test:install runs it')
const NS = 'model-backfill'
const GRACE_SECONDS = 30
const SCRIPT = "trap 'echo SIGTERM; exit 143' TERM; echo started; sleep 3600 & wait $!"

let env: Environment
let node: NodeInfo
let images: NodeImages
let keda: KedaOperator
let events: TaskEvents
let tmp = ''

const kubectl = (args: string[], input?: string) =>
  run(env.binaries.kubectl, ['--kubeconfig', env.kubeconfigPath, ...args], { input, timeoutMs: 120_000 })
const kubectlOk = async (args: string[], input?: string) => {
  const r = await kubectl(args, input)
  if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.stderr}`)
  return r.stdout
}
const apply = (manifests: Manifest[]) => kubectlOk(['apply', '-f', '-'], toYaml(manifests))
const jsonOf = async (args: string[]) => JSON.parse(await kubectlOk([...args, '-o', 'json']))
const script = (command: string, settings: Record<string, string>) =>
  run('sh', [join(repoRoot, 'scripts/install.sh'), command], {
    cwd: tmp,
    timeoutMs: 420_000,
    env: {
      ...process.env,
      KUBECONFIG: env.kubeconfigPath,
      KUBECTL: env.binaries.kubectl,
      HELM: env.binaries.helm as string,
      ...settings,
    },
  })

beforeAll(async () => {
  if (unavailable) return
  images = await ensureNodeImages({ app: true, nats: true })
  tmp = await mkdtemp(join(tmpdir(), 'install-node-'))
  // A cluster with FlexInfer's kinds only (its CRDs, as FlexInfer installs them): ModelBackfill's is the script's.
  const crds = join(tmp, 'flexinfer-crds')
  await mkdir(crds)
  for (const f of ['model.yaml', 'gamingsession.yaml', 'gpulease.yaml'])
    await copyFile(join(repoRoot, 'crds', f), join(crds, f))
  env = await startEnvironment({ node: { appImage: true }, crdsDir: crds, log: () => {} })
  node = env.node as NodeInfo
  // KEDA as its release installs it: every CRD of the pinned module's config/crd/bases (the operator waits for
  // the eventing.keda.sh ones too, and exits after two minutes without them).
  const moduleDir = (
    await runOk('go', ['mod', 'download', '-json', `github.com/kedacore/keda/v2@${pinnedKedaVersion()}`], {
      cwd: tmp,
      timeoutMs: 120_000,
    })
  ).stdout.match(/"Dir": "([^"]+)"/)?.[1]
  await kubectlOk(['apply', '--server-side', '-f', join(moduleDir as string, 'config', 'crd', 'bases')])
  await importImages(node.containerdAddress, [(images.nats as { archive: string }).archive])
  keda = await startKedaOperator({
    binary: env.binaries.kedaOperator as string,
    kubeconfigPath: env.kubeconfigPath,
    namespace: NS,
  })
  events = new TaskEvents(node)
}, 600_000)

afterAll(async () => {
  events?.close()
  await keda?.stop()
  await env?.stop()
  if (tmp) await rm(tmp, { recursive: true, force: true })
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
  const dir = join(tmp, mode)
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
  await kubectlOk(['create', 'namespace', ns])
  await waitFor(
    `ServiceAccount default in ${ns}`,
    async () => (await kubectl(['-n', ns, 'get', 'sa', 'default'])).code === 0,
  )
  const template: Manifest[] = [
    { apiVersion: 'ai.flexinfer/v1alpha2', kind: 'Model', metadata: { name: 'gemma', namespace: ns }, spec: {} },
    {
      apiVersion: 'batch/v1',
      kind: 'CronJob',
      metadata: { name: 'eval', namespace: ns },
      spec: {
        schedule: '0 0 1 1 *',
        suspend: true,
        jobTemplate: {
          spec: {
            backoffLimit: 0,
            template: {
              spec: {
                restartPolicy: 'Never',
                terminationGracePeriodSeconds: GRACE_SECONDS,
                containers: [
                  {
                    name: 'eval',
                    image: node.images.busybox.ref,
                    imagePullPolicy: 'Never',
                    command: ['sh', '-c', SCRIPT],
                  },
                ],
              },
            },
          },
        },
      },
    } as Manifest,
  ]
  await apply(template)
  await kubectlOk([
    '-n',
    ns,
    'patch',
    'model',
    'gemma',
    '--subresource=status',
    '--type=merge',
    '-p',
    JSON.stringify({ status: { phase: 'Ready', gpu: { node: node.name } } }),
  ])
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
      return (await containerLog(node, p, 'eval')).some((l) => l.text === 'started') ? p : undefined
    },
    { timeoutMs: 120_000, intervalMs: 500 },
  )
  expect(pod.spec?.nodeName).toBe(node.name)
  const containerId = (pod.status?.containerStatuses?.[0]?.containerID ?? '').replace(/^containerd:\/\//, '')
  const job = pod.metadata?.labels?.['job-name'] as string

  // The gateway: the nats CLI as the generated `gateway` identity, its Secret applied where gateways run.
  await kubectlOk(['-n', ns, 'apply', '-f', join(dir, 'secrets', 'gateway', 'secret.yaml')])
  const publish = [
    // Both set before the command that uses them (as prefix assignments they would expand empty there).
    'id=$(cat /proc/sys/kernel/random/uuid); now=$(date -u +%Y-%m-%dT%H:%M:%S.000Z);',
    'nats --server nats://nats.nats.svc.cluster.local:4222 --nkey /var/run/gateway/seed --inbox-prefix _INBOX_gateway',
    `pub --jetstream -H "Nats-Msg-Id:$id" flexinfer.events.foreground.request.${ns}.gemma`,
    `"{\\"specversion\\":\\"1.0\\",\\"id\\":\\"$id\\",\\"source\\":\\"gateway-pod\\",\\"type\\":\\"ai.flexinfer.foreground.request\\",\\"time\\":\\"$now\\",\\"datacontenttype\\":\\"application/json\\",\\"data\\":{\\"namespace\\":\\"${ns}\\",\\"model\\":\\"gemma\\"}}"`,
  ].join(' ')
  const requestAt = Date.now()
  await apply([
    {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'gateway', namespace: ns },
      spec: {
        restartPolicy: 'Never',
        automountServiceAccountToken: false,
        securityContext: { runAsNonRoot: true, runAsUser: 1000 },
        containers: [
          {
            name: 'gateway',
            image: (images.nats as { ref: string }).ref,
            imagePullPolicy: 'Never',
            command: ['sh', '-c', publish],
            volumeMounts: [{ name: 'seed', mountPath: '/var/run/gateway', readOnly: true }],
          },
        ],
        volumes: [
          { name: 'seed', secret: { secretName: 'model-backfill-gateway', items: [{ key: 'seed', path: 'seed' }] } },
        ],
      },
    } as Manifest,
  ])
  const sigterm = await waitFor(
    'SIGTERM in the backfill container',
    async () => (await containerLog(node, pod, 'eval')).find((l) => l.text === 'SIGTERM'),
    { timeoutMs: 60_000, intervalMs: 100 },
  )
  const exitNs = await events.exitOf(containerId, 30_000)
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
  it('keda: scripts/install.sh installs, KEDA scales admit and lifecycle, a gateway pod preempts a real container', {
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
    const ctxPath = join(tmp, 'operator-context.json')
    await writeFile(ctxPath, JSON.stringify({ ...context, url: `nats://${natsIp}:4222` }))
    const { NATS_URL: _, ...noUrl } = process.env
    const info = await runOk(
      env.binaries.nats,
      ['--context', ctxPath, 'stream', 'info', 'FLEXINFER_EVENTS', '--json'],
      {
        env: noUrl,
      },
    )
    expect(JSON.parse(info.stdout).config.name).toBe('FLEXINFER_EVENTS')
    const write = await run(
      env.binaries.nats,
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
    const gone = await script('uninstall', { MBF_MODE: 'helm-keda', MBF_DIR: join(tmp, 'helm-keda') })
    expect(gone.code, gone.stderr).toBe(0)
  })
})
