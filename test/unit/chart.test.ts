// The Helm chart rendered by the pinned helm (`helm template`, no cluster): the settings a platform team sets
// (extraEnv, scheduling, pod labels and annotations), `ingress.enabled: false`, and values.schema.json refusing what
// cannot work with a message naming the value. The chart against the real apiserver and the overlays is
// test/integration/deploy/chart.test.ts.
import { spawnSync } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createUser } from '@nats-io/nkeys'
import { afterAll, describe, expect, it } from 'vitest'
import { parseAllDocuments, stringify } from 'yaml'
import { natsReplicas } from '../../pkg/jetstream/topology.js'
import { cacheDir, pinnedHelmVersion, pinnedKubernetesVersion, repoRoot } from '../env/binaries.js'

// biome-ignore lint/suspicious/noExplicitAny: rendered Kubernetes objects of many kinds
type Manifest = Record<string, any>
const CHART = join(repoRoot, 'deploy/charts/model-backfill')
const HELM = join(cacheDir(), `helm-${pinnedHelmVersion()}`, 'helm')
const USERS = ['source', 'demand', 'admit', 'cancel', 'lifecycle', 'ingress', 'bridge', 'provision']
const seed = () => new TextDecoder().decode(createUser().getSeed())
const BASE = {
  nats: { credentials: Object.fromEntries(USERS.map((u) => [u, { seed: seed() }])) },
  ingress: { token: { value: 'test-token' } },
}
const tmp = mkdtempSync(join(tmpdir(), 'chart-unit-'))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

let n = 0
/** `helm template` (or `lint`) with BASE and `values` as files; exit code, output, parsed objects. */
function helm(values: object, opts: { command?: 'template' | 'lint'; bare?: boolean } = {}) {
  if (!existsSync(HELM)) throw new Error(`${HELM} is missing: run dev/scripts/install-binaries.sh`)
  const files = [...(opts.bare ? [] : [BASE]), values].map((v) => {
    const f = join(tmp, `values-${n++}.yaml`)
    writeFileSync(f, stringify(v))
    return f
  })
  const command = opts.command ?? 'template'
  const args = [command, ...(command === 'template' ? ['mbf'] : []), CHART, '-n', 'model-backfill']
  args.push('--kube-version', pinnedKubernetesVersion())
  for (const f of files) args.push('-f', f)
  const r = spawnSync(HELM, args, { encoding: 'utf8', timeout: 60_000 })
  const manifests =
    r.status === 0 && command === 'template'
      ? parseAllDocuments(r.stdout)
          .map((d) => d.toJS() as Manifest | null)
          .filter((d): d is Manifest => Boolean(d?.kind))
      : []
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, manifests }
}
function render(values: object) {
  const r = helm(values)
  if (r.code !== 0) throw new Error(`helm template failed:\n${r.stderr}`)
  return r.manifests
}
/** Every pod template of the release (Deployments, the Job, Knative Services) by its component label. */
const pods = (ms: Manifest[]) =>
  new Map<string, Manifest>(
    ms
      .filter((m) => m.spec?.template?.spec?.containers)
      .map((m) => [m.metadata.labels['app.kubernetes.io/component'] as string, m.spec.template]),
  )
const env = (pod: Manifest) => pod.spec.containers[0].env as { name: string; value?: string }[]

describe.each(['keda', 'knative'] as const)('mode %s', (mode) => {
  it('ingress.enabled=false: no workload points at an ingress Service that is not rendered', () => {
    const ms = render({ mode, ingress: { enabled: false } })
    const services = new Set(ms.filter((m) => m.kind === 'Service').map((m) => m.metadata.name as string))
    expect(services.has('mbf-model-backfill-ingress')).toBe(false)
    expect(pods(ms).has('ingress')).toBe(false)
    for (const [component, pod] of pods(ms)) {
      for (const e of env(pod)) {
        const host = e.value?.match(/^https?:\/\/([^/:]+)/)?.[1]
        if (host?.startsWith('mbf-')) expect(services, `${component} ${e.name}=${e.value}`).toContain(host)
      }
      expect(
        env(pod).map((e) => e.name),
        component,
      ).not.toContain('INGRESS_READY_URL')
    }
    // With the ingress on, admit and cancel watch it through its Service.
    const on = pods(render({ mode }))
    for (const fn of ['admit', 'cancel']) {
      expect(env(on.get(fn) as Manifest)).toContainEqual({
        name: 'INGRESS_READY_URL',
        value: 'http://mbf-model-backfill-ingress/readyz',
      })
    }
  })
})

describe('pod settings', () => {
  const spread = { maxSkew: 1, topologyKey: 'kubernetes.io/hostname', whenUnsatisfiable: 'ScheduleAnyway' }
  const values = {
    extraEnv: [
      { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: 'http://otel:4318' },
      { name: 'FAILSAFE_BLIND_MS', value: '20000' },
    ],
    podLabels: { team: 'ml' },
    podAnnotations: { 'example.com/owner': 'ml' },
    nodeSelector: { pool: 'system' },
    tolerations: [{ key: 'dedicated', operator: 'Exists', effect: 'NoSchedule' }],
    topologySpreadConstraints: [spread],
    imagePullSecrets: [{ name: 'regcred' }],
    functions: {
      demand: {
        extraEnv: [
          { name: 'FAILSAFE_BLIND_MS', value: '5000' },
          { name: 'DEMAND_ACK_POLICY', value: 'all' },
        ],
        nodeSelector: { pool: 'critical' },
        podLabels: { tier: 'preemption' },
        affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [] } } },
      },
    },
    ingress: { podAnnotations: { 'example.com/owner': 'gateways' } },
    provision: { nodeSelector: { pool: 'batch' } },
  }

  it.each(['keda', 'knative'] as const)('mode %s: every pod gets the top-level ones, a component its own', (mode) => {
    const all = pods(render({ mode, ...values }))
    const expected = mode === 'keda' ? [] : ['bridge']
    expect([...all.keys()].sort()).toEqual(
      ['admit', 'cancel', 'demand', 'ingress', 'lifecycle', 'provision', 'source', ...expected].sort(),
    )
    for (const [component, pod] of all) {
      const want = component === 'demand' ? 'critical' : component === 'provision' ? 'batch' : 'system'
      expect(pod.spec.nodeSelector, component).toEqual({ pool: want })
      expect(pod.spec.tolerations, component).toEqual(values.tolerations)
      expect(pod.spec.imagePullSecrets, component).toEqual([{ name: 'regcred' }])
      expect(pod.metadata.labels, component).toMatchObject({ team: 'ml', 'app.kubernetes.io/component': component })
      expect(pod.metadata.annotations['example.com/owner'], component).toBe(component === 'ingress' ? 'gateways' : 'ml')
      // A constraint without a selector spreads the component's own pods.
      expect(pod.spec.topologySpreadConstraints, component).toEqual([
        {
          ...spread,
          labelSelector: {
            matchLabels: {
              'app.kubernetes.io/name': 'model-backfill',
              'app.kubernetes.io/instance': 'mbf',
              'app.kubernetes.io/component': component,
            },
          },
        },
      ])
      const byName = new Map(env(pod).map((e) => [e.name, e.value]))
      expect(byName.get('OTEL_EXPORTER_OTLP_ENDPOINT'), component).toBe('http://otel:4318')
      expect(byName.get('FAILSAFE_BLIND_MS'), component).toBe(component === 'demand' ? '5000' : '20000')
      // One entry per name: the apiserver refuses duplicates in a server-side apply.
      expect(env(pod).length, component).toBe(byName.size)
    }
    const demand = all.get('demand') as Manifest
    expect(demand.metadata.labels.tier).toBe('preemption')
    expect(demand.spec.affinity).toEqual(values.functions.demand.affinity)
    expect(env(demand)).toContainEqual({ name: 'DEMAND_ACK_POLICY', value: 'all' })
    expect(all.get('source')?.spec.affinity).toBeUndefined()
    // The chart's own annotations stay next to the added ones.
    if (mode === 'keda') expect(demand.metadata.annotations['prometheus.io/scrape']).toBe('true')
    else expect(demand.metadata.annotations['autoscaling.knative.dev/min-scale']).toBe('1')
  })

  it('image.digest pins the image by digest', () => {
    const digest = `sha256:${'a'.repeat(64)}`
    for (const pod of pods(render({ image: { repository: 'registry.example/mbf', digest } })).values()) {
      expect(pod.spec.containers[0].image).toBe(`registry.example/mbf@${digest}`)
    }
  })

  it('refuses, naming the value: chart-owned env, selector labels, bad shapes, unknown keys', () => {
    const refused = (values: object, message: string | RegExp) => {
      const r = helm(values)
      expect(r.code, JSON.stringify(values)).not.toBe(0)
      expect(r.stderr).toMatch(message)
    }
    refused({ extraEnv: [{ name: 'NATS_URL', value: 'x' }] }, /extraEnv \([a-z.]+\): NATS_URL is set by the chart/)
    refused(
      { functions: { cancel: { extraEnv: [{ name: 'INGRESS_READY_URL', value: 'http://x' }] } } },
      'INGRESS_READY_URL is set by the chart',
    )
    // Without the chart's ingress, one of your own may be watched.
    const own = pods(
      render({
        ingress: { enabled: false },
        functions: { cancel: { extraEnv: [{ name: 'INGRESS_READY_URL', value: 'http://gw-ingress/readyz' }] } },
      }),
    )
    expect(env(own.get('cancel') as Manifest)).toContainEqual({
      name: 'INGRESS_READY_URL',
      value: 'http://gw-ingress/readyz',
    })
    refused(
      { podLabels: { 'app.kubernetes.io/component': 'x' } },
      "podLabels: app.kubernetes.io/component is the chart's own",
    )
    refused({ extraEnv: [{ value: 'x' }] }, /extraEnv\/0.*missing propert.*name/)
    refused({ extraEnv: { A: 'b' } }, /at '\/extraEnv'.*got object, want array/)
    refused({ nats: { replicas: 2 } }, /at '\/nats\/replicas': value must be one of 1, 3, 5/)
    refused({ functions: { demand: { minReplicas: -1 } } }, /at '\/functions\/demand\/minReplicas': minimum/)
    refused({ tolerations: { key: 'x' } }, /at '\/tolerations'/)
    refused({ topologySpreadConstraints: [{ maxSkew: 1 }] }, /topologySpreadConstraints\/0.*missing propert/)
    refused({ extraEnvs: [] }, /additional properties 'extraEnvs' not allowed/)
    refused({ ingress: { enabled: 'sometimes' } }, /at '\/ingress\/enabled': got string, want boolean/)
    refused({ mode: 'lambda' }, /at '\/mode': value must be one of 'keda', 'knative'/)
    refused({ image: { digest: 'latest' } }, /at '\/image\/digest'/)
  })

  it('helm lint passes with the schema and the settings above', () => {
    const r = helm({ ...values, ingress: { enabled: false } }, { command: 'lint' })
    expect(r.code, r.stdout + r.stderr).toBe(0)
  })
})

describe('NOTES.txt', () => {
  /** NOTES.txt as `helm install` prints it: rendered from a copy of the chart where it is an ordinary template. */
  function notes(values: object) {
    const copy = join(tmp, `chart-${n++}`)
    cpSync(CHART, copy, { recursive: true })
    const text = readFileSync(join(copy, 'templates/NOTES.txt'), 'utf8')
    writeFileSync(
      join(copy, 'templates/notes-as-configmap.yaml'),
      `{{- define "notes.test" }}\n${text}\n{{- end }}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n` +
        'data: {notes: {{ include "notes.test" . | quote }}}\n',
    )
    const f = join(tmp, `values-${n++}.yaml`)
    writeFileSync(f, stringify({ ...BASE, ...values }))
    const args = ['template', 'mbf', copy, '-n', 'mbf-ns', '-f', f, '--kube-version', pinnedKubernetesVersion()]
    const r = spawnSync(HELM, [...args, '--show-only', 'templates/notes-as-configmap.yaml'], { encoding: 'utf8' })
    expect(r.status, r.stderr).toBe(0)
    return (parseAllDocuments(r.stdout)[0]?.toJS() as Manifest | undefined)?.data?.notes as string
  }

  it('says where things are and what watches foreground demand', () => {
    const on = notes({})
    expect(on).toContain('kubectl -n mbf-ns get job -l app.kubernetes.io/instance=mbf')
    expect(on).toContain('http://mbf-model-backfill-ingress.mbf-ns.svc/')
    const off = notes({ ingress: { enabled: false, token: { value: '' } } })
    expect(off).toContain('ingress.enabled=false')
    expect(off).not.toContain('-ingress.mbf-ns.svc')
  })
})

it('one default for the JetStream replicas: chart, overlays, install.sh and the provision code agree', () => {
  const chart = parseAllDocuments(readFileSync(join(CHART, 'values.yaml'), 'utf8'))[0]?.toJS() as Manifest
  const config = parseAllDocuments(readFileSync(join(repoRoot, 'deploy/base/config.yaml'), 'utf8'))[0]?.toJS()
  const script = readFileSync(join(repoRoot, 'dev/scripts/install.sh'), 'utf8')
  const fromScript = script.match(/nats_replicas=\$\{MBF_NATS_REPLICAS:-(\d+)\}/)?.[1]
  const values = [chart.nats.replicas, Number(config.data.NATS_REPLICAS), Number(fromScript), natsReplicas({})]
  expect(values).toEqual([1, 1, 1, 1])
})
