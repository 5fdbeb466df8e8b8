// `npm run bench:ab -- <ref> [phases] [--rounds N] [--quick]`: this tree (A, as it is on disk) against another git
// ref (B, checked out in a temporary worktree), the hot-path phases of both run back to back and alternating
// (A B, B A, A B …: each side first in half the rounds), every run on fresh servers, so that a change's effect shows on a noisy machine where two runs minutes
// apart differ 2–3×. Prints one table (figure, A and B as the median of their rounds, B/A) and the load average before
// and after every run; JSON in dev/bench/results/ab-latest.json. It runs each tree's own bench: dev/bench/run.ts through its
// BENCH_ONLY switch (lateness, preemption, burst, ingest) and dev/bench/cold-start-run.ts (cold start); a figure a
// tree's bench does not print is "—". Run it alone: anything else on the machine is in both columns, unevenly.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { existsSync, openSync, writeSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { repoRoot } from '../../test/env/binaries.js'
import { startEnvironment } from '../../test/env/environment.js'
import {
  AbUsageError,
  abRows,
  benchOnlyFor,
  figuresOf,
  formatAbTable,
  lastJsonLine,
  parseAbArgs,
  toolPath,
} from './ab-table.js'

const fail = (message: string): never => {
  process.stderr.write(`bench:ab: ${message}\n`)
  process.exit(2)
}

let args: ReturnType<typeof parseAbArgs>
try {
  args = parseAbArgs(process.argv.slice(2))
} catch (err) {
  if (err instanceof AbUsageError) fail(err.message)
  throw err
}
const { ref, phases, rounds, quick } = args

/** The commit a ref names in this repository, or a clear refusal (before anything is started). */
function resolveRef(name: string): string {
  try {
    return execFileSync('git', ['rev-parse', '--verify', '--quiet', '--end-of-options', `${name}^{commit}`], {
      cwd: repoRoot,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 10_000,
    }).trim()
  } catch {
    return fail(`${JSON.stringify(name)} is not a commit in ${repoRoot} (git rev-parse --verify found none)`)
  }
}
const sha = resolveRef(ref)
const headSha = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: repoRoot, encoding: 'utf8' }).trim()
const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], {
  cwd: repoRoot,
  encoding: 'utf8',
})
const labelA = `${headSha.slice(0, 9)}${dirty.trim() ? '+changes' : ''}`
const labelB = `${ref} (${sha.slice(0, 9)})`

await mkdir(join(repoRoot, 'dev/bench/results'), { recursive: true })
const LOG_PATH = join(repoRoot, 'dev/bench/results/ab.log')
const logFd = openSync(LOG_PATH, 'w')
const say = (line: string) => {
  process.stderr.write(`[ab] ${line}\n`)
  writeSync(logFd, `[ab ${new Date().toISOString()}] ${line}\n`)
}
const load = () => loadavg().map((l) => Math.round(l * 10) / 10)

/** A command with a deadline: its output to the log, its stdout also returned. Killed (its group) past the deadline. */
async function runLogged(
  command: string,
  argv: string[],
  opts: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs: number },
): Promise<{ code: number | null; stdout: string; timedOut: boolean }> {
  const child: ChildProcess = spawn(command, argv, {
    cwd: opts.cwd,
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', logFd],
    detached: true, // its own process group: a timeout ends it and whatever it started
  })
  running.add(child)
  let stdout = ''
  child.stdout?.on('data', (d: Buffer) => {
    // Bounded: the results are the last line; a chatty child must not grow this process without end.
    stdout = (stdout + d.toString()).slice(-1_000_000)
    writeSync(logFd, d)
  })
  let timedOut = false
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  const timer = setTimeout(() => {
    timedOut = true
    say(`${command} ${argv.join(' ')}: not done within ${opts.timeoutMs / 1000} s, stopped`)
    stopGroup(child)
  }, opts.timeoutMs)
  const code = await exited
  clearTimeout(timer)
  running.delete(child)
  return { code, stdout, timedOut }
}
const running = new Set<ChildProcess>()
/** SIGTERM to the group (the benches stop their servers on it), SIGKILL 30 s later if still there. */
function stopGroup(child: ChildProcess) {
  if (child.pid === undefined || child.exitCode !== null) return
  try {
    process.kill(-child.pid, 'SIGTERM')
  } catch {}
  setTimeout(() => {
    try {
      if (child.exitCode === null && child.pid !== undefined) process.kill(-child.pid, 'SIGKILL')
    } catch {}
  }, 30_000).unref()
}

// B's tree: a detached worktree under the OS tmpdir, removed however the run ends.
const tmp = await mkdtemp(join(tmpdir(), 'mbf-ab-'))
const treeB = join(tmp, 'tree')
let cleanedUp = false
async function cleanup() {
  if (cleanedUp) return
  cleanedUp = true
  for (const child of running) stopGroup(child)
  try {
    execFileSync('git', ['worktree', 'remove', '--force', treeB], { cwd: repoRoot, stdio: 'ignore', timeout: 60_000 })
  } catch {}
  await rm(tmp, { recursive: true, force: true }).catch(() => {})
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    say(`${signal}: stopping`)
    void cleanup().finally(() => process.exit(130))
  })
}

const tsxOf = (tree: string) => join(tree, 'node_modules/.bin/tsx')
/** Where `path` (as this tree lays it out) is in `tree`: a ref from before `dev/` keeps its tooling at the root. */
const inTree = (tree: string, path: string) => toolPath(path, (p) => existsSync(join(tree, p)))
const runs: Record<string, unknown>[] = []
const results: { a: Record<string, unknown>[]; b: Record<string, unknown>[] } = { a: [], b: [] }
try {
  say(`A: ${repoRoot} at ${labelA}; B: ${labelB} in ${treeB}; phases ${phases.join(',')}; ${rounds} round(s)`)
  execFileSync('git', ['worktree', 'add', '--detach', treeB, sha], { cwd: repoRoot, stdio: ['ignore', logFd, logFd] })
  // node_modules: A's own when the lockfiles are the same (an install is minutes on this machine), else B's own.
  const lockA = await readFile(join(repoRoot, 'package-lock.json'), 'utf8')
  const lockB = await readFile(join(treeB, 'package-lock.json'), 'utf8').catch(() => '')
  if (lockA === lockB) {
    await symlink(await realpath(join(repoRoot, 'node_modules')), join(treeB, 'node_modules'))
    say('B: same package-lock.json, node_modules shared with A')
  } else {
    say('B: package-lock.json differs, npm ci in its tree (minutes)')
    const ci = await runLogged('npm', ['ci', '--no-audit', '--no-fund'], { cwd: treeB, timeoutMs: 20 * 60_000 })
    if (ci.code !== 0) throw new Error(`npm ci in B's tree failed (exit ${ci.code}); see ${LOG_PATH}`)
  }
  // Cold start runs the image's entry point: each tree bundled as the image is.
  if (phases.includes('cold')) {
    for (const [side, tree] of [
      ['A', repoRoot],
      ['B', treeB],
    ] as const) {
      const bundle = inTree(tree, 'dev/scripts/bundle.mjs')
      if (!existsSync(join(tree, bundle))) {
        say(`${side}: no ${bundle}, its cold start is not measured`)
        continue
      }
      const b = await runLogged(process.execPath, [bundle], { cwd: tree, timeoutMs: 5 * 60_000 })
      if (b.code !== 0) throw new Error(`bundling ${side} failed (exit ${b.code}); see ${LOG_PATH}`)
    }
  }
  const only = benchOnlyFor(phases)
  if (
    only?.BENCH_ONLY === 'hot' &&
    !(await readFile(join(treeB, inTree(treeB, 'dev/bench/run.ts')), 'utf8').catch(() => '')).includes("'hot'")
  ) {
    say(
      "B's dev/bench/run.ts knows no BENCH_ONLY=hot: it runs every step (longer; the extra figures are not in the table)",
    )
  }
  const benchTimeoutMs = (quick ? 20 : 60) * 60_000
  const sides = [
    ['a', repoRoot],
    ['b', treeB],
  ] as const
  for (let round = 1; round <= rounds; round++) {
    // Each side goes first in every other round (A B, B A, …), so that an effect of going first cancels out over an
    // even number of rounds: the same code on both sides, A first in all 3 rounds, gave admission lateness p50 34
    // against 14 ms (whether from the order or the tree was not settled: a run alternating it showed no order effect).
    for (const [side, tree] of round % 2 === 1 ? sides : [...sides].reverse()) {
      const result: Record<string, unknown> = {}
      const benchRun = inTree(tree, 'dev/bench/run.ts')
      const coldRun = inTree(tree, 'dev/bench/cold-start-run.ts')
      if (only) {
        const before = load()
        const t0 = Date.now()
        const r = await runLogged(tsxOf(tree), [benchRun], {
          cwd: tree,
          env: { ...only, BENCH_QUICK: quick ? '1' : '0' },
          timeoutMs: benchTimeoutMs,
        })
        const after = load()
        const out = lastJsonLine(r.stdout)
        const seconds = Math.round((Date.now() - t0) / 1000)
        runs.push({
          round,
          side,
          run: benchRun,
          ...only,
          load_before: before,
          load_after: after,
          seconds,
          exit: r.code,
        })
        say(
          `round ${round} ${side.toUpperCase()} ${benchRun} (BENCH_ONLY=${only.BENCH_ONLY}): ${seconds} s, exit ${r.code}${out ? '' : ', no results'}; load ${before.join(' ')} → ${after.join(' ')}`,
        )
        Object.assign(result, out)
      }
      if (phases.includes('cold') && existsSync(join(tree, coldRun))) {
        // Fresh servers for it too (dev/bench/cold-start-run.ts measures against an environment it is given).
        const before = load()
        const t0 = Date.now()
        const environment = await startEnvironment({ log: (l) => writeSync(logFd, `[env] ${l}\n`) })
        let r: Awaited<ReturnType<typeof runLogged>>
        try {
          r = await runLogged(tsxOf(tree), [coldRun], {
            cwd: tree,
            env: { NATS_URL: environment.natsUrl, KUBECONFIG: environment.kubeconfigPath, BENCH_COLD_RUNS: '1' },
            timeoutMs: 10 * 60_000,
          })
        } finally {
          await environment.stop()
        }
        const after = load()
        const out = lastJsonLine(r.stdout)
        const seconds = Math.round((Date.now() - t0) / 1000)
        runs.push({
          round,
          side,
          run: coldRun,
          load_before: before,
          load_after: after,
          seconds,
          exit: r.code,
        })
        say(
          `round ${round} ${side.toUpperCase()} dev/bench/cold-start-run.ts: ${seconds} s, exit ${r.code}${out ? '' : ', no results'}; load ${before.join(' ')} → ${after.join(' ')}`,
        )
        // Its own load figure is not a figure of the table.
        if (out) for (const [k, v] of Object.entries(out)) if (k !== 'runs' && k !== 'load_average_1m') result[k] = v
      }
      results[side].push(result)
    }
  }
} finally {
  await cleanup()
}

const rows = abRows(figuresOf(phases, [...results.a, ...results.b]), results.a, results.b)
const table = formatAbTable(rows, labelA, labelB)
const loads = runs
  .map(
    (r) =>
      `round ${r.round} ${String(r.side).toUpperCase()} ${r.run}: load ${(r.load_before as number[]).join(' ')} → ${(r.load_after as number[]).join(' ')} (${r.seconds} s)`,
  )
  .join('\n')
process.stdout.write(`${table}\n\nload average (1, 5, 15 min) before → after each run:\n${loads}\n`)
await writeFile(
  join(repoRoot, 'dev/bench/results/ab-latest.json'),
  `${JSON.stringify({ date: new Date().toISOString(), a: labelA, b: labelB, sha_b: sha, phases, rounds, quick, rows, runs, results }, null, 2)}\n`,
)
say(`JSON: dev/bench/results/ab-latest.json; log: ${LOG_PATH}`)
process.exit(0)
