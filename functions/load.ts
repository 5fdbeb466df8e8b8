// Every function by name, loaded on demand: a process imports only the code of the functions it runs, so demand's
// start does not load cancel's, admit's or lifecycle's modules and, through them, the Kubernetes client (cold
// start). functions/index.ts is the same table with static imports (provision, tests);
// test/unit/function-loaders.test.ts checks the two agree.
import type { EventFunction } from '../transport/function.js'
import type { FunctionName } from './names.js'

export const functionLoaders = {
  source: async () => {
    const { source } = await import('./source/index.js')
    return () => source
  },
  demand: async () => (await import('./demand/index.js')).demandFunction,
  admit: async () => (await import('./admit/index.js')).admitFunction,
  cancel: async () => (await import('./cancel/index.js')).cancelFunction,
  lifecycle: async () => {
    const { lifecycle } = await import('./lifecycle/index.js')
    return () => lifecycle
  },
} satisfies Record<FunctionName, () => Promise<() => EventFunction>>

/** A function's factory by name; undefined for a name that is not a function. */
export function loadFunction(name: string): Promise<() => EventFunction> | undefined {
  return Object.hasOwn(functionLoaders, name) ? functionLoaders[name as FunctionName]() : undefined
}
