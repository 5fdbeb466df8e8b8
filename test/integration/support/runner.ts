// Each test file runs its own system: every function in-process (as `npm start` does), scoped to the file's
// namespace and with durable consumers of its own, so files running in parallel on the shared NATS server
// never take (or act on) each other's events.
import { randomBytes } from 'node:crypto'
import { type Runner, type RunnerOptions, startRunner } from '../../../process/runner.js'
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
