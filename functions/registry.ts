// Every function once: its name and the loader of its code. A process imports only the code of the functions it runs
// (`await import` inside each loader, nothing at the top), so demand's start does not load cancel's, admit's or
// lifecycle's modules and, through them, the Kubernetes client (cold start). The entry point reads the names here
// before it knows which function to load; callers that need every function (provision, tools, tests) await them all.
//
// Each `functions/<name>/index.ts` exports its factory as `<name>Function`: a FunctionFactory that makes a new
// instance, with state of its own, at every call.
import type { EventFunction, Settings } from '../pkg/transport/function.js'

/**
 * Makes a function. The process's settings (cmd/manager/config.ts) shape those whose consumers depend on one
 * (demand's ack policy); the others read them from Deps at start.
 */
export type FunctionFactory = (settings?: Settings) => EventFunction

export const functionLoaders = {
  source: async () => (await import('./source/index.js')).sourceFunction,
  demand: async () => (await import('./demand/index.js')).demandFunction,
  admit: async () => (await import('./admit/index.js')).admitFunction,
  cancel: async () => (await import('./cancel/index.js')).cancelFunction,
  lifecycle: async () => (await import('./lifecycle/index.js')).lifecycleFunction,
} satisfies Record<string, () => Promise<FunctionFactory>>

export type FunctionName = keyof typeof functionLoaders

/** The functions' names, in the registry's order (the entry point's usage, provision's default consumers). */
export const FUNCTION_NAMES = Object.keys(functionLoaders) as readonly FunctionName[]

export const isFunctionName = (name: string): name is FunctionName => Object.hasOwn(functionLoaders, name)

/** A function's factory by name; undefined for a name that is not a function. */
export function loadFunction(name: string): Promise<FunctionFactory> | undefined {
  return isFunctionName(name) ? functionLoaders[name]() : undefined
}

/** Every function's factory by name: loads the code of all of them. */
export async function loadFunctions(): Promise<Record<FunctionName, FunctionFactory>> {
  const loaded = await Promise.all(FUNCTION_NAMES.map(async (name) => [name, await functionLoaders[name]()] as const))
  return Object.fromEntries(loaded) as Record<FunctionName, FunctionFactory>
}
