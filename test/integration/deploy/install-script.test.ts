// dev/scripts/install.sh — the path docs/install.md runs — against a cluster of its own (etcd, kube-apiserver,
// kube-controller-manager; no kubelet, so nothing is waited for): it stops without FlexInfer's CRDs; installs the
// CRD, the NATS auth Secret and the workloads with generated Secrets (kustomize and Helm); keeps those secrets when
// run again; and its uninstall leaves the CRD and every ModelBackfill in place, Helm's included
// (helm.sh/resource-policy: keep), while remove-finalizers and delete-crd do what they say. The shared test
// environment is not used: this file installs and deletes the cluster-wide CRD.
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createUser, fromSeed } from '@nats-io/nkeys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { repoRoot } from '../../env/binaries.js'
import { type Environment, startEnvironment } from '../../env/environment.js'
import { run } from '../../env/exec.js'
import { type Manifest, toYaml, upstreamCrds } from '../support/deploy.js'

let own: Environment
let tmp = ''
const CRD = 'modelbackfills.ai.flexinfer'

const kubectl = (args: string[], input?: string) =>
  run(own.binaries.kubectl, ['--kubeconfig', own.kubeconfigPath, ...args], { input, timeoutMs: 120_000 })
const script = (command: string, settings: Record<string, string>) =>
  run('sh', [join(repoRoot, 'dev/scripts/install.sh'), command], {
    cwd: tmp,
    timeoutMs: 240_000,
    env: {
      ...process.env,
      KUBECONFIG: own.kubeconfigPath,
      KUBECTL: own.binaries.kubectl,
      HELM: own.binaries.helm as string,
      MBF_WAIT: 'false',
      MBF_NATS_REPLICAS: '1',
      MBF_IMAGE: 'registry.example/model-backfill:9.9.9',
      ...settings,
    },
  })
const names = async (args: string[]) =>
  (await kubectl([...args, '-o', 'name'])).stdout.split('\n').filter(Boolean).sort()
const jsonOf = async (args: string[]) => JSON.parse((await kubectl([...args, '-o', 'json'])).stdout)
const backfill = (namespace: string, name: string, finalizers: string[]) =>
  toYaml([
    {
      apiVersion: 'ai.flexinfer/v1alpha2',
      kind: 'ModelBackfill',
      metadata: { name, namespace, finalizers },
      spec: { modelRef: 'gemma', templateRef: 'eval' },
    } as Manifest,
  ])

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'install-script-'))
  // A cluster with no CRD at all: FlexInfer's stand-ins are added by the first test, after the refusal.
  await mkdir(join(tmp, 'no-crds'))
  own = await startEnvironment({ crdsDir: join(tmp, 'no-crds'), log: () => {} })
  const upstream = await kubectl(
    ['apply', '--server-side', '-f', '-'],
    toYaml((await upstreamCrds()).filter((c) => c.spec.group === 'keda.sh')),
  )
  expect(upstream.code, upstream.stderr).toBe(0)
}, 240_000)

afterAll(async () => {
  await own?.stop()
  if (tmp) await rm(tmp, { recursive: true, force: true })
})

describe('dev/scripts/install.sh on a cluster of its own', () => {
  it('stops before changing anything when FlexInfer’s CRDs are missing, naming them', async () => {
    const r = await script('install', { MBF_DIR: join(tmp, 'refused') })
    expect(r.code).not.toBe(0)
    expect(r.stderr).toContain(
      "FlexInfer's CRDs are missing: models.ai.flexinfer gamingsessions.ai.flexinfer gpuleases.ai.flexinfer",
    )
    expect(await names(['get', 'crd'])).not.toContain(`customresourcedefinition.apiextensions.k8s.io/${CRD}`)
    const bad = await script('install', { MBF_MODE: 'lambda' })
    expect(bad.stderr).toContain("MBF_MODE must be keda, knative, helm-keda or helm-knative, not 'lambda'")
    // FlexInfer's kinds, as FlexInfer would have installed them (the repository's test stand-ins).
    const dir = join(tmp, 'flexinfer-crds')
    await mkdir(dir)
    for (const f of ['model.yaml', 'gamingsession.yaml', 'gpulease.yaml'])
      await copyFile(join(repoRoot, 'crds', f), join(dir, f))
    expect((await kubectl(['apply', '--server-side', '-f', dir])).code).toBe(0)
  }, 60_000)

  it('keda: the CRD, the NATS auth Secret, the workloads with their generated Secrets; run again, the same secrets', async () => {
    const settings = { MBF_DIR: join(tmp, 'keda') }
    const r = await script('install', settings)
    expect(r.code, r.stderr).toBe(0)
    await kubectl(['wait', '--for=condition=Established', `crd/${CRD}`, '--timeout=60s'])
    expect(await names(['get', 'secret', '-n', 'nats'])).toEqual(['secret/model-backfill-nats-auth'])
    const deployments = await names(['get', 'deploy', '-n', 'model-backfill'])
    expect(deployments).toEqual(
      ['admit', 'cancel', 'demand', 'ingress', 'lifecycle', 'source'].map((f) => `deployment.apps/model-backfill-${f}`),
    )
    expect(await names(['get', 'scaledobject', '-n', 'model-backfill'])).toHaveLength(5)
    const secretNames = await names(['get', 'secret', '-n', 'model-backfill'])
    expect(secretNames).toEqual(
      [
        'model-backfill-ingress-token',
        ...['admit', 'bridge', 'cancel', 'demand', 'ingress', 'lifecycle', 'provision', 'source'].map(
          (u) => `model-backfill-nats-${u}`,
        ),
      ]
        .map((n) => `secret/${n}`)
        .sort(),
    )
    const deploy = await jsonOf(['get', 'deploy', 'model-backfill-demand', '-n', 'model-backfill'])
    expect(deploy.spec.template.spec.containers[0].image).toBe('registry.example/model-backfill:9.9.9')
    const config = await jsonOf(['get', 'configmap', 'model-backfill-config', '-n', 'model-backfill'])
    expect(config.data).toMatchObject({ NATS_HOST: 'nats.nats.svc.cluster.local:4222', NATS_REPLICAS: '1' })
    expect(await names(['get', 'job', '-n', 'model-backfill'])).toEqual(['job.batch/model-backfill-provision'])
    // Again (an upgrade): the secrets are reused, the provision Job made anew.
    const seed = (await jsonOf(['get', 'secret', 'model-backfill-nats-admit', '-n', 'model-backfill'])).data.seed
    const jobUid = (await jsonOf(['get', 'job', 'model-backfill-provision', '-n', 'model-backfill'])).metadata.uid
    const again = await script('install', settings)
    expect(again.code, again.stderr).toBe(0)
    expect(again.stderr).toContain('using the secrets in')
    expect((await jsonOf(['get', 'secret', 'model-backfill-nats-admit', '-n', 'model-backfill'])).data.seed).toBe(seed)
    expect((await jsonOf(['get', 'job', 'model-backfill-provision', '-n', 'model-backfill'])).metadata.uid).not.toBe(
      jobUid,
    )
  }, 300_000)

  it('keda uninstall: the workloads go, the CRD and every ModelBackfill stay; remove-finalizers frees only ours', async () => {
    await kubectl(['create', 'namespace', 'team-a'])
    const created = await kubectl(
      ['apply', '-f', '-'],
      backfill('team-a', 'eval-gemma', ['ai.flexinfer/modelbackfill', 'example.com/keep-me']),
    )
    expect(created.code, created.stderr).toBe(0)
    const r = await script('uninstall', { MBF_DIR: join(tmp, 'keda') })
    expect(r.code, r.stderr).toBe(0)
    expect(r.stderr).toContain(`kept the ${CRD} CRD and every ModelBackfill`)
    expect(await names(['get', 'deploy', '-n', 'model-backfill'])).toEqual([])
    expect(await names(['get', 'crd', CRD])).toEqual([`customresourcedefinition.apiextensions.k8s.io/${CRD}`])
    expect(await names(['get', 'mbf', '-n', 'team-a'])).toEqual(['modelbackfill.ai.flexinfer/eval-gemma'])
    // With no controller, a deletion waits on the finalizer until it is removed.
    await kubectl(['delete', 'mbf', 'eval-gemma', '-n', 'team-a', '--wait=false'])
    expect((await jsonOf(['get', 'mbf', 'eval-gemma', '-n', 'team-a'])).metadata.deletionTimestamp).toBeTruthy()
    const freed = await script('remove-finalizers', {})
    expect(freed.code, freed.stderr).toBe(0)
    expect((await jsonOf(['get', 'mbf', 'eval-gemma', '-n', 'team-a'])).metadata.finalizers).toEqual([
      'example.com/keep-me',
    ])
    await kubectl([
      'patch',
      'mbf',
      'eval-gemma',
      '-n',
      'team-a',
      '--type=merge',
      '-p',
      '{"metadata":{"finalizers":null}}',
    ])
  }, 120_000)

  it('MBF_GATE_NAMESPACES: a gate user per namespace in the NATS auth Secret, its seed in that namespace, admit configured', async () => {
    const settings = { MBF_DIR: join(tmp, 'gate'), MBF_NAMESPACE: 'mbf-gate', MBF_NATS_NAMESPACE: 'nats-gate' }
    const missing = await script('install', { ...settings, MBF_GATE_NAMESPACES: 'team-a, team-nowhere' })
    expect(missing.code).not.toBe(0)
    expect(missing.stderr).toContain('MBF_GATE_NAMESPACES names team-nowhere, which does not exist')
    expect(await names(['get', 'secret', '-n', 'nats-gate'])).toEqual([])
    const r = await script('install', { ...settings, MBF_GATE_NAMESPACES: 'team-a' })
    expect(r.code, r.stderr).toBe(0)
    const seed = Buffer.from(
      (await jsonOf(['get', 'secret', 'model-backfill-gate', '-n', 'team-a'])).data.seed,
      'base64',
    ).toString()
    const publicKey = fromSeed(new TextEncoder().encode(seed)).getPublicKey()
    const gatesConf = async () =>
      Buffer.from(
        (await jsonOf(['get', 'secret', 'model-backfill-nats-auth', '-n', 'nats-gate'])).data['gates.conf'],
        'base64',
      ).toString()
    expect(await gatesConf()).toContain(`nkey: ${publicKey}`)
    expect(await gatesConf()).toContain('"flexinfer.preempt.team-a.>"')
    const config = await jsonOf(['get', 'configmap', 'model-backfill-config', '-n', 'mbf-gate'])
    expect(config.data).toMatchObject({
      GATE_IMAGE: 'registry.example/model-backfill:9.9.9',
      GATE_NATS_URL: 'nats://gate@nats.nats.svc.cluster.local:4222',
    })
    // Run again without it: the gate is off (admit's config loses both), the namespace's user goes from NATS.
    const off = await script('install', settings)
    expect(off.code, off.stderr).toBe(0)
    const after = await jsonOf(['get', 'configmap', 'model-backfill-config', '-n', 'mbf-gate'])
    expect(Object.keys(after.data)).not.toContain('GATE_IMAGE')
    expect(await gatesConf()).not.toContain(publicKey)
    expect((await script('uninstall', settings)).code).toBe(0)
  }, 300_000)

  it('helm-keda: adopts the existing CRD into the release; helm uninstall keeps it (resource-policy keep)', async () => {
    const settings = { MBF_MODE: 'helm-keda', MBF_DIR: join(tmp, 'helm'), MBF_NAMESPACE: 'mbf-helm' }
    const r = await script('install', settings)
    expect(r.code, r.stderr).toBe(0)
    expect(r.stderr).toContain(`adopting the existing ${CRD} into release model-backfill`)
    const crd = await jsonOf(['get', 'crd', CRD])
    expect(crd.metadata.annotations).toMatchObject({
      'helm.sh/resource-policy': 'keep',
      'meta.helm.sh/release-name': 'model-backfill',
      'meta.helm.sh/release-namespace': 'mbf-helm',
    })
    expect(await names(['get', 'deploy', '-n', 'mbf-helm'])).toHaveLength(6)
    const demand = await jsonOf(['get', 'deploy', 'model-backfill-demand', '-n', 'mbf-helm'])
    expect(demand.spec.template.spec.containers[0].image).toBe('registry.example/model-backfill:9.9.9')
    expect((await kubectl(['apply', '-f', '-'], backfill('team-a', 'eval-helm', []))).code).toBe(0)
    const gone = await script('uninstall', settings)
    expect(gone.code, gone.stderr).toBe(0)
    expect(await names(['get', 'deploy', '-n', 'mbf-helm'])).toEqual([])
    expect(await names(['get', 'crd', CRD])).toEqual([`customresourcedefinition.apiextensions.k8s.io/${CRD}`])
    expect(await names(['get', 'mbf', '-n', 'team-a'])).toEqual(['modelbackfill.ai.flexinfer/eval-helm'])
  }, 300_000)

  it("an installation the script did not make (0.1.0's chart): nats-auth keeps its seeds, token and the gateways' key", async () => {
    // What 0.1.0's chart (release mbf) left in its namespace: a Secret per function's seed and the ingress token.
    const ns = 'mbf-previous'
    await kubectl(['create', 'namespace', ns])
    const pair = () => {
      const p = createUser()
      return { seed: new TextDecoder().decode(p.getSeed()), publicKey: p.getPublicKey() }
    }
    const old = Object.fromEntries(['demand', 'cancel', 'gateway'].map((u) => [u, pair()]))
    const secret = (name: string, data: Record<string, string>) =>
      ({ apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: ns }, stringData: data }) as Manifest
    const made = await kubectl(
      ['apply', '-f', '-'],
      toYaml([
        secret('mbf-model-backfill-nats-demand', { seed: old.demand?.seed as string }),
        secret('mbf-model-backfill-nats-cancel', { seed: old.cancel?.seed as string }),
        secret('mbf-model-backfill-ingress-token', { token: 'b'.repeat(64) }),
      ]),
    )
    expect(made.code, made.stderr).toBe(0)
    const settings = {
      MBF_MODE: 'helm-keda',
      MBF_RELEASE: 'mbf',
      MBF_NAMESPACE: ns,
      MBF_NATS_NAMESPACE: 'nats-previous',
    }
    // Without the gateways' key it stops, writing nothing: new keys would lock the gateways out at nats' reload.
    const refused = await script('nats-auth', { ...settings, MBF_DIR: join(tmp, 'previous') })
    expect(refused.code).not.toBe(0)
    expect(refused.stderr).toContain('set MBF_GATEWAY_NKEY')
    expect(await names(['get', 'secret', '-n', 'nats-previous'])).toEqual([])
    const r = await script('nats-auth', {
      ...settings,
      MBF_DIR: join(tmp, 'previous'),
      MBF_GATEWAY_NKEY: old.gateway?.publicKey as string,
    })
    expect(r.code, r.stderr).toBe(0)
    expect(r.stderr).toContain('keeping the NATS identities and the ingress token')
    const values = await readFile(join(tmp, 'previous', 'secrets', 'values.yaml'), 'utf8')
    expect(values).toContain(old.demand?.seed)
    expect(values).toContain(old.cancel?.seed)
    expect(values).toContain('b'.repeat(64))
    const auth = Buffer.from(
      (await jsonOf(['get', 'secret', 'model-backfill-nats-auth', '-n', 'nats-previous'])).data['auth.conf'],
      'base64',
    ).toString()
    for (const u of ['demand', 'cancel', 'gateway']) expect(auth, u).toContain(`nkey: ${old[u]?.publicKey}`)
    // The seeds read back are not left beside the output: secrets/ is where seeds are kept.
    expect(await readdir(join(tmp, 'previous'))).toEqual(['secrets'])
    await kubectl(['delete', 'namespace', ns, 'nats-previous', '--wait=false'])
  }, 120_000)

  it('delete-crd: on explicit request only, the finalizers first, then the CRD and every ModelBackfill with it', async () => {
    expect((await kubectl(['apply', '-f', '-'], backfill('team-a', 'held', ['ai.flexinfer/modelbackfill']))).code).toBe(
      0,
    )
    const r = await script('delete-crd', {})
    expect(r.code, r.stderr).toBe(0)
    const waited = await kubectl(['wait', '--for=delete', `crd/${CRD}`, '--timeout=90s'])
    expect(waited.code, waited.stderr).toBe(0)
  }, 150_000)
})
