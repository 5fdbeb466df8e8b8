// The Helm chart (deploy/charts/model-backfill) against the real schemas: `helm template` of both modes, applied with
// strict field validation to the test apiserver that serves the upstream Knative, KEDA, eventing-natss and
// Prometheus-operator CRDs. The chart must render what the kustomize overlays render (same objects, same specs:
// a drift in either fails here), its PodDisruptionBudgets must select the preemption path's pods, watchNamespaces
// must turn the ClusterRoles into per-namespace Roles, and the deploy/monitoring/ manifests must be accepted too.
import { randomBytes } from 'node:crypto'
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createUser } from '@nats-io/nkeys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAllDocuments, stringify } from 'yaml'
import { generateRbac } from '../../../dev/tools/rbac/generate.js'
import { repoRoot } from '../../env/binaries.js'
import { run } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import {
  applyCrds,
  buildOverlay,
  FUNCTIONS,
  installUpstreamCrds,
  isCrd,
  type Manifest,
  toYaml,
  UPSTREAM_CRDS,
} from '../support/deploy.js'

const env = useTestEnv()
const CHART = join(repoRoot, 'deploy/charts/model-backfill')
const USERS = [...FUNCTIONS, 'ingress', 'bridge', 'provision']
const seed = () => new TextDecoder().decode(createUser().getSeed())
/** Every NATS identity as an NKey seed (the chart makes a Secret per user), and the ingress token: a minimal install. */
const BASE_VALUES = {
  nats: { credentials: Object.fromEntries(USERS.map((u) => [u, { seed: seed() }])) },
  ingress: { token: { value: 'test-token' } },
}
const releases: { name: string; manifests: Manifest[] }[] = []
let kubeVersion = ''
let tmp = ''

const parse = (text: string): Manifest[] =>
  parseAllDocuments(text)
    .map((d) => d.toJS() as Manifest | null)
    .filter((d): d is Manifest => Boolean(d?.kind))
const of = (ms: Manifest[], kind: string) => ms.filter((m) => m.kind === kind)

/** `helm template` with values (merged over BASE_VALUES unless `bare`); the result, or helm's error. */
async function helmTemplate(release: string, values: object, opts: { bare?: boolean; crds?: boolean } = {}) {
  const file = join(tmp, `${release}-${randomBytes(3).toString('hex')}.yaml`)
  await writeFile(file, stringify(values))
  const args = ['template', release, CHART, '-n', env.namespace, '--kube-version', kubeVersion]
  if (!opts.bare) {
    const base = join(tmp, 'base-values.yaml')
    await writeFile(base, stringify(BASE_VALUES))
    args.push('-f', base)
  }
  args.push('-f', file)
  if (opts.crds) args.push('--include-crds')
  const r = await run(env.binaries.helm as string, args, { timeoutMs: 60_000 })
  return { ...r, manifests: r.code === 0 ? parse(r.stdout) : [] }
}

async function render(release: string, values: object, opts: { crds?: boolean } = {}) {
  const r = await helmTemplate(release, values, opts)
  if (r.code !== 0) throw new Error(`helm template failed:\n${r.stderr}`)
  return r.manifests
}

/** Applies for real (CRDs server-side dry-run only: the environment already serves them) with strict validation. */
async function apply(release: string, manifests: Manifest[]) {
  releases.push({ name: release, manifests })
  const crds = manifests.filter(isCrd)
  if (crds.length > 0) {
    const dry = await env.kubectl(['apply', '--server-side', '--dry-run=server', '-f', '-'], { input: toYaml(crds) })
    if (dry.code !== 0) throw new Error(`the chart's CRDs refused:\n${dry.stderr}`)
  }
  const rest = manifests.filter((m) => !isCrd(m))
  const r = await env.kubectl(
    ['apply', '--server-side', '--field-manager=helm-chart-test', '--validate=strict', '-o', 'name', '-f', '-'],
    { input: toYaml(rest) },
  )
  if (r.code !== 0) throw new Error(`applying the chart failed:\n${r.stderr}`)
  return r.stdout.split('\n').filter(Boolean)
}

/** The Prometheus-operator CRDs of upstream-crds/ (PodMonitor, PrometheusRule, ServiceMonitor). */
async function installPrometheusOperatorCrds() {
  const dir = join(UPSTREAM_CRDS, 'prometheus-operator')
  const docs: string[] = []
  for (const f of (await readdir(dir)).filter((f) => f.endsWith('.yaml')).sort()) {
    docs.push(await readFile(join(dir, f), 'utf8'))
  }
  await applyCrds(env, docs.join('\n---\n'), 'Prometheus-operator CRDs')
}

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'chart-test-'))
  await installUpstreamCrds(env)
  await installPrometheusOperatorCrds()
  const version = await env.kubectl(['version', '-o', 'json'])
  kubeVersion = JSON.parse(version.stdout).serverVersion.gitVersion
})
afterAll(async () => {
  // Cluster-scoped RBAC and the extra namespaces; the test namespace goes with the fixture.
  for (const r of releases) {
    const cluster = r.manifests.filter((m) => !isCrd(m) && ['ClusterRole', 'ClusterRoleBinding'].includes(m.kind))
    if (cluster.length > 0) {
      await env.kubectl(['delete', '--ignore-not-found', '--wait=false', '-f', '-'], { input: toYaml(cluster) })
    }
  }
  await env.kubectl([
    'delete',
    'namespace',
    '--ignore-not-found',
    '--wait=false',
    '-l',
    `mbf-chart-test=${env.namespace}`,
  ])
  await rm(tmp, { recursive: true, force: true })
})

/**
 * An object reduced to what both install paths must agree on: names without the release prefix / the overlay's
 * suffix, no labels (Helm's own), no selectors (the chart adds the release instance), no Secret values (the
 * overlays hold placeholders), and the provision Job without the chart's revision suffix.
 */
function comparable(m: Manifest, rename: (s: string) => string): Manifest {
  const o = JSON.parse(rename(JSON.stringify(m))) as Manifest
  o.metadata = { name: o.metadata.name.replace(/-provision-\d+$/, '-provision') }
  if (o.kind === 'Secret') o.stringData = Object.keys(o.stringData ?? {}).sort()
  if (o.kind === 'ServiceAccount' && o.automountServiceAccountToken === true) delete o.automountServiceAccountToken
  if (o.kind === 'PodDisruptionBudget') delete o.spec.selector
  if (o.kind === 'Service' && o.apiVersion === 'v1') delete o.spec.selector
  if (o.spec?.template) {
    delete o.spec.selector
    delete o.spec.template.metadata?.labels
    for (const c of o.spec.template.spec.containers) {
      delete c.imagePullPolicy
      c.image = 'IMAGE'
    }
  }
  for (const s of o.subjects ?? []) delete s.namespace
  return o
}

/** The pod template labels of each workload, by component (Deployments, Knative Services). */
const podLabels = (ms: Manifest[]) =>
  new Map<string, Record<string, string>>(
    ms
      .filter((m) => m.kind === 'Deployment' || m.apiVersion === 'serving.knative.dev/v1')
      .map((m) => [m.spec.template.metadata.labels['app.kubernetes.io/component'], m.spec.template.metadata.labels]),
  )
const component = (m: Manifest): string =>
  (m.metadata as { labels?: Record<string, string> }).labels?.['app.kubernetes.io/component'] ?? ''
const selects = (selector: Record<string, string>, labels: Record<string, string> | undefined) =>
  Boolean(labels) && Object.entries(selector).every(([k, v]) => labels?.[k] === v)

describe.each(['keda', 'knative'] as const)('helm template --set mode=%s', (mode) => {
  const release = `model-backfill-${mode}-${randomBytes(2).toString('hex')}`
  let chart: Manifest[] = []

  it('applies cleanly with strict validation, the CRD and the Prometheus-operator objects included', async () => {
    chart = await render(
      release,
      { mode, metrics: { podMonitor: { enabled: true }, prometheusRule: { enabled: true } } },
      { crds: true },
    )
    const applied = await apply(release, chart)
    expect(applied).toHaveLength(chart.filter((m) => !isCrd(m)).length)
    // The CRD: a template (so `helm upgrade` updates it) that `helm uninstall` keeps, with the generated schema.
    const crds = chart.filter(isCrd)
    expect(crds.map((c) => c.metadata.name)).toEqual(['modelbackfills.ai.flexinfer'])
    expect((crds[0] as Manifest).metadata).toMatchObject({ annotations: { 'helm.sh/resource-policy': 'keep' } })
    const generated = parse(await readFile(join(repoRoot, 'crds/modelbackfill.yaml'), 'utf8'))[0] as Manifest
    expect(crds[0]?.spec).toEqual(generated.spec)
    const without = await render(`${release}-nocrd`, { mode, crd: { install: false } }, { crds: true })
    expect(without.filter(isCrd)).toEqual([])
    const got = await env.kubectl(['get', 'podmonitor,prometheusrule', '-n', env.namespace, '-o', 'name'])
    expect(got.stdout).toContain(`podmonitor.monitoring.coreos.com/${release}`)
    expect(got.stdout).toContain(`prometheusrule.monitoring.coreos.com/${release}`)
  })

  it(`renders what kubectl kustomize ${mode}/ renders (same objects and specs; drift in either fails)`, async () => {
    const overlay = await buildOverlay(env, mode, env.namespace)
    const fromChart = chart
      .filter((m) => !isCrd(m) && !['PodMonitor', 'PrometheusRule'].includes(m.kind))
      .map((m) => comparable(m, (s) => s.replaceAll(release, 'model-backfill')))
    // The overlays' base holds every NATS identity's Secret; the chart only those of the users this mode runs.
    const unused = mode === 'keda' ? ['model-backfill-nats-bridge'] : []
    const fromOverlay = overlay.manifests
      .filter((m) => !isCrd(m))
      .map((m) => comparable(m, (s) => s.replaceAll(overlay.suffix, '')))
      .filter((m) => !(m.kind === 'Secret' && unused.includes(m.metadata.name)))
    const key = (m: Manifest) => `${m.kind}/${m.metadata.name}`
    expect(fromChart.map(key).sort()).toEqual(fromOverlay.map(key).sort())
    const byKey = new Map(fromOverlay.map((m) => [key(m), m]))
    for (const m of fromChart) {
      const o = byKey.get(key(m)) as Manifest
      expect(m, key(m)).toEqual(o)
    }
    // The overlays' own PDBs select the preemption path's pods too.
    const pdbs = of(overlay.manifests, 'PodDisruptionBudget')
    const labels = podLabels(overlay.manifests)
    expect(pdbs.map((p) => p.metadata.name.replace(overlay.suffix, '')).sort()).toEqual(
      ['model-backfill-cancel', 'model-backfill-demand', 'model-backfill-ingress'].sort(),
    )
    for (const p of pdbs) {
      expect(selects(p.spec.selector.matchLabels, labels.get(component(p))), `${mode}/ PDB ${component(p)}`).toBe(true)
    }
  })

  it('a PodDisruptionBudget keeps one pod of ingress, demand and cancel; the PodMonitor scrapes every function and the ingress', () => {
    const labels = podLabels(chart)
    const pdbs = of(chart, 'PodDisruptionBudget')
    expect(pdbs.map(component).sort()).toEqual(['cancel', 'demand', 'ingress'])
    for (const p of pdbs) {
      expect(p.spec.minAvailable).toBe(1)
      expect(selects(p.spec.selector.matchLabels, labels.get(component(p))), component(p)).toBe(true)
      // …and nothing else of this release.
      for (const [other, l] of labels) {
        if (other !== component(p)) expect(selects(p.spec.selector.matchLabels, l)).toBe(false)
      }
    }
    const monitor = of(chart, 'PodMonitor')[0] as Manifest
    const scraped = [...labels].filter(
      ([c, l]) =>
        selects(monitor.spec.selector.matchLabels, l) &&
        (monitor.spec.selector.matchExpressions[0].values as string[]).includes(c),
    )
    expect(scraped.map(([c]) => c).sort()).toEqual(['admit', 'cancel', 'demand', 'ingress', 'lifecycle', 'source'])
    // The named port exists on those pods (keda: the container's `http`; Knative names the user port `user-port`; the
    // ingress Deployment's is `http` in both modes).
    expect(monitor.spec.podMetricsEndpoints.map((e: { port: string }) => e.port)).toEqual(
      mode === 'keda' ? ['http'] : ['user-port', 'http'],
    )
    expect(monitor.spec.podMetricsEndpoints[0].honorLabels).toBe(true)
  })
})

describe('chart values', () => {
  it('watchNamespaces: exactly the RBAC dev/tools/rbac/generate.ts emits, WATCH_NAMESPACES everywhere, enforced', async () => {
    const watched = [`${env.namespace}-a`, `${env.namespace}-b`]
    for (const ns of watched) {
      await env.kubectl(['create', 'namespace', ns])
      await env.kubectl(['label', 'namespace', ns, `mbf-chart-test=${env.namespace}`])
    }
    for (const mode of ['keda', 'knative'] as const) {
      const release = `model-backfill-ns-${mode}`
      const ms = await render(release, { mode, watchNamespaces: watched })
      // The one list of verbs is the generator's; the chart must emit the same objects (labels are Helm's own; the
      // event source is the ApiServerSource's ServiceAccount in mode knative, source's in mode keda).
      const rbacKinds = ['ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']
      const strip = (m: Manifest) => {
        const o = JSON.parse(JSON.stringify(m).replaceAll(release, 'model-backfill')) as Manifest
        o.metadata = { name: o.metadata.name, ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}) }
        return o
      }
      const watcherSa = mode === 'keda' ? 'model-backfill-source' : 'model-backfill-apiserversource'
      const generated = generateRbac({ namespaces: watched, serviceAccountNamespace: env.namespace }).map((m) => {
        const o = strip(m as Manifest)
        if (o.subjects && o.metadata.name.startsWith('model-backfill-watch')) o.subjects[0].name = watcherSa
        return o
      })
      const chartRbac = ms
        .filter((m) => rbacKinds.includes(m.kind) && !m.metadata.name.endsWith('-tokenreview'))
        .map(strip)
      const rbacKey = (m: Manifest) => `${m.kind}/${m.metadata.namespace ?? ''}/${m.metadata.name}`
      const byKey = (list: Manifest[]) => new Map(list.map((m) => [rbacKey(m), m]))
      expect([...byKey(chartRbac).keys()].sort()).toEqual([...byKey(generated).keys()].sort())
      for (const [k, m] of byKey(chartRbac)) expect(m, k).toEqual(byKey(generated).get(k))
      // Nothing cluster-wide can write.
      for (const r of of(ms, 'ClusterRole').filter((r) => !r.metadata.name.endsWith('-tokenreview'))) {
        const verbs = (r.rules as { verbs: string[] }[]).flatMap((x) => x.verbs)
        expect(
          verbs.filter((v) => !['get', 'list', 'watch'].includes(v)),
          r.metadata.name,
        ).toEqual([])
      }
      for (const w of ms.filter((m) => m.kind === 'Deployment' || m.apiVersion === 'serving.knative.dev/v1')) {
        expect(w.spec.template.spec.containers[0].env, w.metadata.name).toContainEqual({
          name: 'WATCH_NAMESPACES',
          value: watched.join(','),
        })
      }
      if (mode === 'knative') {
        for (const s of of(ms, 'ApiServerSource')) {
          expect(s.spec.namespaceSelector.matchExpressions).toEqual([
            { key: 'kubernetes.io/metadata.name', operator: 'In', values: watched },
          ])
        }
      }
      await apply(release, ms)
      const sa = (fn: string) => `system:serviceaccount:${env.namespace}:${release}-${fn}`
      const can = async (...args: string[]) => (await env.kubectl(['auth', 'can-i', ...args])).stdout.trim()
      expect(await can('create', 'jobs.batch', '-n', watched[0] as string, '--as', sa('admit'))).toBe('yes')
      expect(await can('delete', 'jobs.batch', '-n', watched[1] as string, '--as', sa('cancel'))).toBe('yes')
      expect(await can('create', 'jobs.batch', '-n', env.namespace, '--as', sa('admit'))).toBe('no')
      expect(await can('delete', 'jobs.batch', '-A', '--as', sa('cancel'))).toBe('no')
      expect(await can('patch', 'modelbackfills.ai.flexinfer', '-n', env.namespace, '--as', sa('lifecycle'))).toBe('no')
      const watcher = mode === 'keda' ? sa('source') : sa('apiserversource')
      expect(await can('watch', 'modelbackfills.ai.flexinfer', '-n', watched[1] as string, '--as', watcher)).toBe('yes')
      expect(await can('watch', 'modelbackfills.ai.flexinfer', '-A', '--as', watcher)).toBe('no')
    }
  })

  it('credentials from existing Secrets: each workload mounts only its own Secret (only its key), the chart makes none for it', async () => {
    const release = 'model-backfill-existing'
    const ms = await render(release, {
      nats: {
        credentials: {
          demand: { existingSecret: 'nats-demand', key: 'nkey' },
          cancel: { existingSecret: 'nats-all', key: 'cancel.creds', format: 'creds' },
        },
      },
      ingress: { token: { existingSecret: 'gateway-token', key: 'bearer' } },
    })
    const spec = (fn: string) =>
      of(ms, 'Deployment').find((d) => d.metadata.name === `${release}-${fn}`)?.spec.template.spec
    const envOf = (fn: string) => (spec(fn)?.containers[0].env ?? []) as { name: string; value?: string }[]
    const seedVolume = (fn: string) =>
      ((spec(fn)?.volumes ?? []) as { name: string; secret?: object }[]).find((v) => v.name === 'nats-seed')
    expect(seedVolume('demand')).toEqual({
      name: 'nats-seed',
      secret: { secretName: 'nats-demand', items: [{ key: 'nkey', path: 'seed' }] },
    })
    expect(envOf('demand')).toContainEqual({
      name: 'NATS_NKEY_SEED_FILE',
      value: '/var/run/secrets/model-backfill-nats/seed',
    })
    expect(seedVolume('cancel')?.secret).toEqual({
      secretName: 'nats-all',
      items: [{ key: 'cancel.creds', path: 'seed' }],
    })
    expect(envOf('cancel')).toContainEqual({
      name: 'NATS_CREDS_FILE',
      value: '/var/run/secrets/model-backfill-nats/seed',
    })
    expect(envOf('cancel').map((e) => e.name)).not.toContain('NATS_NKEY_SEED_FILE')
    expect(seedVolume('admit')).toEqual({ name: 'nats-seed', secret: { secretName: `${release}-nats-admit` } })
    // No password anywhere, and no credential in NATS_URL.
    for (const fn of ['source', 'demand', 'admit', 'cancel', 'lifecycle', 'ingress']) {
      expect(envOf(fn).map((e) => e.name)).not.toContain('NATS_PASSWORD')
      expect(envOf(fn).find((e) => e.name === 'NATS_URL')?.value).toBe(`nats://${fn}@$(NATS_HOST)`)
    }
    const secrets = of(ms, 'Secret').map((s) => s.metadata.name)
    expect(secrets).not.toContain(`${release}-nats-demand`)
    expect(secrets).not.toContain(`${release}-nats-cancel`)
    expect(secrets).not.toContain(`${release}-ingress-token`)
    expect(secrets).not.toContain(`${release}-nats-bridge`)
    expect(of(ms, 'Secret').find((s) => s.metadata.name === `${release}-nats-admit`)?.stringData).toEqual({
      seed: (BASE_VALUES.nats.credentials as Record<string, { seed: string }>).admit?.seed,
    })
    expect(spec('ingress')?.volumes).toContainEqual({ name: 'token', secret: { secretName: 'gateway-token' } })
    expect(envOf('ingress')).toContainEqual({
      name: 'INGRESS_TOKEN_FILE',
      value: '/var/run/secrets/model-backfill-ingress/bearer',
    })
  })

  it("gate.enabled: admit reads GATE_IMAGE (this release's image) and GATE_NATS_URL from the config; off by default", async () => {
    const release = 'model-backfill-gate'
    const configOf = (ms: Manifest[]) =>
      of(ms, 'ConfigMap').find((c) => c.metadata.name === `${release}-config`)?.data as Record<string, string>
    const on = await render(release, {
      gate: { enabled: true },
      image: { repository: 'registry.example/mbf', tag: '1.2.3' },
    })
    expect(configOf(on)).toMatchObject({
      GATE_IMAGE: 'registry.example/mbf:1.2.3',
      GATE_NATS_URL: 'nats://gate@nats.nats.svc.cluster.local:4222',
    })
    const admit = of(on, 'Deployment').find((d) => d.metadata.name === `${release}-admit`)
    const env = admit?.spec.template.spec.containers[0].env as { name: string; valueFrom?: object }[]
    for (const key of ['GATE_IMAGE', 'GATE_NATS_URL']) {
      expect(env.find((e) => e.name === key)?.valueFrom).toEqual({
        configMapKeyRef: { name: `${release}-config`, key, optional: true },
      })
    }
    // Only admit injects the gate.
    for (const d of of(on, 'Deployment').filter((d) => d !== admit)) {
      expect(JSON.stringify(d.spec.template.spec.containers[0].env), d.metadata.name).not.toContain('GATE_')
    }
    const own = await render(release, { gate: { enabled: true, natsUrl: 'nats://gate@nats.edge:4222' } })
    expect(configOf(own).GATE_NATS_URL).toBe('nats://gate@nats.edge:4222')
    expect(Object.keys(configOf(await render(release, {})))).not.toContain('GATE_IMAGE')
  })

  it('knative.httpAuth token: a bearer-token file instead of TokenReview (no audiences, no tokenreview role)', async () => {
    const release = 'model-backfill-token'
    const ms = await render(release, {
      mode: 'knative',
      knative: { httpAuth: { mode: 'token', token: { existingSecret: 'front-token', key: 'bearer' } } },
    })
    const services = ms.filter((m) => m.apiVersion === 'serving.knative.dev/v1')
    for (const fn of ['source', 'admit', 'lifecycle']) {
      const spec = services.find((m) => m.metadata.name === `${release}-${fn}`)?.spec.template.spec
      const env = spec.containers[0].env as { name: string; value?: string }[]
      expect(env).toContainEqual({ name: 'HTTP_AUTH_TOKEN_FILE', value: '/var/run/secrets/model-backfill-http/bearer' })
      expect(env.map((e) => e.name)).not.toContain('HTTP_AUTH')
      expect(spec.volumes).toContainEqual({ name: 'http-token', secret: { secretName: 'front-token' } })
    }
    for (const fn of ['demand', 'cancel']) {
      const env = services.find((m) => m.metadata.name === `${release}-${fn}`)?.spec.template.spec.containers[0].env
      expect((env as { name: string }[]).map((e) => e.name)).not.toContain('HTTP_AUTH_TOKEN_FILE')
    }
    for (const t of of(ms, 'Trigger')) expect(t.spec.subscriber.audience).toBeUndefined()
    expect(ms.filter((m) => m.metadata.name.endsWith('-tokenreview'))).toEqual([])
    const source = of(ms, 'ServiceAccount').find((m) => m.metadata.name === `${release}-source`)
    expect(source?.automountServiceAccountToken).toBe(false)
    // No OIDC assumed: the bridge sends no Broker token (with the default mode it reads the SinkBinding's, as the
    // overlay does: the drift test above).
    const bridge = of(ms, 'Deployment').find((m) => m.metadata.name === `${release}-bridge`)
    expect(bridge?.spec.template.spec.containers[0].env.map((e: { name: string }) => e.name)).toContain('FUNCTION')
    expect(bridge?.spec.template.spec.containers[0].env.map((e: { name: string }) => e.name)).not.toContain(
      'BRIDGE_SINK_TOKEN_FILE',
    )
  })

  it('refuses what cannot work: a missing credential, a preemption path allowed to scale to zero, an unknown mode', async () => {
    const missing = await helmTemplate('model-backfill-bad', { ingress: { token: { value: 't' } } }, { bare: true })
    expect(missing.code).not.toBe(0)
    expect(missing.stderr).toContain('nats.credentials.')
    const password = await helmTemplate('model-backfill-bad', { nats: { credentials: { demand: { password: 'pw' } } } })
    expect(password.stderr).toContain('nats.credentials.demand.password: NATS users are NKey-only')
    const notSeed = await helmTemplate('model-backfill-bad', { nats: { credentials: { admit: { seed: 'UABC' } } } })
    expect(notSeed.stderr).toContain('nats.credentials.admit.seed is not an NKey user seed')
    expect((await helmTemplate('model-backfill-bad', { functions: { demand: { minReplicas: 0 } } })).stderr).toContain(
      'functions.demand.minReplicas must be at least 1',
    )
    const knative = await helmTemplate('model-backfill-bad', {
      mode: 'knative',
      functions: { cancel: { knative: { minScale: 0 } } },
    })
    expect(knative.stderr).toContain('functions.cancel.knative.minScale must be at least 1')
    // values.schema.json refuses it before any template runs.
    expect((await helmTemplate('model-backfill-bad', { mode: 'lambda' })).stderr).toContain(
      "at '/mode': value must be one of 'keda', 'knative'",
    )
  })
})

describe('kubectl kustomize deploy/monitoring/', () => {
  it('the PodMonitor and PrometheusRule are accepted by the real Prometheus-operator CRDs', async () => {
    const built = await env.kubectl(['kustomize', join(repoRoot, 'deploy/monitoring')])
    expect(built.code, built.stderr).toBe(0)
    const ms = parse(built.stdout).map((m) => ({
      ...m,
      metadata: { ...m.metadata, name: `${m.metadata.name}-kustomize`, namespace: env.namespace },
    }))
    expect(ms.map((m) => m.kind).sort()).toEqual(['PodMonitor', 'PrometheusRule'])
    const r = await env.kubectl(['apply', '--server-side', '--validate=strict', '-o', 'name', '-f', '-'], {
      input: toYaml(ms),
    })
    expect(r.code, r.stderr).toBe(0)
    // The schema does refuse a misspelt field (the check is real).
    const typo = structuredClone(ms.find((m) => m.kind === 'PodMonitor') as Manifest)
    typo.metadata.name = 'typo-podmonitor'
    typo.spec.podMetricsEndpoints[0].honourLabels = true
    const refused = await env.kubectl(['apply', '--dry-run=server', '--validate=strict', '-f', '-'], {
      input: toYaml([typo]),
    })
    expect(refused.code).not.toBe(0)
    expect(refused.stderr).toMatch(/unknown field/)
  })
})
