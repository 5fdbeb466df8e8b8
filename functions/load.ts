// Every function by name, loaded on demand: a process imports only the code of the functions it runs, so demand's
// start does not load cancel's, admit's or lifecycle's modules and, through them, the Kubernetes client (cold
// start). functions/index.ts is the same table with static imports (provision, tests);
// test/unit/function-loaders.test.ts checks the two agree.
import type { EventFunction, Settings } from '../pkg/transport/function.js'
import type { FunctionName } from './names.js'

export const functionLoaders = {
  source: async () => {
    const { source } = await import('./source/index.js')
    return () => source
  },
  demand: async () => {
    const { demandFunction } = await import('./demand/index.js')
    return (settings?: Settings) => demandFunction({ ackAll: settings?.demandAckAll })
  },
  admit: async () => (await import('./admit/index.js')).admitFunction,
  cancel: async () => {
    const { cancelFunction } = await import('./cancel/index.js')
    return () => cancelFunction()
  },
  lifecycle: async () => {
    const { lifecycle } = await import('./lifecycle/index.js')
    return () => lifecycle
  },
} satisfies Record<FunctionName, () => Promise<FunctionFactory>>

/** Makes a function; the process's settings (cmd/manager/config.ts) are given to those that read one at construction. */
export type FunctionFactory = (settings?: Settings) => EventFunction

/** A function's factory by name; undefined for a name that is not a function. */
export function loadFunction(name: string): Promise<FunctionFactory> | undefined {
  return Object.hasOwn(functionLoaders, name) ? functionLoaders[name as FunctionName]() : undefined
}
