// Each test file runs its own system: every function in-process (as `npm start` does), scoped to the file's
// namespace and with durable consumers of its own, so files running in parallel on the shared NATS server
// never take (or act on) each other's events.
import { randomBytes } from 'node:crypto'
import { type Runner, type RunnerOptions, startRunner } from '../../../cmd/manager/runner.js'
import type { TestEnv } from '../../env/fixture.js'

export function testInstance(): string {
  return `t${randomBytes(4).toString('hex')}`
}

export function startTestRunner(env: TestEnv, options: Partial<RunnerOptions> = {}): Promise<Runner> {
  return startRunner({
    natsUrl: env.natsUrl,
    kubeconfig: env.kc,
    watch: true,
    namespaces: [env.namespace],
    instance: testInstance(),
    ...options,
  })
}

/**
 * One system split into runners as deployed where admission races are tested: source and lifecycle (watching), demand
 * with admit, and cancel on its own, so a test can hook one function's calls without touching another's.
 */
export type SplitSystem = Awaited<ReturnType<typeof startSplitSystem>>

export async function startSplitSystem(env: TestEnv) {
  const instance = testInstance()
  const started: Runner[] = []
  const start = async (options: Partial<RunnerOptions>) => {
    const runner = await startTestRunner(env, { instance, ...options })
    started.push(runner)
    return runner
  }
  const stop = async () => {
    for (const runner of started.splice(0).reverse()) await runner.stop()
  }
  try {
    const lifecycle = await start({ functions: ['source', 'lifecycle'] })
    const admit = await start({ functions: ['demand', 'admit'], watch: false })
    const cancel = await start({ functions: ['cancel'], watch: false })
    return { lifecycle, admit, cancel, stop }
  } catch (err) {
    await stop()
    throw err
  }
}
