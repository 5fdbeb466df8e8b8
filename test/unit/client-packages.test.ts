// The clients as users install them, from their packages: the TS client's tarball installed with npm (offline) and
// imported from the install, the Python client's wheel installed with pip into a fresh venv and imported there.
// The TS client is packed from a copy: release.test.ts and client-ts-pack.test.ts pack clients/ts in place (its
// prepack writes clients/ts/dist), and a third writer running beside them would race them.
import { execFileSync, spawnSync } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { repoRoot } from '../env/binaries.js'

mkdirSync(join(repoRoot, '.testenv'), { recursive: true })
// Below the repository: the copy's prepack (tsc) resolves TypeScript and the NATS types from the workspace.
const tmp = mkdtempSync(join(repoRoot, '.testenv', 'client-packages-'))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))
const run = (cmd: string, args: string[], cwd: string) =>
  execFileSync(cmd, args, { cwd, encoding: 'utf8', timeout: 180_000, stdio: ['ignore', 'pipe', 'pipe'] })

describe('client packages', () => {
  it('the TS client installs from its tarball with npm --offline and its pure functions work from there', () => {
    const copy = join(tmp, 'ts')
    cpSync(join(repoRoot, 'clients/ts'), copy, {
      recursive: true,
      filter: (src) => !/[/\\](dist|node_modules)$/.test(src),
    })
    // The copy is not two levels below the root tsconfig: point its extends there.
    const build = join(copy, 'tsconfig.build.json')
    const config = JSON.parse(readFileSync(build, 'utf8'))
    config.extends = join(repoRoot, 'tsconfig.json')
    writeFileSync(build, JSON.stringify(config))
    run('npm', ['pack', '--silent', '--pack-destination', tmp], copy)
    const tgz = readdirSync(tmp).find((f) => f.endsWith('.tgz'))
    expect(tgz).toBeDefined()
    // The registry is not reachable offline and @nats-io/* are not in every npm cache: the app's node_modules holds
    // the workspace's copies (the versions the client pins), so npm resolves them from there without a registry.
    const app = join(tmp, 'app')
    mkdirSync(join(app, 'node_modules'), { recursive: true })
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }))
    cpSync(join(repoRoot, 'node_modules/@nats-io'), join(app, 'node_modules/@nats-io'), {
      recursive: true,
      dereference: true,
    })
    run('npm', ['install', '--offline', '--no-save', '--no-audit', '--no-fund', join(tmp, tgz as string)], app)
    expect(existsSync(join(app, 'node_modules/@flexinfer/gateway-emitter/dist/index.js'))).toBe(true)
    const out = run(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        "import { perModelSubject } from '@flexinfer/gateway-emitter'; console.log(perModelSubject('team-a', 'gemma'))",
      ],
      app,
    )
    expect(out.trim()).toMatch(/\.team-a\.gemma$/)
  }, 240_000)

  it('the Python client installs from its wheel with pip --no-index into a fresh venv and imports', (ctx) => {
    const probe = spawnSync('python3', ['-c', 'import venv, ensurepip'], { encoding: 'utf8' })
    if (probe.status !== 0) {
      ctx.skip(`python3 with venv and ensurepip is required for the wheel test: ${probe.stderr || probe.error}`)
    }
    // The wheel is built as dev/scripts/release.ts builds it: setuptools' PEP 517 hook in the cache's build venv.
    const cache =
      process.env.MODELBACKFILL_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'modelbackfill')
    const builder = join(cache, 'py-build', 'bin', 'python')
    if (!existsSync(builder)) {
      run('python3', ['-m', 'venv', join(cache, 'py-build')], tmp)
      run(
        join(cache, 'py-build', 'bin', 'pip'),
        ['install', '-q', '--disable-pip-version-check', 'setuptools>=77,<81'],
        tmp,
      )
    }
    const src = join(tmp, 'python')
    cpSync(join(repoRoot, 'clients/python'), src, {
      recursive: true,
      filter: (p) => !/[/\\](build|\.pytest_cache|\.mypy_cache|__pycache__|[^/\\]*\.egg-info)$/.test(p),
    })
    const wheels = join(tmp, 'wheels')
    mkdirSync(wheels)
    run(
      builder,
      ['-c', 'import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])', wheels],
      src,
    )
    const wheel = readdirSync(wheels).find((f) => f.endsWith('.whl'))
    expect(wheel).toBeDefined()
    const venv = join(tmp, 'venv')
    run('python3', ['-m', 'venv', venv], tmp)
    run(
      join(venv, 'bin', 'pip'),
      ['install', '-q', '--disable-pip-version-check', '--no-index', '--no-deps', join(wheels, wheel as string)],
      tmp,
    )
    // Its runtime dependency (nats-py) cannot install without an index: the test clients' venv
    // (dev/scripts/install-clients.sh) supplies it through a .pth, which sys.path puts after the fresh venv's own
    // site-packages, so the flexinfer_gateway imported is the wheel's (asserted below).
    const deps = join(cache, 'py-clients')
    const depsSite = spawnSync(
      join(deps, 'bin', 'python'),
      ['-c', 'import nats, sysconfig; print(sysconfig.get_paths()["purelib"])'],
      { encoding: 'utf8' },
    )
    if (depsSite.status !== 0) {
      ctx.skip(`nats-py for the import comes from ${deps} (dev/scripts/install-clients.sh makes it): not usable here`)
    }
    const site = run(
      join(venv, 'bin', 'python'),
      ['-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
      tmp,
    )
    writeFileSync(join(site.trim(), 'zz-test-deps.pth'), `${depsSite.stdout.trim()}\n`)
    // From outside the sources, so the import is the installed wheel's.
    const out = run(
      join(venv, 'bin', 'python'),
      ['-c', 'import flexinfer_gateway as g; print(g.__file__); print(g.per_model_subject("team-a", "gemma"))'],
      tmp,
    )
    const [file, subject] = out.trim().split('\n')
    expect(file?.startsWith(site.trim())).toBe(true)
    expect(subject).toMatch(/\.team-a\.gemma$/)
  }, 240_000)
})
