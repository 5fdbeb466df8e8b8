// Every function, by name: the runner (`npm start`), the KEDA Deployments and the Knative Services pick from here.
import type { EventFunction } from '../runtime/function.js'
import { admit } from './admit/index.js'
import { cancelFunction } from './cancel/index.js'
import { demandFunction } from './demand/index.js'
import { lifecycle } from './lifecycle/index.js'
import { source } from './source/index.js'

export const functionFactories: Record<string, () => EventFunction> = {
  source: () => source,
  demand: demandFunction,
  admit: () => admit,
  cancel: cancelFunction,
  lifecycle: () => lifecycle,
}

export const FUNCTION_NAMES = Object.keys(functionFactories)
