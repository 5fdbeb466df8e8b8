// The RBAC generator (dev/tools/rbac/generate.ts) is the one list of verbs: without namespaces it grants exactly what
// deploy/base/rbac.yaml's ClusterRoles grant (rule by rule, in order: the chart renders the generator's rules and its test
// compares them with the overlays); with namespaces, everything namespaced is in a Role per namespace and the
// ClusterRoles only read GamingSessions and GPULeases; the chart's copy of the rules is the generator's output.
import { readFile } from 'node:fs/promises'
import { expect, it } from 'vitest'
import { parseAllDocuments } from 'yaml'
import { CHART_RULES, chartRules, GRANTS, generateRbac } from '../../dev/tools/rbac/generate.js'
import { MAX_WATCH_NAMESPACES, parseWatchNamespaces } from '../../pkg/kube/scope.js'

type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] }
const triples = (rules: Rule[]) =>
  [
    ...new Set(
      rules.flatMap((r) =>
        r.apiGroups.flatMap((g) => r.resources.flatMap((res) => r.verbs.map((v) => `${g}/${res}:${v}`))),
      ),
    ),
  ].sort()

it('without namespaces: the same grants as deploy/base/rbac.yaml, role by role', async () => {
  const base = parseAllDocuments(await readFile(new URL('../../deploy/base/rbac.yaml', import.meta.url), 'utf8'))
    .map((d) => d.toJS())
    .filter((d) => d?.kind === 'ClusterRole')
  const generated = generateRbac().filter((m) => m.kind === 'ClusterRole')
  expect(generated.map((m) => m.metadata.name).sort()).toEqual(base.map((m) => m.metadata.name).sort())
  for (const role of base) {
    const mine = generated.find((m) => m.metadata.name === role.metadata.name) as unknown as { rules: Rule[] }
    expect(triples(mine.rules), role.metadata.name).toEqual(triples(role.rules))
    expect(mine.rules, role.metadata.name).toEqual(role.rules)
  }
  expect(generateRbac().some((m) => m.kind === 'Role' || m.kind === 'RoleBinding')).toBe(false)
})

it('with namespaces: a Role and RoleBinding per function and namespace; ClusterRoles only read', () => {
  const out = generateRbac({ namespaces: ['team-a', 'team-b', 'team-a'], serviceAccountNamespace: 'mb' })
  const roles = out.filter((m) => m.kind === 'Role')
  expect(roles.map((m) => `${m.metadata.namespace}/${m.metadata.name}`).sort()).toEqual(
    Object.keys(GRANTS)
      .flatMap((fn) => ['team-a', 'team-b'].map((ns) => `${ns}/model-backfill-${fn}`))
      .sort(),
  )
  expect(out.filter((m) => m.kind === 'RoleBinding')).toHaveLength(roles.length)
  for (const m of out.filter((m) => m.kind === 'ClusterRole')) {
    const verbs = new Set((m as unknown as { rules: Rule[] }).rules.flatMap((r) => r.verbs))
    expect(
      [...verbs].filter((v) => !['get', 'list', 'watch'].includes(v)),
      m.metadata.name,
    ).toEqual([])
  }
  const binding = out.find((m) => m.kind === 'RoleBinding') as unknown as { subjects: { namespace: string }[] }
  expect(binding.subjects[0]?.namespace).toBe('mb')
  expect(() => generateRbac({ namespaces: ['Not_A_Namespace'] })).toThrow(/not a namespace/)
})

it('with namespaces: the ClusterRoles grant GamingSessions and GPULeases only; Jobs, Models and the rest per namespace', () => {
  const out = generateRbac({ namespaces: ['team-a'] })
  for (const m of out.filter((m) => m.kind === 'ClusterRole')) {
    const resources = new Set((m as unknown as { rules: Rule[] }).rules.flatMap((r) => r.resources))
    expect([...resources].sort(), m.metadata.name).toEqual(['gamingsessions', 'gpuleases'])
  }
  const admit = out.find((m) => m.kind === 'Role' && m.metadata.name === 'model-backfill-admit') as unknown as {
    rules: Rule[]
  }
  expect(triples(admit.rules)).toEqual(
    expect.arrayContaining([
      'batch/jobs:list',
      'batch/jobs:watch',
      'ai.flexinfer/models:list',
      'ai.flexinfer/models:watch',
      // admit's watched copies of the backfills and their templates (pkg/kube/shared-caches.ts SharedCaches)
      'ai.flexinfer/modelbackfills:list',
      'ai.flexinfer/modelbackfills:watch',
      'batch/cronjobs:list',
      'batch/cronjobs:watch',
    ]),
  )
})

it("the chart's RBAC rules are the generator's output (npm run gen:rbac -- --write)", async () => {
  expect(await readFile(CHART_RULES, 'utf8')).toBe(chartRules())
})

it('WATCH_NAMESPACES: parsed, deduplicated, validated and bounded', () => {
  expect(parseWatchNamespaces(undefined)).toBeUndefined()
  expect(parseWatchNamespaces(' ')).toBeUndefined()
  expect(parseWatchNamespaces('a, b,a,')).toEqual(['a', 'b'])
  expect(() => parseWatchNamespaces('a,B_c')).toThrow(/not a namespace name/)
  const many = Array.from({ length: MAX_WATCH_NAMESPACES + 1 }, (_, i) => `ns-${i}`)
  expect(parseWatchNamespaces(many.slice(1).join(','))).toHaveLength(MAX_WATCH_NAMESPACES)
  expect(() => parseWatchNamespaces(many.join(','))).toThrow(/at most 64/)
  expect(() => generateRbac({ namespaces: many })).toThrow(/at most 64/)
})
