// dev/scripts/install.sh render: what `install` would apply, rendered with the real kubectl kustomize and helm and no
// cluster. A user's values files and kustomize patches (MBF_VALUES, MBF_PATCH, or files put in MBF_DIR/values.d/ and
// MBF_DIR/patches/) apply on every run, and no run rewrites them.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { parseAllDocuments, stringify } from 'yaml'
import { cacheDir, pinnedHelmVersion, pinnedKubernetesVersion, repoRoot } from '../env/binaries.js'

// biome-ignore lint/suspicious/noExplicitAny: rendered Kubernetes objects of many kinds
type Manifest = Record<string, any>
const tmp = mkdtempSync(join(tmpdir(), 'install-render-'))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

function install(dir: string, settings: Record<string, string>) {
  const r = spawnSync('sh', [join(repoRoot, 'dev/scripts/install.sh'), 'render'], {
    encoding: 'utf8',
    timeout: 120_000,
    env: {
      ...process.env,
      // No cluster: the script must not need one to render.
      KUBECONFIG: join(tmp, 'no-kubeconfig'),
      KUBECTL: join(cacheDir(), `k8s-${pinnedKubernetesVersion()}`, 'kubectl'),
      HELM: join(cacheDir(), `helm-${pinnedHelmVersion()}`, 'helm'),
      MBF_DIR: dir,
      ...settings,
    },
  })
  const rendered = (): Manifest[] =>
    parseAllDocuments(readFileSync(join(dir, 'rendered.yaml'), 'utf8'))
      .map((d) => d.toJS() as Manifest | null)
      .filter((d): d is Manifest => Boolean(d?.kind))
  return { code: r.status, stderr: r.stderr, rendered }
}
const file = (name: string, content: object | string) => {
  const f = join(tmp, name)
  writeFileSync(f, typeof content === 'string' ? content : stringify(content))
  return f
}
const workload = (ms: Manifest[], suffix: string) =>
  ms.find((m) => m.kind === 'Deployment' && m.metadata.name.endsWith(suffix)) as Manifest

describe('install.sh render', () => {
  it('kustomize: MBF_PATCH files apply on every later run, and the copy in MBF_DIR/patches/ is the user’s', () => {
    const dir = join(tmp, 'kustomize')
    const smp = file('demand-pool.yaml', {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'model-backfill-demand' },
      spec: { template: { spec: { nodeSelector: { pool: 'critical' } } } },
    })
    const json6902 = file(
      'cancel-env.yaml',
      '# target: Deployment/model-backfill-cancel\n' +
        '- {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: FAILSAFE_BLIND_MS, value: "20000"}}\n',
    )
    const first = install(dir, { MBF_PATCH: `${smp},${json6902}` })
    expect(first.code, first.stderr).toBe(0)
    expect(workload(first.rendered(), '-demand').spec.template.spec.nodeSelector).toEqual({ pool: 'critical' })
    expect(workload(first.rendered(), '-cancel').spec.template.spec.containers[0].env).toContainEqual({
      name: 'FAILSAFE_BLIND_MS',
      value: '20000',
    })
    // The user edits their copy; a later run without MBF_PATCH keeps and applies it.
    const copy = join(dir, 'patches/demand-pool.yaml')
    writeFileSync(copy, readFileSync(copy, 'utf8').replace('critical', 'edited'))
    const again = install(dir, {})
    expect(again.code, again.stderr).toBe(0)
    expect(readFileSync(copy, 'utf8')).toContain('edited')
    expect(workload(again.rendered(), '-demand').spec.template.spec.nodeSelector).toEqual({ pool: 'edited' })
    // Naming the original again would replace the edit: refused, saying where to edit.
    const clash = install(dir, { MBF_PATCH: smp })
    expect(clash.code).not.toBe(0)
    expect(clash.stderr).toContain('patches/demand-pool.yaml exists and differs')
    expect(readFileSync(copy, 'utf8')).toContain('edited')
    expect(install(dir, { MBF_VALUES: smp }).stderr).toContain('MBF_VALUES is for the helm-* modes')
  })

  it('helm: MBF_VALUES (ingress.enabled=false, extraEnv, scheduling) over the script’s settings, kept in values.d/', () => {
    const dir = join(tmp, 'helm')
    const values = file('custom.yaml', {
      ingress: { enabled: false },
      extraEnv: [{ name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: 'http://otel:4318' }],
      tolerations: [{ key: 'dedicated', operator: 'Exists' }],
      nats: { replicas: 3 },
    })
    const r = install(dir, { MBF_MODE: 'helm-keda', MBF_VALUES: values, MBF_NATS_HOST: 'nats.edge:4222' })
    expect(r.code, r.stderr).toBe(0)
    const ms = r.rendered()
    expect(ms.filter((m) => m.metadata.name.includes('-ingress'))).toEqual([])
    for (const d of ms.filter((m) => m.kind === 'Deployment')) {
      const env = d.spec.template.spec.containers[0].env as { name: string; value?: string }[]
      expect(
        env.map((e) => e.name),
        d.metadata.name,
      ).not.toContain('INGRESS_READY_URL')
      expect(env, d.metadata.name).toContainEqual({ name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: 'http://otel:4318' })
      expect(d.spec.template.spec.tolerations, d.metadata.name).toEqual([{ key: 'dedicated', operator: 'Exists' }])
    }
    const config = ms.find((m) => m.kind === 'ConfigMap' && m.metadata.name.endsWith('-config')) as Manifest
    // The script's setting where the file says nothing; the file's where it does.
    expect(config.data).toMatchObject({ NATS_HOST: 'nats.edge:4222', NATS_REPLICAS: '3' })
    // A server list: KEDA reads the first server's monitoring endpoint.
    const list = install(dir, { MBF_MODE: 'helm-keda', MBF_NATS_HOST: 'nats-a.nats:4222,nats-b.nats:4222' })
    expect(list.code, list.stderr).toBe(0)
    const scaled = list.rendered().filter((m) => m.kind === 'ScaledObject')
    expect(scaled.length).toBeGreaterThan(0)
    for (const s of scaled) {
      for (const t of s.spec.triggers) expect(t.metadata.natsServerMonitoringEndpoint).toBe('nats-a.nats:8222')
    }
    const again = install(dir, { MBF_MODE: 'helm-keda' })
    expect(again.code, again.stderr).toBe(0)
    expect(again.rendered().filter((m) => m.metadata.name.includes('-ingress'))).toEqual([])
    expect(readFileSync(join(dir, 'values.d/custom.yaml'), 'utf8')).toBe(readFileSync(values, 'utf8'))
    const bad = file('zz-bad.yaml', { nats: { replicas: 2 } })
    const refused = install(dir, { MBF_MODE: 'helm-keda', MBF_VALUES: bad })
    expect(refused.code).not.toBe(0)
    expect(refused.stderr).toMatch(/nats\/replicas': value must be one of 1, 3, 5/)
  })
})
