// What the install and upgrade tests on the real node share: a cluster as a platform team has it before installing
// ModelBackfill (FlexInfer's CRDs, KEDA's CRDs and operator, a node with the NATS image and any other imported), the
// kubectl and dev/scripts/install.sh they drive it with, and the backfill story's parts: a CronJob template whose busybox
// container says when it starts and when it gets SIGTERM, and a gateway pod that publishes one foreground request.
import { copyFile, mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pinnedKedaVersion, repoRoot } from '../../env/binaries.js'
import { type Environment, startEnvironment } from '../../env/environment.js'
import { run, runOk, waitFor } from '../../env/exec.js'
import { importImages, type NodeInfo } from '../../env/node.js'
import { type Manifest, toYaml } from '../support/deploy.js'
import { type KedaOperator, startKedaOperator } from '../support/keda.js'
import { TaskEvents } from './node-support.js'

/** The backfill container: says it started, and says SIGTERM when it gets one (then exits 143). */
export const PREEMPTIBLE = "trap 'echo SIGTERM; exit 143' TERM; echo started; sleep 3600 & wait $!"

export interface InstallCluster {
  env: Environment
  node: NodeInfo
  events: TaskEvents
  /** A directory of the test's own, removed by stop(). */
  tmp: string
  kubectl(args: string[], input?: string): ReturnType<typeof run>
  kubectlOk(args: string[], input?: string): Promise<string>
  apply(manifests: Manifest[]): Promise<string>
  /** kubectl … -o json, parsed (read field by field, as JSON.parse hands it out). */
  jsonOf(args: string[]): Promise<ReturnType<typeof JSON.parse>>
  /** `dev/scripts/install.sh <command>` against this cluster, with the given settings (MBF_*). */
  script(command: string, settings: Record<string, string>): ReturnType<typeof run>
  /**
   * Namespace `ns` with a Ready Model `gemma` on the node and a suspended CronJob `eval` running PREEMPTIBLE in
   * busybox, plus `extra` (applied with the template, before the Model turns Ready).
   */
  busyboxTemplate(ns: string, graceSeconds: number, extra?: Manifest[]): Promise<void>
  stop(): Promise<void>
}

/**
 * Starts the cluster: FlexInfer's CRDs as `crdsFrom/crds` has them (its Model, GamingSession, GPULease; not
 * ModelBackfill's, which the install brings), every CRD of the pinned KEDA module (the operator waits for the
 * eventing.keda.sh ones too, and exits after two minutes without them), KEDA's operator for namespace `namespace`,
 * and `archives` imported into the node's containerd.
 */
export async function startInstallCluster(o: {
  tmpPrefix: string
  crdsFrom: string
  namespace: string
  archives: string[]
}): Promise<InstallCluster> {
  const tmp = await mkdtemp(join(tmpdir(), o.tmpPrefix))
  const crds = join(tmp, 'flexinfer-crds')
  await mkdir(crds)
  for (const f of ['model.yaml', 'gamingsession.yaml', 'gpulease.yaml'])
    await copyFile(join(o.crdsFrom, 'crds', f), join(crds, f))
  const env = await startEnvironment({ node: { appImage: true }, crdsDir: crds, log: () => {} })
  let keda: KedaOperator | undefined
  let events: TaskEvents | undefined
  const stop = async () => {
    events?.close()
    await keda?.stop()
    await env.stop()
    await rm(tmp, { recursive: true, force: true })
  }
  try {
    const node = env.node as NodeInfo
    const kubectl = (args: string[], input?: string) =>
      run(env.binaries.kubectl, ['--kubeconfig', env.kubeconfigPath, ...args], { input, timeoutMs: 120_000 })
    const kubectlOk = async (args: string[], input?: string) => {
      const r = await kubectl(args, input)
      if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.stderr}`)
      return r.stdout
    }
    const apply = (manifests: Manifest[]) => kubectlOk(['apply', '-f', '-'], toYaml(manifests))
    const moduleDir = (
      await runOk('go', ['mod', 'download', '-json', `github.com/kedacore/keda/v2@${pinnedKedaVersion()}`], {
        cwd: tmp,
        timeoutMs: 120_000,
      })
    ).stdout.match(/"Dir": "([^"]+)"/)?.[1]
    await kubectlOk(['apply', '--server-side', '-f', join(moduleDir as string, 'config', 'crd', 'bases')])
    await importImages(node.containerdAddress, o.archives)
    keda = await startKedaOperator({
      binary: env.binaries.kedaOperator as string,
      kubeconfigPath: env.kubeconfigPath,
      namespace: o.namespace,
    })
    events = new TaskEvents(node)
    return {
      env,
      node,
      events,
      tmp,
      kubectl,
      kubectlOk,
      apply,
      jsonOf: async (args) => JSON.parse(await kubectlOk([...args, '-o', 'json'])),
      script: (command, settings) =>
        run('sh', [join(repoRoot, 'dev/scripts/install.sh'), command], {
          cwd: tmp,
          timeoutMs: 420_000,
          env: {
            ...process.env,
            KUBECONFIG: env.kubeconfigPath,
            KUBECTL: env.binaries.kubectl,
            HELM: env.binaries.helm as string,
            ...settings,
          },
        }),
      async busyboxTemplate(ns, graceSeconds, extra = []) {
        await kubectlOk(['create', 'namespace', ns])
        await waitFor(
          `ServiceAccount default in ${ns}`,
          async () => (await kubectl(['-n', ns, 'get', 'sa', 'default'])).code === 0,
        )
        await apply([
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
                      terminationGracePeriodSeconds: graceSeconds,
                      containers: [
                        {
                          name: 'eval',
                          image: node.images.busybox.ref,
                          imagePullPolicy: 'Never',
                          command: ['sh', '-c', PREEMPTIBLE],
                        },
                      ],
                    },
                  },
                },
              },
            },
          } as Manifest,
          ...extra,
        ])
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
      },
      stop,
    }
  } catch (err) {
    await stop().catch(() => {})
    throw err
  }
}

/**
 * A gateway as a pod: the nats CLI, as the identity whose seed is in Secret `model-backfill-gateway` of `ns`, publishes
 * one foreground request for `ns`/gemma on its per-model subject and exits.
 */
export function gatewayPod(ns: string, natsImage: string): Manifest {
  const publish = [
    // Both set before the command that uses them (as prefix assignments they would expand empty there).
    'id=$(cat /proc/sys/kernel/random/uuid); now=$(date -u +%Y-%m-%dT%H:%M:%S.000Z);',
    'nats --server nats://nats.nats.svc.cluster.local:4222 --nkey /var/run/gateway/seed --inbox-prefix _INBOX_gateway',
    `pub --jetstream -H "Nats-Msg-Id:$id" flexinfer.events.foreground.request.${ns}.gemma`,
    `"{\\"specversion\\":\\"1.0\\",\\"id\\":\\"$id\\",\\"source\\":\\"gateway-pod\\",\\"type\\":\\"ai.flexinfer.foreground.request\\",\\"time\\":\\"$now\\",\\"datacontenttype\\":\\"application/json\\",\\"data\\":{\\"namespace\\":\\"${ns}\\",\\"model\\":\\"gemma\\"}}"`,
  ].join(' ')
  return {
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
          image: natsImage,
          imagePullPolicy: 'Never',
          command: ['sh', '-c', publish],
          volumeMounts: [{ name: 'seed', mountPath: '/var/run/gateway', readOnly: true }],
        },
      ],
      volumes: [
        { name: 'seed', secret: { secretName: 'model-backfill-gateway', items: [{ key: 'seed', path: 'seed' }] } },
      ],
    },
  } as Manifest
}
