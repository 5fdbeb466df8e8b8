// The Python and Go clients' own test suites, run by vitest against the harness (a real nats-server of their own):
// what `npm test` and CI run. Their toolchains come from dev/scripts/install-clients.sh (idempotent: a stamp check).
import { execFile } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { homedir, tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { useTestEnv } from '../../env/fixture.js'
import { type ClientHarness, runSuite, startClientHarness } from './harness.js'

const cache = process.env.MODELBACKFILL_CACHE ?? join(homedir(), '.cache/modelbackfill')
export const venvPython = join(cache, 'py-clients/bin/python')

/** Registers one test that runs `command args` in `cwd` with the harness's FLEXINFER_TEST_* environment. */
export function clientSuite(name: string, command: string, args: string[], cwd: string, timeoutMs: number) {
  const env = useTestEnv()
  let harness: ClientHarness
  let dir: string
  beforeAll(async () => {
    // First run on a machine: the venv and LiteLLM, a few minutes; later a stamp check.
    await promisify(execFile)('bash', ['dev/scripts/install-clients.sh'], { timeout: 15 * 60_000 })
    dir = await mkdtemp(join(tmpdir(), `clients-${name}-`))
    harness = await startClientHarness(env.binaries.natsServer as string, dir)
  }, 16 * 60_000)
  afterAll(async () => {
    await harness?.stop()
    if (dir) await rm(dir, { recursive: true, force: true })
  })
  it(`the ${name} client's suite passes against a real nats-server`, { timeout: timeoutMs + 10_000 }, async () => {
    const started = Date.now()
    const { code, output } = await runSuite(command, args, { cwd, env: harness.env, timeoutMs })
    process.stderr.write(`[clients:${name}] ${Math.round((Date.now() - started) / 1000)} s\n${output.slice(-3000)}\n`)
    expect(code, output.slice(-8000)).toBe(0)
  })
}
