// What code without a Kubernetes client needs from pkg/kube/kube.ts: resource names, the request deadline setting and
// how an apiserver error is read. No import of @kubernetes/client-node here: demand and source, which make no API
// call, load this and never the client (~1 MB of the bundle, its model classes built at load: cold start).
// pkg/kube/kube.ts re-exports all of it.

export const PLURALS = {
  backfills: 'modelbackfills',
  models: 'models',
  gamingSessions: 'gamingsessions',
  gpuLeases: 'gpuleases',
} as const

/** An error's HTTP status: client-node's ApiException carries it as a numeric `code`, as do our own errors. */
export const statusCode = (err: unknown): number | undefined => {
  const code = (err as { code?: unknown; statusCode?: unknown })?.code ?? (err as { statusCode?: unknown })?.statusCode
  return typeof code === 'number' ? code : undefined
}

export async function orNull<T>(call: Promise<T>): Promise<T | null> {
  try {
    return await call
  } catch (err) {
    if (statusCode(err) === 404) return null
    throw err
  }
}

/** Default deadline of one Kubernetes API request, answer body included. */
export const DEFAULT_KUBE_REQUEST_TIMEOUT_MS = 10_000

/** KUBE_REQUEST_TIMEOUT_MS, validated (a typo must not silently mean "no deadline"); cmd/manager/config.ts parses it. */
export function kubeRequestTimeoutMs(env: { KUBE_REQUEST_TIMEOUT_MS?: string }): number {
  const raw = env.KUBE_REQUEST_TIMEOUT_MS?.trim()
  if (!raw) return DEFAULT_KUBE_REQUEST_TIMEOUT_MS
  const ms = Number(raw)
  if (!Number.isInteger(ms) || ms <= 0)
    throw new Error(`KUBE_REQUEST_TIMEOUT_MS must be a positive integer, not "${raw}"`)
  return ms
}

/** A request that got no complete answer in time. Not an ApiException (no status code): callers retry it. */
export class KubeRequestTimeout extends Error {
  constructor(
    readonly method: string,
    readonly url: string,
    readonly timeoutMs: number,
  ) {
    super(`Kubernetes API ${method} ${new URL(url).pathname} got no answer within ${timeoutMs} ms (aborted)`)
    this.name = 'KubeRequestTimeout'
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

/** The label the Job controller puts on every pod of a Job (Kubernetes ≥ 1.27), with the Job's UID. */
export const CONTROLLER_UID_LABEL = 'batch.kubernetes.io/controller-uid'
