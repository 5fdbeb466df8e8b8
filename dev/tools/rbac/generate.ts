// RBAC for the functions, generated. With WATCH_NAMESPACES set, everything namespaced the functions read or write
// (ModelBackfills and their status, Models, CronJobs, Jobs, pods, Events) is granted by a Role + RoleBinding in each
// managed namespace only: the functions list and watch those per namespace (pkg/kube/cache.ts, pkg/transport/watcher.ts).
// One read-only ClusterRole per function remains, for what is deliberately read across the cluster: GamingSessions
// and GPULeases target nodes and GPU groups, not namespaces — a session outside the scope must still cancel a
// backfill on its node (docs/limits.md). Without namespaces it emits the cluster-wide roles deploy/base/rbac.yaml ships
// (test/unit/rbac.test.ts keeps the two equal, rule by rule). `--write` regenerates the chart's copy of the rules
// (deploy/charts/model-backfill/templates/_rbac-rules.tpl), so the chart has no hand-written second list.
//
//   npm run gen:rbac -- --namespaces team-a,team-b [--service-account-namespace model-backfill] > rbac.yaml
//   WATCH_NAMESPACES=team-a,team-b npm run gen:rbac
//   npm run gen:rbac -- --write
import { writeFileSync } from 'node:fs'
import { stringify } from 'yaml'
import { MAX_WATCH_NAMESPACES } from '../../../pkg/kube/scope.js'

type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] }
/** A rule and where it applies: in each managed namespace, or across the cluster even when scoped. */
type Grant = Rule & { anywhere: boolean }

const FLEX = 'ai.flexinfer'
/** Granted in each managed namespace (everywhere when the deployment is not scoped). */
const ns = (apiGroup: string, resources: string[], verbs: string[]): Grant => ({
  apiGroups: [apiGroup],
  resources,
  verbs,
  anywhere: false,
})
/** Granted across the cluster even when scoped (node-targeted kinds); read-only. */
const anywhere = (apiGroup: string, resources: string[], verbs: string[]): Grant => ({
  ...ns(apiGroup, resources, verbs),
  anywhere: true,
})
const SESSIONS_AND_LEASES = ['gamingsessions', 'gpuleases']

/**
 * One source of truth for the verbs each function uses (pkg/kube/client.ts, pkg/reconcile/), in deploy/base/rbac.yaml's
 * order. Events: create, and get/patch to aggregate repeats (Kube.recordEvent).
 */
export const GRANTS: Record<'admit' | 'cancel' | 'lifecycle' | 'watch', Grant[]> = {
  admit: [
    // admit's watched copies (pkg/kube/shared-caches.ts SharedCaches): ModelBackfills, Models, CronJobs (the templates) and
    // backfill Jobs per managed namespace; each admission still GETs the backfill and its template.
    ns(FLEX, ['modelbackfills'], ['get', 'list', 'watch', 'patch']),
    ns(FLEX, ['modelbackfills/status'], ['update']),
    ns(FLEX, ['models'], ['get', 'list', 'watch']),
    anywhere(FLEX, SESSIONS_AND_LEASES, ['get', 'list', 'watch']),
    ns('batch', ['cronjobs'], ['get', 'list', 'watch']),
    ns('batch', ['jobs'], ['get', 'list', 'watch', 'create', 'delete']),
    ns('', ['events'], ['create', 'get', 'patch']),
  ],
  cancel: [
    ns(FLEX, ['modelbackfills'], ['get', 'patch']),
    ns(FLEX, ['modelbackfills/status'], ['update']),
    ns(FLEX, ['models'], ['get']),
    anywhere(FLEX, SESSIONS_AND_LEASES, ['list']),
    ns('batch', ['cronjobs'], ['get']),
    // list/watch: cancel's watched copy of the backfill Jobs (functions/cancel), per managed namespace;
    // deletecollection: a burst's Jobs of one namespace in one request, selected by their attempt labels.
    ns('batch', ['jobs'], ['get', 'list', 'watch', 'delete', 'deletecollection']),
    // The preempted attempts' pods, by their Jobs' UID labels, right after the Jobs' DELETE (functions/cancel; on by default).
    ns('', ['pods'], ['deletecollection']),
    ns('', ['events'], ['create', 'get', 'patch']),
  ],
  lifecycle: [
    // list/watch: lifecycle's watched copies (functions/lifecycle/caches.ts): the sweep and the cluster-wide
    // re-decides read ModelBackfills, Models, sessions, leases and Jobs from memory.
    ns(FLEX, ['modelbackfills'], ['get', 'list', 'watch', 'patch']),
    ns(FLEX, ['modelbackfills/status'], ['update']),
    ns(FLEX, ['models'], ['get', 'list', 'watch']),
    anywhere(FLEX, SESSIONS_AND_LEASES, ['list', 'watch']),
    ns('batch', ['cronjobs'], ['get']),
    ns('batch', ['jobs'], ['get', 'list', 'watch', 'delete']),
    // Read-only: the attempts' pods, watched by their backfill label, for their termination messages
    // (functions/lifecycle/pod-reports.ts). Never delete or patch: cancel owns the pods' deletion.
    ns('', ['pods'], ['get', 'list', 'watch']),
    ns('', ['events'], ['create', 'get', 'patch']),
  ],
  // The Kubernetes event source (ApiServerSource, or source's watcher in the keda overlay): scoped watches per
  // namespace (pkg/transport/watcher.ts), sessions and leases cluster-wide.
  watch: [
    ns(FLEX, ['modelbackfills', 'models'], ['get', 'list', 'watch']),
    anywhere(FLEX, SESSIONS_AND_LEASES, ['get', 'list', 'watch']),
    ns('batch', ['jobs'], ['get', 'list', 'watch']),
  ],
}

const rule = ({ apiGroups, resources, verbs }: Rule): Rule => ({
  apiGroups: [...apiGroups],
  resources: [...resources],
  verbs: [...verbs],
})
/** The rules of a Role in each managed namespace. */
export const namespacedRules = (fn: keyof typeof GRANTS): Rule[] => GRANTS[fn].filter((g) => !g.anywhere).map(rule)
/** The read-only rules of the ClusterRole a scoped deployment still needs. */
export const clusterReadRules = (fn: keyof typeof GRANTS): Rule[] => GRANTS[fn].filter((g) => g.anywhere).map(rule)
/** The unscoped ClusterRole: every grant, adjacent rules of one group with the same verbs merged (deploy/base/rbac.yaml). */
export function clusterWideRules(fn: keyof typeof GRANTS): Rule[] {
  const out: Rule[] = []
  for (const g of GRANTS[fn]) {
    const last = out.at(-1)
    if (last && last.apiGroups[0] === g.apiGroups[0] && last.verbs.join() === g.verbs.join())
      last.resources.push(...g.resources)
    else out.push(rule(g))
  }
  return out
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

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/

export function generateRbac(opts: RbacOptions = {}): Manifest[] {
  const suffix = opts.nameSuffix ?? ''
  const saNamespace = opts.serviceAccountNamespace ?? 'model-backfill'
  const namespaces = [...new Set((opts.namespaces ?? []).map((n) => n.trim()).filter(Boolean))]
  for (const n of [saNamespace, ...namespaces])
    if (!DNS_LABEL.test(n)) throw new Error(`"${n}" is not a namespace name (RFC 1123 label)`)
  if (namespaces.length > MAX_WATCH_NAMESPACES)
    throw new Error(`${namespaces.length} namespaces: at most ${MAX_WATCH_NAMESPACES} (the functions refuse more)`)
  const labels = (fn: string) => ({ 'app.kubernetes.io/part-of': 'model-backfill', 'app.kubernetes.io/component': fn })
  const subject = (fn: keyof typeof GRANTS) => ({
    kind: 'ServiceAccount',
    name: `${SERVICE_ACCOUNT[fn]}${suffix}`,
    namespace: saNamespace,
  })
  const out: Manifest[] = []
  for (const fn of opts.only ?? (Object.keys(GRANTS) as (keyof typeof GRANTS)[])) {
    const name = `model-backfill-${fn}${suffix}`
    const clusterRules = namespaces.length ? clusterReadRules(fn) : clusterWideRules(fn)
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
          rules: namespacedRules(fn),
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

/** Where `--write` puts the chart's rules (templates/rbac.yaml includes them). */
export const CHART_RULES = new URL('../../../deploy/charts/model-backfill/templates/_rbac-rules.tpl', import.meta.url)

/**
 * The chart's copy of GRANTS as named templates: mbf.rules.<role> (the unscoped ClusterRole), and with
 * watchNamespaces mbf.scoped.<role>.namespaced (the Role in each namespace) and mbf.scoped.<role>.cluster.
 */
export function chartRules(): string {
  // Flow lists, as deploy/base/rbac.yaml writes them ("" is the core group).
  const list = (xs: string[]) => `[${xs.map((x) => (x === '' ? '""' : x)).join(', ')}]`
  const yaml = (r: Rule) =>
    `- apiGroups: ${list(r.apiGroups)}\n  resources: ${list(r.resources)}\n  verbs: ${list(r.verbs)}`
  const define = (name: string, rules: Rule[]) =>
    `{{- define "${name}" -}}\n${rules.length ? rules.map(yaml).join('\n') : '[]'}\n{{- end -}}\n`
  const out = [
    '{{/*',
    'Generated by `npm run gen:rbac -- --write` from dev/tools/rbac/generate.ts (GRANTS): do not edit; test/unit/rbac.test.ts',
    'fails when this file is stale. Exactly the Kubernetes verbs each function uses (deploy/base/rbac.yaml says why); source',
    'and demand use none. "watch" is the Kubernetes event source (the ApiServerSource in mode knative, source\'s',
    'watcher in mode keda). mbf.rules.<role>: the ClusterRole without watchNamespaces. With watchNamespaces:',
    'mbf.scoped.<role>.namespaced goes into a Role per namespace, and mbf.scoped.<role>.cluster into a read-only',
    'ClusterRole: GamingSessions and GPULeases only, read across the cluster on purpose (they target nodes, not',
    'namespaces: a session outside the scope must still cancel a backfill on its node).',
    '*/}}',
  ].join('\n')
  const roles = Object.keys(GRANTS) as (keyof typeof GRANTS)[]
  return [
    `${out}\n`,
    ...roles.map((fn) => define(`mbf.rules.${fn}`, clusterWideRules(fn))),
    ...roles.flatMap((fn) => [
      define(`mbf.scoped.${fn}.namespaced`, namespacedRules(fn)),
      define(`mbf.scoped.${fn}.cluster`, clusterReadRules(fn)),
    ]),
  ].join('')
}

function parseArgs(argv: string[], env: NodeJS.ProcessEnv): RbacOptions & { write?: boolean } {
  const opts: RbacOptions & { write?: boolean } = { namespaces: env.WATCH_NAMESPACES?.split(',') }
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
    else if (arg === '--write') opts.write = true
    else
      throw new Error(
        `unknown argument ${arg} (--namespaces a,b --service-account-namespace ns --name-suffix s, or --write)`,
      )
  }
  return opts
}

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    const opts = parseArgs(process.argv.slice(2), process.env)
    if (opts.write) writeFileSync(CHART_RULES, chartRules())
    else process.stdout.write(toYaml(generateRbac(opts)))
  } catch (err) {
    process.stderr.write(`gen:rbac: ${(err as Error).message}\n`)
    process.exit(2)
  }
}
