// vitest globalSetup of the integration projects: one real environment for the whole run, torn down at the end.
// Tests reach it through inject('testEnv'), normally via useTestEnv() from ./fixture.ts.
// Both integration projects (integration, and integration-engine, whose one file runs alone: vitest.config.ts) name
// this file; vitest loads it once per project, in the same process, so the environment is kept on globalThis and
// the second project shares it: one etcd, apiserver and NATS for the run, not one idle set beside the other.
import type { TestProject } from 'vitest/node'
import { type Environment, type EnvironmentInfo, startEnvironment } from './environment.js'

/** What the global setup provides to test files (JSON-serializable). */
export type TestEnvInfo = Omit<EnvironmentInfo, 'detached' | 'envShPath'>

declare module 'vitest' {
  export interface ProvidedContext {
    testEnv: TestEnvInfo
  }
}

interface Shared {
  env: Promise<Environment>
  users: number
}
const KEY = Symbol.for('modelbackfill.test-env')
const registry = globalThis as typeof globalThis & { [KEY]?: Shared }

export default async function setup({ provide }: TestProject): Promise<() => Promise<void>> {
  registry[KEY] ??= { env: startEnvironment(), users: 0 }
  const shared = registry[KEY]
  shared.users++
  const env = await shared.env
  const {
    detached: _detached,
    envShPath: _envSh,
    stop: _stop,
    stopServer: _stopServer,
    startServer: _startServer,
    ...info
  } = env
  provide('testEnv', info)
  return async () => {
    if (--shared.users > 0) return
    delete registry[KEY]
    await env.stop()
  }
}
