// Every function, by name: the runner (`npm start`), the KEDA Deployments and the Knative Services pick from here.
import type { Settings } from '../pkg/transport/function.js'
import { admitFunction } from './admit/index.js'
import { cancelFunction } from './cancel/index.js'
import { demandFunction } from './demand/index.js'
import { lifecycleFunction } from './lifecycle/index.js'
import type { FunctionFactory } from './load.js'
import type { FunctionName } from './names.js'
import { source } from './source/index.js'

export { FUNCTION_NAMES } from './names.js'

// `satisfies`: exactly the functions names.ts lists (the entry point's usage and checks read that list).
export const functionFactories: Record<string, FunctionFactory> = {
  source: () => source,
  demand: (settings?: Settings) => demandFunction({ ackAll: settings?.demandAckAll }),
  admit: admitFunction,
  cancel: () => cancelFunction(),
  lifecycle: lifecycleFunction,
} satisfies Record<FunctionName, FunctionFactory>
