// How an apiserver error reads: its status, its message, and the Job creations no retry can fix. No import of
// @kubernetes/client-node here: code that makes no API call (pkg/admission/protocol.ts) tells these errors apart
// without loading the client (~1 MB of the bundle, its model classes built at load: cold start).

/** An error's HTTP status: client-node's ApiException carries it as a numeric `code`, as do our own errors. */
export const statusCode = (err: unknown): number | undefined => {
  const code = (err as { code?: unknown; statusCode?: unknown })?.code ?? (err as { statusCode?: unknown })?.statusCode
  return typeof code === 'number' ? code : undefined
}

/** The call's answer, or null where the apiserver answered 404. */
export async function orNull<T>(call: Promise<T>): Promise<T | null> {
  try {
    return await call
  } catch (err) {
    if (statusCode(err) === 404) return null
    throw err
  }
}

/** Job create answers no retry can fix: 403 (ResourceQuota, admission webhook, RBAC), 400/422 (invalid Job). */
export const REJECTED = new Set([400, 403, 422])

/** The apiserver refused to create a Job for good; `message` is its own explanation (a Status message). */
export class JobRejectedError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message)
  }
}

/** The message of the Status an apiserver error carries (client-node keeps the body as text), else the error's. */
export function apiMessage(err: unknown): string {
  const body = (err as { body?: unknown })?.body
  let parsed: unknown = body
  if (typeof body === 'string') {
    try {
      parsed = JSON.parse(body)
    } catch {
      parsed = undefined
    }
  }
  const message = (parsed as { message?: unknown } | undefined)?.message
  return typeof message === 'string' && message ? message : String((err as Error)?.message ?? err)
}
