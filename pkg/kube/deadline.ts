// The deadline of every Kubernetes API request: its setting and how a request that misses it fails. No import of
// @kubernetes/client-node here, as in ./errors.ts: cmd/manager/config.ts parses the setting in every process, also
// in those that load no client.

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
