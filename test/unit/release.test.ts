// `npm run release` without the image (deploy/images/build.sh needs root and minutes; the install test builds it):
// every other artifact built into a temporary folder and used the way a machine without the repository uses it.
import { spawnSync } from 'node:child_process'
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAllDocuments } from 'yaml'
import { release } from '../../dev/scripts/release.js'
import { repoRoot } from '../env/binaries.js'

// biome-ignore lint/suspicious/noExplicitAny: rendered Kubernetes objects of many kinds
type Manifest = Record<string, any>
const version = (JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version
const DIGEST = `sha256:${'1'.repeat(64)}`
const tmp = mkdtempSync(join(tmpdir(), 'release-test-'))
const out = join(tmp, 'release')
/** A folder far from the repository: what runs there finds no node_modules, tsx or deploy/ of ours. */
const elsewhere = join(tmp, 'elsewhere')
let files: string[] = []

const sh = (cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) =>
  spawnSync(cmd, args, { encoding: 'utf8', timeout: 120_000, cwd: opts.cwd ?? elsewhere, env: opts.env ?? process.env })
const tarList = (file: string) =>
  sh('tar', ['-tzf', join(out, file)])
    .stdout.split('\n')
    .filter(Boolean)
const tarRead = (file: string, member: string) => sh('tar', ['-xzOf', join(out, file), member]).stdout

beforeAll(async () => {
  mkdirSync(elsewhere, { recursive: true })
  await release({
    out,
    only: new Set(['chart', 'bundle', 'plugin', 'ts', 'python', 'secrets']),
    imageDigest: DIGEST,
    repository: 'registry.example/mbf',
  })
  files = readdirSync(out)
}, 300_000)
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

describe('npm run release', () => {
  it('writes every artifact, checksummed, and nothing else', () => {
    expect(files.sort()).toEqual(
      [
        'SHA256SUMS',
        'release.json',
        `model-backfill-${version}.tgz`,
        'model-backfill.yaml',
        'kubectl-mbf',
        `flexinfer-kubectl-mbf-${version}.tgz`,
        'flexinfer-gateway-emitter-0.1.0.tgz',
        'flexinfer_gateway-0.1.0-py3-none-any.whl',
        'flexinfer_gateway-0.1.0.tar.gz',
        'model-backfill-secrets',
        'nats-official-chart-values.yaml',
      ].sort(),
    )
    const sums = readFileSync(join(out, 'SHA256SUMS'), 'utf8').trim().split('\n')
    expect(sums.map((l) => l.split('  ')[1]).sort()).toEqual(
      files.filter((f) => f !== 'SHA256SUMS' && f !== 'release.json').sort(),
    )
    expect(sh('sha256sum', ['-c', 'SHA256SUMS'], { cwd: out }).status).toBe(0)
    expect(JSON.parse(readFileSync(join(out, 'release.json'), 'utf8')).image).toEqual({
      repository: 'registry.example/mbf',
      digest: DIGEST,
    })
  })

  it('the chart package holds the schema and NOTES.txt, at the release version', () => {
    const chart = `model-backfill-${version}.tgz`
    expect(tarList(chart)).toEqual(
      expect.arrayContaining(['model-backfill/values.schema.json', 'model-backfill/templates/NOTES.txt']),
    )
    expect(tarRead(chart, 'model-backfill/Chart.yaml')).toMatch(new RegExp(`^version: ${version}$`, 'm'))
  })

  it('model-backfill.yaml: the CRD, then the namespace, then the keda install, the image by digest, no Secret', () => {
    const docs = parseAllDocuments(readFileSync(join(out, 'model-backfill.yaml'), 'utf8')).map(
      (d) => d.toJS() as Manifest,
    )
    expect(docs[0]).toMatchObject({
      kind: 'CustomResourceDefinition',
      metadata: { name: 'modelbackfills.ai.flexinfer' },
    })
    expect(docs[1]).toMatchObject({ kind: 'Namespace', metadata: { name: 'model-backfill' } })
    expect(docs.filter((d) => d.kind === 'Secret')).toEqual([])
    const pods = docs.filter((d) => d.spec?.template?.spec?.containers)
    expect(pods.map((d) => d.metadata.name).sort()).toEqual(
      ['admit', 'cancel', 'demand', 'ingress', 'lifecycle', 'provision', 'source'].map((f) => `model-backfill-${f}`),
    )
    for (const p of pods) expect(p.spec.template.spec.containers[0].image).toBe(`registry.example/mbf@${DIGEST}`)
    expect(docs.filter((d) => d.kind === 'ScaledObject')).toHaveLength(5)
  })

  it('kubectl-mbf: one file that runs with no repository beside it', () => {
    copyFileSync(join(out, 'kubectl-mbf'), join(elsewhere, 'kubectl-mbf'))
    const r = sh(join(elsewhere, 'kubectl-mbf'), ['--help'])
    expect(r.status, r.stderr).toBe(0)
    expect(r.stdout).toContain('kubectl mbf')
  })

  it('the plugin tarball installs globally, offline, in a clean HOME and prefix, and runs from there', () => {
    const home = join(tmp, 'home')
    const prefix = join(tmp, 'prefix')
    mkdirSync(home, { recursive: true })
    const env = { PATH: `${join(prefix, 'bin')}:${process.env.PATH}`, HOME: home, npm_config_cache: join(home, '.npm') }
    const install = sh(
      'npm',
      ['install', '-g', '--offline', '--prefix', prefix, join(out, `flexinfer-kubectl-mbf-${version}.tgz`)],
      { env },
    )
    expect(install.status, install.stderr).toBe(0)
    const pkg = JSON.parse(readFileSync(join(prefix, 'lib/node_modules/@flexinfer/kubectl-mbf/package.json'), 'utf8'))
    expect(pkg.dependencies).toBeUndefined()
    expect(pkg.engines).toEqual({ node: '>=20' })
    const r = sh('kubectl-mbf', ['--help'], { env })
    expect(r.status, r.stderr).toBe(0)
    expect(r.stdout).toContain('kubectl mbf')
  })

  it('the secrets command: one file with auth.conf built in, writing every identity', () => {
    copyFileSync(join(out, 'model-backfill-secrets'), join(elsewhere, 'model-backfill-secrets'))
    const r = sh(join(elsewhere, 'model-backfill-secrets'), ['--out', 'secrets', '--format', 'helm'])
    expect(r.status, r.stderr).toBe(0)
    const values = parseAllDocuments(readFileSync(join(elsewhere, 'secrets/values.yaml'), 'utf8'))[0]?.toJS()
    const users = Object.keys(values.nats.credentials).sort()
    expect(users).toEqual(['admit', 'bridge', 'cancel', 'demand', 'ingress', 'lifecycle', 'provision', 'source'])
    for (const u of users) expect(values.nats.credentials[u].seed, u).toMatch(/^SU[A-Z2-7]+$/)
    // nats-server's Secret holds what the NATS chart's values mount and include.
    const natsSecret = parseAllDocuments(readFileSync(join(elsewhere, 'secrets/nats/secret.yaml'), 'utf8'))[0]?.toJS()
    expect(Object.keys(natsSecret.stringData).sort()).toEqual(['accounts.conf', 'auth.conf', 'gates.conf'])
    expect(readFileSync(join(out, 'nats-official-chart-values.yaml'), 'utf8')).toContain('../nats-auth/accounts.conf')
  })

  it('the TS client package: JavaScript and declarations, exports pointing at them, importable', () => {
    const tgz = 'flexinfer-gateway-emitter-0.1.0.tgz'
    const pkg = JSON.parse(tarRead(tgz, 'package/package.json'))
    expect(pkg.exports['.']).toEqual({ types: './dist/index.d.ts', import: './dist/index.js' })
    const listed = tarList(tgz)
    for (const f of Object.values(pkg.exports).flatMap((e) => Object.values(e as object))) {
      expect(listed, f).toContain(`package/${(f as string).slice(2)}`)
    }
    expect(listed.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([])
    // Unpacked below the repository only to resolve its NATS dependencies from node_modules.
    mkdirSync(join(repoRoot, '.testenv'), { recursive: true })
    const dir = mkdtempSync(join(repoRoot, '.testenv', 'release-'))
    try {
      sh('tar', ['-xzf', join(out, tgz), '-C', dir])
      const r = sh(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `const m = await import(${JSON.stringify(join(dir, 'package/dist/index.js'))}); console.log(typeof m.openForegroundEmitter)`,
        ],
        { cwd: dir },
      )
      expect(r.status, r.stderr).toBe(0)
      expect(r.stdout.trim()).toBe('function')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it("the Python client's wheel and sdist carry the package and its py.typed", () => {
    const wheel = sh('python3', ['-m', 'zipfile', '-l', join(out, 'flexinfer_gateway-0.1.0-py3-none-any.whl')]).stdout
    expect(wheel).toContain('flexinfer_gateway/__init__.py')
    expect(wheel).toContain('flexinfer_gateway/py.typed')
    expect(tarList('flexinfer_gateway-0.1.0.tar.gz')).toContain('flexinfer_gateway-0.1.0/pyproject.toml')
  })
})
