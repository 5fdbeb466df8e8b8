// What an integration test file uses: `const env = useTestEnv()` at top level gives it the shared real environment
// (started by global-setup.ts), a fresh namespace of its own and a NATS connection, all cleaned up after the file.
import { basename } from 'node:path'
import { ApiException, CoreV1Api, KubeConfig } from '@kubernetes/client-node'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, inject } from 'vitest'
import type { Binaries } from './binaries.js'
import { type RunResult, run, waitFor } from './exec.js'
import type { TestEnvInfo } from './global-setup.js'

export interface TestEnv {
  kubeconfigPath: string
  /** Admin (system:masters) credentials. */
  kc: KubeConfig
  apiserverUrl: string
  /** A fresh namespace per test file (created in beforeAll, deleted in afterAll). */
  namespace: string
  /** Comma-separated when the shared environment is a NATS cluster (MBF_NATS_CLUSTER=1). */
  natsUrl: string
  natsMonitorUrl: string
  /** Each nats-server (one, or three in a cluster): find a stream's leader with test/env/nats.ts streamLeader. */
  natsServers: TestEnvInfo['natsServers']
  nc: NatsConnection
  binaries: Binaries
  /** kubectl with the admin kubeconfig preset; the namespace is NOT preset. */
  kubectl(args: string[], opts?: { input?: string }): Promise<RunResult>
  /** The NATS CLI with --server preset. */
  nats(args: string[]): Promise<RunResult>
  /** A KubeConfig authenticating with a TokenRequest token of that ServiceAccount (created if missing). */
  saKubeConfig(serviceAccount: string, namespace?: string): Promise<KubeConfig>
}

export function isApiError(err: unknown, code: number): boolean {
  return err instanceof ApiException && err.code === code
}

/** Call at the top level of a test file. Properties are readable inside tests and hooks (not at import time). */
export function useTestEnv(): TestEnv {
  const info: TestEnvInfo = inject('testEnv')
  if (!info) throw new Error('no test environment: useTestEnv() needs the integration project (globalSetup)')
  let kc: KubeConfig | undefined
  let namespace: string | undefined
  let nc: NatsConnection | undefined
  const ready = <T>(value: T | undefined, what: string): T => {
    if (value === undefined) throw new Error(`env.${what} is only available inside tests and hooks (after beforeAll)`)
    return value
  }
  const kubectlBase = ['--kubeconfig', info.kubeconfigPath, '--cache-dir', `${info.dir}/kubectl-cache`]

  // The file's name makes its namespace recognisable (vitest sets testPath while it collects the file).
  const file = expect.getState().testPath ?? 'test'

  beforeAll(async () => {
    kc = new KubeConfig()
    kc.loadFromFile(info.kubeconfigPath)
    const core = kc.makeApiClient(CoreV1Api)
    const name = namespaceName(file)
    await core.createNamespace({
      body: { metadata: { name, labels: { 'app.kubernetes.io/managed-by': 'modelbackfill-test-env' } } },
    })
    namespace = name
    // Pods (e.g. a Job's) are only admitted once the serviceaccount controller has made the default ServiceAccount.
    await waitFor(`ServiceAccount default in ${name}`, async () => {
      await core.readNamespacedServiceAccount({ name: 'default', namespace: name })
      return true
    })
    // Every server of a cluster (MBF_NATS_CLUSTER=1): natsUrl is comma-separated then.
    nc = await connect({ servers: info.natsUrl.split(','), name: `test ${basename(file)}` })
  })

  afterAll(async () => {
    await nc?.close()
    if (kc && namespace) {
      try {
        await kc.makeApiClient(CoreV1Api).deleteNamespace({ name: namespace })
      } catch (err) {
        if (!isApiError(err, 404)) throw err
      }
    }
  })

  return {
    kubeconfigPath: info.kubeconfigPath,
    apiserverUrl: info.apiserverUrl,
    natsUrl: info.natsUrl,
    natsMonitorUrl: info.natsMonitorUrl,
    natsServers: info.natsServers,
    binaries: info.binaries,
    get kc() {
      return ready(kc, 'kc')
    },
    get namespace() {
      return ready(namespace, 'namespace')
    },
    get nc() {
      return ready(nc, 'nc')
    },
    kubectl: (args, opts) => run(info.binaries.kubectl, [...kubectlBase, ...args], { input: opts?.input }),
    nats: (args) => run(info.binaries.nats, ['--server', info.natsUrl, ...args]),
    saKubeConfig: async (serviceAccount, ns) => {
      const admin = ready(kc, 'kc')
      const inNamespace = ns ?? ready(namespace, 'namespace')
      return serviceAccountKubeConfig(admin, serviceAccount, inNamespace)
    },
  }
}

/** Mints a TokenRequest token for the ServiceAccount (creating it if missing) and wraps it in a KubeConfig. */
export async function serviceAccountKubeConfig(
  admin: KubeConfig,
  name: string,
  namespace: string,
): Promise<KubeConfig> {
  const core = admin.makeApiClient(CoreV1Api)
  try {
    await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } })
  } catch (err) {
    if (!isApiError(err, 409)) throw err
  }
  const tokenRequest = await core.createNamespacedServiceAccountToken({
    name,
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  })
  const token = tokenRequest.status?.token
  if (!token) throw new Error(`TokenRequest for ${namespace}/${name} returned no token`)
  const cluster = admin.getCurrentCluster()
  if (!cluster) throw new Error('admin kubeconfig has no current cluster')
  const user = `system:serviceaccount:${namespace}:${name}`
  const kc = new KubeConfig()
  kc.loadFromOptions({
    clusters: [{ ...cluster, name: 'modelbackfill-test' }],
    users: [{ name: user, token }],
    contexts: [{ name: user, cluster: 'modelbackfill-test', user, namespace }],
    currentContext: user,
  })
  return kc
}

function namespaceName(file: string): string {
  const slug = basename(file)
    .replace(/\.test\.[cm]?[jt]s$/, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40)
  return `t-${slug || 'test'}-${Math.random().toString(36).slice(2, 8)}`
}
