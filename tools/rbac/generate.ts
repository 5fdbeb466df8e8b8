// RBAC for the functions, generated: with WATCH_NAMESPACES set, every write (Jobs created or deleted, ModelBackfills
// patched, status, Events) and every namespaced read is granted by a Role + RoleBinding in each managed namespace
// only; what the code reads across the cluster stays in one read-only ClusterRole per function (GamingSessions and
// GPULeases target nodes, not namespaces; admit's watched copies and the contender gate list backfill Jobs and
// Models cluster-wide). Without namespaces it emits the cluster-wide roles base/rbac.yaml ships (a unit test keeps
// the two identical in effect).
//
//   npm run gen:rbac -- --namespaces team-a,team-b [--service-account-namespace model-backfill] > rbac.yaml
//   WATCH_NAMESPACES=team-a,team-b npm run gen:rbac
import { stringify } from 'yaml'

type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] }
/** Per function (or the event source, `watch`): what it does in a managed namespace, and what it reads anywhere. */
interface Grants {
  namespaced: Rule[]
  cluster: Rule[]
}

const FLEX = 'ai.flexinfer'
const r = (apiGroup: string, resources: string[], verbs: string[]): Rule => ({
  apiGroups: [apiGroup],
  resources,
  verbs,
})

/** One source of truth for the verbs each function uses (runtime/kube.ts, runtime/reconcile.ts; base/rbac.yaml). */
export const GRANTS: Record<'admit' | 'cancel' | 'lifecycle' | 'watch', Grants> = {
  admit: {
    namespaced: [
      r(FLEX, ['modelbackfills'], ['get', 'patch']),
      r(FLEX, ['modelbackfills/status'], ['update']),
      r(FLEX, ['models'], ['get']),
      r('batch', ['cronjobs'], ['get']),
      r('batch', ['jobs'], ['get', 'create', 'delete']),
      r('', ['events'], ['create']),
    ],
    // admit's watched copies (runtime/kube.ts AdmissionCaches) list and watch these across the cluster.
    cluster: [
      r(FLEX, ['models', 'gamingsessions', 'gpuleases'], ['get', 'list', 'watch']),
      r('batch', ['jobs'], ['list', 'watch']),
    ],
  },
  cancel: {
    namespaced: [
      r(FLEX, ['modelbackfills'], ['get', 'patch']),
      r(FLEX, ['modelbackfills/status'], ['update']),
      r(FLEX, ['models'], ['get']),
      r('batch', ['cronjobs'], ['get']),
      r('batch', ['jobs'], ['get', 'delete']),
      // The preempted attempt's pods, by the Job's UID label, right after the Job's DELETE (functions/cancel; on by default).
      r('', ['pods'], ['deletecollection']),
      r('', ['events'], ['create']),
    ],
    cluster: [r(FLEX, ['gamingsessions', 'gpuleases'], ['list']), r('batch', ['jobs'], ['list'])],
  },
  lifecycle: {
    namespaced: [
      r(FLEX, ['modelbackfills'], ['get', 'list', 'patch']),
      r(FLEX, ['modelbackfills/status'], ['update']),
      r(FLEX, ['models'], ['get', 'list']),
      r('batch', ['cronjobs'], ['get']),
      r('batch', ['jobs'], ['get', 'delete']),
      r('', ['events'], ['create']),
    ],
    cluster: [r(FLEX, ['gamingsessions', 'gpuleases'], ['list']), r('batch', ['jobs'], ['list'])],
  },
  // The Kubernetes event source (ApiServerSource, or source's watcher in the keda overlay): scoped watches per
  // namespace (runtime/watcher.ts), sessions and leases cluster-wide.
  watch: {
    namespaced: [
      r(FLEX, ['modelbackfills', 'models'], ['get', 'list', 'watch']),
      r('batch', ['jobs'], ['get', 'list', 'watch']),
    ],
    cluster: [r(FLEX, ['gamingsessions', 'gpuleases'], ['get', 'list', 'watch'])],
  },
}

/** Whose ServiceAccount each role is bound to (the event source: keda's source function). */
const SERVICE_ACCOUNT: Record<keyof typeof GRANTS, string> = {
  admit: 'model-backfill-admit',
  cancel: 'model-backfill-cancel',
  lifecycle: 'model-backfill-lifecycle',
  watch: 'model-backfill-source',
}

export interface RbacOptions {
  /** Managed namespaces (WATCH_NAMESPACES); empty or undefined: cluster-wide ClusterRoles. */
  namespaces?: string[]
  /** Where the functions' ServiceAccounts live. Default model-backfill. */
  serviceAccountNamespace?: string
  /** Appended to every name (a kustomize nameSuffix, or tests running side by side). */
  nameSuffix?: string
  /** Which roles (default all four). */
  only?: (keyof typeof GRANTS)[]
}

type Manifest = Record<string, unknown> & {
  kind: string
  metadata: { name: string; namespace?: string; labels?: Record<string, string> }
}

/** Merges rules on the same group and resource list, so the cluster-wide form reads like base/rbac.yaml. */
function union(rules: Rule[]): Rule[] {
  const out: Rule[] = []
  for (const rule of rules) {
    for (const resource of rule.resources) {
      const group = rule.apiGroups[0] as string
      const found = out.find((o) => o.apiGroups[0] === group && o.resources.length === 1 && o.resources[0] === resource)
      if (found) found.verbs = [...new Set([...found.verbs, ...rule.verbs])]
      else out.push({ apiGroups: [group], resources: [resource], verbs: [...rule.verbs] })
    }
  }
  return out
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/

export function generateRbac(opts: RbacOptions = {}): Manifest[] {
  const suffix = opts.nameSuffix ?? ''
  const saNamespace = opts.serviceAccountNamespace ?? 'model-backfill'
  const namespaces = [...new Set((opts.namespaces ?? []).map((n) => n.trim()).filter(Boolean))]
  for (const ns of [saNamespace, ...namespaces])
    if (!DNS_LABEL.test(ns)) throw new Error(`"${ns}" is not a namespace name (RFC 1123 label)`)
  const labels = (fn: string) => ({ 'app.kubernetes.io/part-of': 'model-backfill', 'app.kubernetes.io/component': fn })
  const subject = (fn: keyof typeof GRANTS) => ({
    kind: 'ServiceAccount',
    name: `${SERVICE_ACCOUNT[fn]}${suffix}`,
    namespace: saNamespace,
  })
  const out: Manifest[] = []
  for (const fn of opts.only ?? (Object.keys(GRANTS) as (keyof typeof GRANTS)[])) {
    const grants = GRANTS[fn]
    const name = `model-backfill-${fn}${suffix}`
    const clusterRules = namespaces.length ? grants.cluster : union([...grants.namespaced, ...grants.cluster])
    const clusterName = namespaces.length ? `model-backfill-${fn}-cluster-read${suffix}` : name
    out.push(
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRole',
        metadata: { name: clusterName, labels: labels(fn) },
        rules: clusterRules,
      },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name: clusterName, labels: labels(fn) },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: clusterName },
        subjects: [subject(fn)],
      },
    )
    for (const namespace of namespaces) {
      out.push(
        {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'Role',
          metadata: { name, namespace, labels: labels(fn) },
          rules: grants.namespaced,
        },
        {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'RoleBinding',
          metadata: { name, namespace, labels: labels(fn) },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
          subjects: [subject(fn)],
        },
      )
    }
  }
  return out
}

export const toYaml = (manifests: Manifest[]) => manifests.map((m) => stringify(m)).join('---\n')

function parseArgs(argv: string[], env: NodeJS.ProcessEnv): RbacOptions {
  const opts: RbacOptions = { namespaces: env.WATCH_NAMESPACES?.split(',') }
  for (let i = 0; i < argv.length; i++) {
    const value = () => {
      const v = argv[++i]
      if (v === undefined) throw new Error(`${argv[i - 1]} needs a value`)
      return v
    }
    const arg = argv[i]
    if (arg === '--namespaces') opts.namespaces = value().split(',')
    else if (arg === '--service-account-namespace') opts.serviceAccountNamespace = value()
    else if (arg === '--name-suffix') opts.nameSuffix = value()
    else throw new Error(`unknown argument ${arg} (--namespaces a,b --service-account-namespace ns --name-suffix s)`)
  }
  return opts
}

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    process.stdout.write(toYaml(generateRbac(parseArgs(process.argv.slice(2), process.env))))
  } catch (err) {
    process.stderr.write(`gen:rbac: ${(err as Error).message}\n`)
    process.exit(2)
  }
}
