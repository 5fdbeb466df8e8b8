// The namespaces a deployment manages (WATCH_NAMESPACES). Scoped, every namespaced kind is listed and watched once
// per namespace (so the RBAC can be a Role per namespace, dev/tools/rbac/generate.ts); unscoped, once across the
// cluster. Each namespace costs every function a few long-lived watches, hence a bound.

/** At most this many managed namespaces: beyond it, run unscoped (cluster-wide RBAC) or split the deployment. */
export const MAX_WATCH_NAMESPACES = 64

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/

/**
 * WATCH_NAMESPACES (comma-separated) as a list, or undefined for the whole cluster (unset or empty). Throws a
 * message meant for the operator on a name no namespace can have or on more than MAX_WATCH_NAMESPACES.
 */
export function parseWatchNamespaces(raw: string | undefined): string[] | undefined {
  if (raw === undefined || raw.trim() === '') return undefined
  const namespaces = [
    ...new Set(
      raw
        .split(',')
        .map((n) => n.trim())
        .filter(Boolean),
    ),
  ]
  for (const n of namespaces) {
    if (!DNS_LABEL.test(n)) throw new Error(`WATCH_NAMESPACES: "${n.slice(0, 80)}" is not a namespace name`)
  }
  checkNamespaceCount(namespaces)
  return namespaces
}

/** Refuses more managed namespaces than the functions open watches for (callers that take a list directly). */
export function checkNamespaceCount(namespaces: readonly string[] | undefined) {
  if (namespaces && namespaces.length > MAX_WATCH_NAMESPACES) {
    throw new Error(
      `WATCH_NAMESPACES names ${namespaces.length} namespaces; at most ${MAX_WATCH_NAMESPACES} are supported ` +
        '(each costs every function its own watches): run unscoped with the cluster-wide RBAC, or split the deployment',
    )
  }
}
