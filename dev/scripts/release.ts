// `npm run release`: every artifact of a release, versioned from package.json, into release/ (git-ignored; nothing of
// it is committed), from this checkout alone:
//   model-backfill-image-<v>.oci.tar   the image (deploy/images/build.sh --app) as an OCI archive; image-digest.txt
//   model-backfill-<v>.tgz             the Helm chart (`helm package`, values.schema.json and NOTES.txt inside)
//   model-backfill.yaml                CRD + namespace + the keda install, the image by digest, for
//                                      `kubectl apply --server-side -f`
//   kubectl-mbf                        the plugin as one self-contained file (esbuild), and
//   flexinfer-kubectl-mbf-<v>.tgz      as an npm package with no dependencies (`npm install -g <tgz>`, offline)
//   flexinfer-gateway-emitter-<v>.tgz  the TS gateway client, JavaScript + type declarations
//   flexinfer_gateway-<v>*.whl, .tar.gz  the Python client's wheel and sdist
//   model-backfill-secrets             the per-install secrets command, one file with auth.conf built in
//   nats-official-chart-values.yaml    the official NATS chart's values for our accounts (deploy/nats/, docs/nats.md)
//   SHA256SUMS, release.json           checksums; what was built, with versions and the image digest
// --out DIR writes elsewhere; --skip-image builds no image (the bundle then names the image by tag, or by
// --image-digest sha256:…); --only a,b builds only those parts (image chart bundle plugin ts python secrets).
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { homedir } from 'node:os'
import { basename, dirname, join, relative } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { build } from 'esbuild'
import { parseAllDocuments, stringify } from 'yaml'

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '../..')
const PARTS = ['image', 'chart', 'bundle', 'plugin', 'ts', 'python', 'secrets'] as const
type Part = (typeof PARTS)[number]
/** The longest any one tool may take (the image build is the slow one: npm ci and esbuild inside podman). */
const STEP_TIMEOUT_MS = 30 * 60_000
const cache =
  process.env.MODELBACKFILL_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'modelbackfill')
const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { version: string }
const version = pkg.version

interface Options {
  out: string
  only: Set<Part>
  imageDigest?: string
  repository: string
}

function parseArgs(argv: string[]): Options {
  const opts: Options = {
    out: join(repoRoot, 'release'),
    only: new Set(PARTS),
    repository: 'ghcr.io/flexinfer/model-backfill',
  }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    const value = () => {
      const v = argv[++i]
      if (!v) throw new Error(`${a} needs a value`)
      return v
    }
    if (a === '--out') opts.out = value()
    else if (a === '--skip-image') opts.only.delete('image')
    else if (a === '--image-digest') opts.imageDigest = value()
    else if (a === '--repository') opts.repository = value()
    else if (a === '--only') {
      const parts = value().split(',')
      const unknown = parts.filter((p) => !(PARTS as readonly string[]).includes(p))
      if (unknown.length) throw new Error(`--only: unknown part ${unknown.join(', ')} (parts: ${PARTS.join(' ')})`)
      opts.only = new Set(parts as Part[])
    } else throw new Error(`unknown argument ${a} (--out DIR, --skip-image, --image-digest sha256:…, --only parts)`)
  }
  if (opts.imageDigest && !/^sha256:[a-f0-9]{64}$/.test(opts.imageDigest)) {
    throw new Error(`--image-digest must be sha256:<64 hex>, not ${opts.imageDigest}`)
  }
  return opts
}

const say = (s: string) => process.stderr.write(`release: ${s}\n`)
function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): string {
  return execFileSync(cmd, args, {
    cwd: opts.cwd ?? repoRoot,
    env: { ...process.env, ...opts.env },
    encoding: 'utf8',
    timeout: STEP_TIMEOUT_MS,
    maxBuffer: 256 * 1024 * 1024,
    stdio: ['ignore', 'pipe', 'inherit'],
  })
}
const binary = (name: string, fallback: string) => (existsSync(fallback) ? fallback : name)
const helm = binary('helm', join(cache, 'helm-v3.22.0', 'helm'))
const kubectl = binary('kubectl', join(cache, 'k8s-v1.34.4', 'kubectl'))

/** deploy/images/build.sh's image, saved from its podman storage as an OCI archive; its manifest digest. */
function image(out: string): string {
  say('building the image (deploy/images/build.sh --app)')
  run('bash', ['deploy/images/build.sh', '--app'])
  const images = JSON.parse(readFileSync(join(cache, 'images', 'images.json'), 'utf8')) as { app?: { ref: string } }
  if (!images.app) throw new Error('deploy/images/build.sh listed no app image')
  const archive = join(out, `model-backfill-image-${version}.oci.tar`)
  const store = join(cache, 'images', 'podman')
  run(
    'podman',
    [
      '--root',
      join(store, 'root'),
      '--runroot',
      join(store, 'run'),
      'save',
      '-q',
      '--format',
      'oci-archive',
      '-o',
      archive,
      images.app.ref,
    ],
    {
      env: {
        CONTAINERS_CONF: join(repoRoot, 'deploy/images/containers.conf'),
        CONTAINERS_STORAGE_CONF: join(cache, 'images', 'storage.conf'),
      },
    },
  )
  const index = JSON.parse(run('tar', ['-xOf', archive, 'index.json'])) as { manifests: { digest: string }[] }
  const digest = index.manifests[0]?.digest
  if (!digest?.startsWith('sha256:')) throw new Error(`${archive} has no manifest digest in index.json`)
  writeFileSync(join(out, 'image-digest.txt'), `${digest}\n`)
  return digest
}

function chart(out: string) {
  run(helm, ['package', 'deploy/charts/model-backfill', '-d', out, '--version', version, '--app-version', version])
}

/** CRD + namespace + the keda overlay, the image pinned by digest (or by this version's tag without one). */
function bundle(out: string, work: string, repository: string, digest?: string) {
  const dir = join(work, 'bundle')
  mkdirSync(dir, { recursive: true })
  const image = digest
    ? { name: 'model-backfill', newName: repository, digest }
    : { name: 'model-backfill', newName: repository, newTag: version }
  // The keda overlay renames the image already: match it under that name.
  const shipped = readFileSync(join(repoRoot, 'keda/kustomization.yaml'), 'utf8').match(/newName: *(\S+)/)?.[1]
  writeFileSync(
    join(dir, 'kustomization.yaml'),
    stringify({
      apiVersion: 'kustomize.config.k8s.io/v1beta1',
      kind: 'Kustomization',
      resources: [relative(dir, join(repoRoot, 'deploy/base/crds')), relative(dir, join(repoRoot, 'keda'))],
      images: [{ ...image, name: shipped ?? 'model-backfill' }],
    }),
  )
  const yaml = run(kubectl, ['kustomize', dir])
  const docs = parseAllDocuments(yaml).map((d) => d.toJS() as { kind: string })
  // The CRD first, then the Namespace, so one server-side apply creates them before what needs them.
  const order = (k: string) => (k === 'CustomResourceDefinition' ? 0 : k === 'Namespace' ? 1 : 2)
  docs.sort((a, b) => order(a.kind) - order(b.kind))
  const header =
    `# ModelBackfill ${version}: the ModelBackfill CRD, the model-backfill namespace and the KEDA install.\n` +
    '# kubectl apply --server-side -f model-backfill.yaml  (after the Secrets: model-backfill-secrets --out DIR)\n'
  writeFileSync(join(out, 'model-backfill.yaml'), header + docs.map((d) => stringify(d)).join('---\n'))
}

/** One CommonJS file with a shebang: runs on any Node >= 20 without node_modules, extension or package.json. */
async function singleFile(entry: string, outfile: string, define: Record<string, string> = {}) {
  await build({
    absWorkingDir: repoRoot,
    stdin: { contents: entry, resolveDir: repoRoot, loader: 'ts', sourcefile: `release-entry-${basename(outfile)}.ts` },
    outfile,
    bundle: true,
    format: 'cjs',
    platform: 'node',
    target: 'node20',
    minify: true,
    legalComments: 'none',
    logLevel: 'error',
    loader: { '.conf': 'text' },
    // CommonJS has no import.meta: module-level `new URL(…, import.meta.url)` must still parse (nothing reads those
    // files in a bundle; what they held is built in).
    define: { MBF_RELEASE_BUNDLE: 'true', 'import.meta.url': '"file:///release-bundle/"', ...define },
    banner: { js: '#!/usr/bin/env node' },
  })
  chmodSync(outfile, 0o755)
}

async function plugin(out: string, work: string) {
  const entry =
    "import { main } from './cmd/kubectl-mbf/kubectl-mbf.ts'\n" +
    'main(process.argv.slice(2)).then((o) => { process.stdout.write(o.stdout); process.stderr.write(o.stderr); process.exitCode = o.code })\n'
  await singleFile(entry, join(out, 'kubectl-mbf'))
  const dir = join(work, 'kubectl-mbf')
  mkdirSync(dir, { recursive: true })
  copyFileSync(join(out, 'kubectl-mbf'), join(dir, 'kubectl-mbf'))
  writeFileSync(
    join(dir, 'package.json'),
    `${JSON.stringify(
      {
        name: '@flexinfer/kubectl-mbf',
        version,
        description: 'kubectl mbf: what ModelBackfill is doing and why (read-only kubectl plugin)',
        license: 'Apache-2.0',
        bin: { 'kubectl-mbf': 'kubectl-mbf' },
        files: ['kubectl-mbf'],
        engines: { node: '>=20' },
      },
      null,
      2,
    )}\n`,
  )
  writeFileSync(join(dir, 'README.md'), '`npm install -g` this, then `kubectl mbf --help`.\n')
  run('npm', ['pack', '--silent', '--pack-destination', out], { cwd: dir })
}

/** The TS client packed as it is published: its prepack builds dist/ (JS + .d.ts), which its exports name. */
function tsClient(out: string) {
  run('npm', ['pack', '--silent', '--pack-destination', out], { cwd: join(repoRoot, 'clients/ts') })
}

/** Wheel and sdist with setuptools' own PEP 517 hooks, in a build venv of the cache (setuptools >= 77). */
function python(out: string, work: string) {
  const venv = join(cache, 'py-build')
  const py = join(venv, 'bin', 'python')
  if (!existsSync(py)) {
    say(`creating ${venv} (setuptools for the Python client's wheel)`)
    run('python3', ['-m', 'venv', venv])
    run(join(venv, 'bin', 'pip'), ['install', '-q', '--disable-pip-version-check', 'setuptools>=77,<81'])
  }
  // A copy: setuptools writes build/ and *.egg-info beside the sources.
  const src = join(work, 'python')
  run('cp', ['-r', join(repoRoot, 'clients/python'), src])
  for (const junk of ['build', '.pytest_cache', '.mypy_cache'])
    rmSync(join(src, junk), { recursive: true, force: true })
  // One process per hook: build_sdist leaves the process in a state where build_wheel writes elsewhere.
  for (const hook of ['build_sdist', 'build_wheel']) {
    run(py, ['-c', `import sys; from setuptools import build_meta; build_meta.${hook}(sys.argv[1])`, out], { cwd: src })
  }
}

async function secrets(out: string) {
  const entry =
    "import { main } from './dev/tools/secrets/generate.ts'\n" +
    "import authConf from './deploy/nats/auth.conf'\n" +
    'main(process.argv.slice(2), authConf)\n'
  await singleFile(entry, join(out, 'model-backfill-secrets'))
  // The NATS server's side of the same Secret: it mounts and includes what the command writes to DIR/nats.
  copyFileSync(join(repoRoot, 'deploy/nats/official-chart-values.yaml'), join(out, 'nats-official-chart-values.yaml'))
}

export async function release(opts: Options) {
  const { out, only } = opts
  rmSync(out, { recursive: true, force: true })
  const work = join(out, '.work')
  mkdirSync(work, { recursive: true })
  let digest = opts.imageDigest
  if (only.has('image')) digest = image(out)
  if (only.has('chart')) chart(out)
  if (only.has('bundle')) bundle(out, work, opts.repository, digest)
  if (only.has('plugin')) await plugin(out, work)
  if (only.has('ts')) tsClient(out)
  if (only.has('python')) python(out, work)
  if (only.has('secrets')) await secrets(out)
  rmSync(work, { recursive: true, force: true })
  const files = readdirSync(out).sort()
  const sums = files.map(
    (f) =>
      `${createHash('sha256')
        .update(readFileSync(join(out, f)))
        .digest('hex')}  ${f}`,
  )
  writeFileSync(join(out, 'SHA256SUMS'), `${sums.join('\n')}\n`)
  const manifest = { version, image: { repository: opts.repository, digest: digest ?? null }, files }
  writeFileSync(join(out, 'release.json'), `${JSON.stringify(manifest, null, 2)}\n`)
  say(`wrote ${files.length} artifacts of ${version} to ${out}`)
  return manifest
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    await release(parseArgs(process.argv.slice(2)))
  } catch (err) {
    say((err as Error).message)
    process.exit(1)
  }
}
