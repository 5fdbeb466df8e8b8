// What most backfill test files stand on: the file's own system (every function in-process, startTestRunner) and a
// BackfillWorld in the file's namespace, started before the file's tests and stopped after them.
import { afterAll, beforeAll } from 'vitest'
import type { Runner, RunnerOptions } from '../../../cmd/manager/runner.js'
import type { TestEnv } from '../../env/fixture.js'
import { BackfillWorld } from './backfill-world.js'
import { startTestRunner } from './runner.js'

export interface BackfillSystem {
  readonly runner: Runner
  readonly world: BackfillWorld
}

/**
 * Call at the top level of a test file, after useTestEnv() (its namespace and NATS connection exist first, and are
 * gone only after this system stopped). Properties are readable inside tests and hooks (not at import time).
 */
export function useBackfillSystem(env: TestEnv, options: Partial<RunnerOptions> = {}): BackfillSystem {
  let runner: Runner | undefined
  let world: BackfillWorld | undefined
  beforeAll(async () => {
    runner = await startTestRunner(env, options)
    world = new BackfillWorld(env.kc, env.namespace, env.nc)
  })
  afterAll(async () => {
    world?.close()
    await runner?.stop()
  })
  const ready = <T>(value: T | undefined, what: string): T => {
    if (value === undefined) throw new Error(`${what} is only available inside tests and hooks (after beforeAll)`)
    return value
  }
  return {
    get runner() {
      return ready(runner, 'runner')
    },
    get world() {
      return ready(world, 'world')
    },
  }
}
