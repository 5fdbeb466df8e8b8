// kubectl-mbf as an installed package runs it: the files tsconfig.build.json compiles (cmd/kubectl-mbf/ included) laid out as
// dist/, the bin shim beside them, and a node_modules without tsx (a devDependency an install does not have). The
// shim must run the compiled plugin there; with MBF_CLI_SOURCE=1 (the TypeScript) it must say clearly what is
// missing. Compiled per file with TypeScript's transpiler (the emit tsc gives these files; type checking is
// `npm run typecheck`'s job), so this costs seconds, not a full build.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { copyFile, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { afterAll, beforeAll, expect, it } from 'vitest'

const repo = join(dirname(fileURLToPath(import.meta.url)), '../..')
let pkg = ''

/** Runs the bin shim of `root` with a deadline; its exit code and output. */
async function runShim(root: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  const child = spawn(process.execPath, [join(root, 'cmd/kubectl-mbf/kubectl-mbf.mjs'), ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (d) => {
    stdout += d
  })
  child.stderr.on('data', (d) => {
    stderr += d
  })
  const timer = setTimeout(() => child.kill('SIGKILL'), 50_000)
  const [code] = await once(child, 'exit')
  clearTimeout(timer)
  return { code: code as number | null, stdout, stderr }
}

beforeAll(async () => {
  pkg = await mkdtemp(join(tmpdir(), 'mbf-installed-'))
  const file = join(repo, 'tsconfig.build.json')
  const parsed = ts.parseJsonConfigFileContent(ts.readConfigFile(file, ts.sys.readFile).config, ts.sys, repo)
  expect(parsed.errors).toEqual([])
  const sources = parsed.fileNames.filter((f) => !f.endsWith('.d.ts'))
  // The plugin is part of the build (the installed bin needs it compiled).
  expect(sources.map((f) => relative(repo, f))).toContain('cmd/kubectl-mbf/kubectl-mbf.ts')
  for (const src of sources) {
    const { outputText } = ts.transpileModule(ts.sys.readFile(src) ?? '', {
      // NodeNext emits ESM for this "type": "module" package; a file on its own has no package.json to tell it so.
      compilerOptions: { ...parsed.options, module: ts.ModuleKind.ESNext, sourceMap: false, inlineSourceMap: false },
      fileName: src,
    })
    const out = join(pkg, 'dist', relative(repo, src).replace(/\.ts$/, '.js'))
    await mkdir(dirname(out), { recursive: true })
    await writeFile(out, outputText)
  }
  await mkdir(join(pkg, 'cmd/kubectl-mbf'), { recursive: true })
  await copyFile(join(repo, 'cmd/kubectl-mbf/kubectl-mbf.mjs'), join(pkg, 'cmd/kubectl-mbf/kubectl-mbf.mjs'))
  await writeFile(join(pkg, 'package.json'), JSON.stringify({ name: 'model-backfill', type: 'module' }))
  // Every installed dependency but tsx.
  await mkdir(join(pkg, 'node_modules'))
  for (const name of await readdir(join(repo, 'node_modules'))) {
    if (name === 'tsx' || name === '.bin') continue
    await symlink(join(repo, 'node_modules', name), join(pkg, 'node_modules', name))
  }
}, 60_000)
afterAll(async () => {
  if (pkg) await rm(pkg, { recursive: true, force: true })
})

it('runs the compiled plugin without tsx: --help, and a one-line error for an unreadable kubeconfig', async () => {
  const help = await runShim(pkg, ['--help'])
  expect(help.stderr).toBe('')
  expect(help.code).toBe(0)
  expect(help.stdout).toContain('kubectl mbf explain NAME')
  const broken = await runShim(pkg, ['get'], { KUBECONFIG: join(pkg, 'no-such-kubeconfig') })
  expect(broken.code).toBe(1)
  expect(broken.stderr).toMatch(/^kubectl-mbf: cannot load the kubeconfig: .*no-such-kubeconfig/)
}, 60_000)

it('the TypeScript path names what is missing when neither dist/ nor tsx is there', async () => {
  const out = await runShim(pkg, ['--help'], { MBF_CLI_SOURCE: '1' })
  expect(out.code).toBe(1)
  expect(out.stderr).toContain('kubectl-mbf: neither the compiled plugin (dist/cmd/kubectl-mbf/')
}, 60_000)

it('the published package carries the compiled plugin: bin → the shim, dist/ and cmd/kubectl-mbf/ packed, built before packing', async () => {
  const manifest = JSON.parse(ts.sys.readFile(join(repo, 'package.json')) ?? '{}')
  expect(manifest.bin).toEqual({ 'kubectl-mbf': 'cmd/kubectl-mbf/kubectl-mbf.mjs' })
  // dist/ is git-ignored, so without `files` npm would leave it out of the package.
  expect(manifest.files).toEqual(expect.arrayContaining(['dist', 'cmd']))
  expect(manifest.scripts.prepack).toBe('npm run build')
})
