// The harness itself: what the global setup provides, namespace isolation per test file, clean teardown, and no
// orphan servers when the owning process fails or is killed.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AuthenticationV1Api, CoreV1Api } from '@kubernetes/client-node'
import { describe, expect, inject, it } from 'vitest'
import { parseAllDocuments } from 'yaml'
import { repoRoot } from '../../env/binaries.js'
import { startEnvironment } from '../../env/environment.js'
import { isAlive, processesMentioning, waitFor } from '../../env/exec.js'
import { isApiError, useTestEnv } from '../../env/fixture.js'
import { httpGet } from '../../env/net.js'
import { startOwnerProcess } from '../../env/owner.js'

const env = useTestEnv()
const quiet = { log: () => {} }

describe('the shared environment', () => {
  it('serves the pinned Kubernetes release over TLS and authenticates the admin as system:masters', async () => {
    const info = inject('testEnv')
    const version = await env.kubectl(['get', '--raw', '/version'])
    expect(version.code).toBe(0)
    expect(JSON.parse(version.stdout).gitVersion).toBe(info.kubernetesVersion)
    expect(env.apiserverUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/)

    const review = await env.kc.makeApiClient(AuthenticationV1Api).createSelfSubjectReview({ body: {} })
    expect(review.status?.userInfo?.username).toBe('admin')
    expect(review.status?.userInfo?.groups).toContain('system:masters')

    // Nobody gets in without credentials (no insecure port, anonymous requests are not authorized).
    const anonymous = await httpGet(`${env.apiserverUrl}/api/v1/namespaces`, { ca: readFileSync(info.caCertPath) })
    expect(anonymous.status).toBe(403)
  })

  it('gives the file a fresh, empty namespace of its own', async () => {
    expect(env.namespace).toMatch(/^t-harness-[a-z0-9]{6}$/)
    const core = env.kc.makeApiClient(CoreV1Api)
    const ns = await core.readNamespace({ name: env.namespace })
    expect(ns.status?.phase).toBe('Active')
    // Only what a new namespace always has (kube-root-ca.crt comes from the root-ca publisher controller).
    const configMaps = (await core.listNamespacedConfigMap({ namespace: env.namespace })).items
    expect(configMaps.map((c) => c.metadata?.name).filter((n) => n !== 'kube-root-ca.crt')).toEqual([])
    expect((await core.listNamespacedPod({ namespace: env.namespace })).items).toEqual([])
  })

  it('has every CustomResourceDefinition in crds/*.yaml applied and Established', async () => {
    const info = inject('testEnv')
    const dir = join(repoRoot, 'crds')
    const files = existsSync(dir) ? readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)) : []
    const expected = files
      .flatMap((f) => parseAllDocuments(readFileSync(join(dir, f), 'utf8')).map((d) => d.toJS()))
      .filter((doc) => doc?.kind === 'CustomResourceDefinition')
      .map((doc) => String(doc.metadata.name))
    expect([...info.crds].sort()).toEqual(expected.sort())
    for (const crd of expected) {
      const jsonpath = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
      const got = await env.kubectl(['get', 'crd', crd, '-o', jsonpath])
      expect(got.stdout, crd).toBe('True')
    }
  })
})

let innerNamespace: string | undefined
describe('a suite with its own useTestEnv()', () => {
  const inner = useTestEnv()
  it('gets a namespace different from the file-level one', () => {
    innerNamespace = inner.namespace
    expect(innerNamespace).not.toBe(env.namespace)
  })
})
describe('after that suite', () => {
  it('its namespace is deleted (and the namespace controller finishes the job)', async () => {
    const core = env.kc.makeApiClient(CoreV1Api)
    expect(innerNamespace).toBeDefined()
    await waitFor(
      `namespace ${innerNamespace} to disappear`,
      async () => {
        try {
          await core.readNamespace({ name: String(innerNamespace) })
          return false
        } catch (err) {
          return isApiError(err, 404)
        }
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    )
  })
})

/** Starts test/env/owner-process.ts in a separate Node process and returns the environment it started. */
describe('teardown', () => {
  it('stopEnvironment stops every server and removes the environment directory', async () => {
    const started = await startEnvironment(quiet)
    const pids = started.processes.map((p) => p.pid)
    expect(started.processes.map((p) => p.name).sort()).toEqual([
      'etcd',
      'kube-apiserver',
      'kube-controller-manager',
      'nats-server',
    ])
    expect(pids.every(isAlive)).toBe(true)
    expect((await httpGet(`${started.natsMonitorUrl}/healthz`)).status).toBe(200)

    await started.stop()
    expect(pids.filter(isAlive)).toEqual([])
    expect(processesMentioning(started.dir)).toEqual([])
    expect(existsSync(started.dir)).toBe(false)
  })

  it('a failed start leaves nothing behind and says which server failed', async () => {
    const dir = join(tmpdir(), `modelbackfill-failed-${process.pid}-${Date.now()}`)
    await expect(
      startEnvironment({ ...quiet, dir, binaries: { kubeControllerManager: '/bin/false' } }),
    ).rejects.toThrow(/kube-controller-manager exited before it was ready \(exit code 1\)/)
    expect(processesMentioning(dir)).toEqual([])
    expect(existsSync(dir)).toBe(false)
  })

  it('no orphans: when the owning process is SIGKILLed, its servers die within seconds', async () => {
    const { child, info } = await startOwnerProcess()
    try {
      const pids = info.processes.map((p) => p.pid)
      expect(pids).toHaveLength(4)
      expect(pids.every(isAlive)).toBe(true)
      expect(processesMentioning(info.dir).length).toBeGreaterThanOrEqual(4)

      process.kill(info.ownerPid, 'SIGKILL')
      await waitFor('the owner process to die', () => !isAlive(info.ownerPid), { timeoutMs: 5_000 })
      await waitFor(
        'the servers of a SIGKILLed owner to die',
        () => pids.every((pid) => !isAlive(pid)) && processesMentioning(info.dir).length === 0,
        { timeoutMs: 8_000, intervalMs: 100 },
      )
      await waitFor('the environment directory to be removed', () => !existsSync(info.dir), { timeoutMs: 5_000 })
    } finally {
      child.kill('SIGKILL')
    }
  })
})
