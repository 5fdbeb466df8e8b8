// vitest globalSetup of the integration project: one real environment for the whole run, torn down at the end.
// Tests reach it through inject('testEnv'), normally via useTestEnv() from ./fixture.ts.
import type { TestProject } from 'vitest/node'
import { type EnvironmentInfo, startEnvironment } from './environment.js'

/** What the global setup provides to test files (JSON-serializable). */
export type TestEnvInfo = Omit<EnvironmentInfo, 'detached' | 'envShPath'>

declare module 'vitest' {
  export interface ProvidedContext {
    testEnv: TestEnvInfo
  }
}

export default async function setup({ provide }: TestProject): Promise<() => Promise<void>> {
  const env = await startEnvironment()
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
    await env.stop()
  }
}
