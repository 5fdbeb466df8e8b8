// What most backfill test files stand on: the file's own system (every function in-process, startTestRunner, or split
// into runners as deployed, startSplitSystem) and a BackfillWorld in the file's namespace, started before the file's
// tests and stopped after them; optionally the test's own watch of the namespace's Jobs, and hooks around real calls
// undone before the system stops.
import { afterAll, beforeAll } from 'vitest'
import type { Runner, RunnerOptions } from '../../../cmd/manager/runner.js'
import type { Bus } from '../../../pkg/jetstream/bus.js'
import type { TestEnv } from '../../env/fixture.js'
import { BackfillWorld } from './backfill-world.js'
import { hook, watchJobs } from './job-watch.js'
import { type SplitSystem, startSplitSystem, startTestRunner } from './runner.js'

export type JobWatch = Awaited<ReturnType<typeof watchJobs>>

export interface SystemOptions {
  /** Watch the namespace's Jobs from before the first test (support/job-watch.ts): `jobs`. */
  watchJobs?: boolean
}

/** What a file's system gives its tests, whichever way it runs the functions. */
export interface SystemParts {
  readonly world: BackfillWorld
  /** The test's own watch of the namespace's Jobs (with `watchJobs`): an oracle that does not trust the functions. */
  readonly jobs: JobWatch
  /** Replaces `obj[key]` with `wrap(original)` (support/job-watch.ts hook) until the file's tests end. */
  hook<T extends object, K extends keyof T>(obj: T, key: K, wrap: (original: T[K]) => T[K]): void
  /** Runs `done` when the file's tests end, before the system stops; the last registered runs first. */
  atEnd(done: () => void): void
  /** Drops every cancel request `bus` publishes for `backfill` until the file's tests end (a hook on its publish). */
  dropCancels(bus: Bus, backfill: string): void
}

export interface BackfillSystem extends SystemParts {
  readonly runner: Runner
}

export interface SplitBackfillSystem extends SystemParts {
  /** source and lifecycle, demand with admit, cancel: each a runner of its own (support/runner.ts). */
  readonly split: SplitSystem
}

/**
 * Call at the top level of a test file, after useTestEnv() (its namespace and NATS connection exist first, and are
 * gone only after this system stopped). Properties are readable inside tests and hooks (not at import time).
 */
export function useBackfillSystem(
  env: TestEnv,
  options: Partial<RunnerOptions> = {},
  system: SystemOptions = {},
): BackfillSystem {
  const s = useSystem(
    env,
    () => startTestRunner(env, options),
    (runner) => runner.stop(),
    system,
  )
  return Object.defineProperty(s.parts, 'runner', { get: () => s.started('runner') }) as BackfillSystem
}

/** useBackfillSystem with the functions split into runners as deployed (support/runner.ts startSplitSystem). */
export function useSplitBackfillSystem(env: TestEnv, system: SystemOptions = {}): SplitBackfillSystem {
  const s = useSystem(
    env,
    () => startSplitSystem(env),
    (split) => split.stop(),
    system,
  )
  return Object.defineProperty(s.parts, 'split', { get: () => s.started('split') }) as SplitBackfillSystem
}

function useSystem<S>(
  env: TestEnv,
  start: () => Promise<S>,
  stop: (s: S) => Promise<void>,
  options: SystemOptions,
): { parts: SystemParts; started: (what: string) => S } {
  let system: S | undefined
  let world: BackfillWorld | undefined
  let jobs: JobWatch | undefined
  const ends: (() => void)[] = []
  beforeAll(async () => {
    system = await start()
    world = new BackfillWorld(env.kc, env.namespace, env.nc)
    if (options.watchJobs) jobs = await watchJobs(env.kc, env.namespace)
  })
  afterAll(async () => {
    // Last first: hooks stacked on one call come off in the order that leaves the original in place.
    for (const done of ends.splice(0).reverse()) done()
    jobs?.stop()
    world?.close()
    if (system !== undefined) await stop(system)
  })
  const ready = <T>(value: T | undefined, what: string): T => {
    if (value === undefined) throw new Error(`${what} is only available inside tests and hooks (after beforeAll)`)
    return value
  }
  const parts: SystemParts = {
    get world() {
      return ready(world, 'world')
    },
    get jobs() {
      if (!options.watchJobs) throw new Error('jobs: the system was made without { watchJobs: true }')
      return ready(jobs, 'jobs')
    },
    hook(obj, key, wrap) {
      ends.push(hook(obj, key, wrap))
    },
    atEnd(done) {
      ends.push(done)
    },
    dropCancels(bus, backfill) {
      parts.hook(
        bus,
        'publish',
        (original) =>
          (async (type: string, data: { backfill?: string }, ...rest: unknown[]) => {
            if (type === 'ai.flexinfer.backfill.cancel' && data?.backfill === backfill) return
            return (original as (...a: unknown[]) => Promise<unknown>)(type, data, ...rest)
          }) as typeof bus.publish,
      )
    },
  }
  return { parts, started: (what) => ready(system, what) }
}
