// The functions' names without their code: what the entry point needs before it knows which one to load.
export const FUNCTION_NAMES = ['source', 'demand', 'admit', 'cancel', 'lifecycle'] as const
export type FunctionName = (typeof FUNCTION_NAMES)[number]
