// The RBAC generator (tools/rbac/generate.ts) is the one list of verbs: without namespaces it grants exactly what
// base/rbac.yaml's ClusterRoles grant; with namespaces, every write is in a namespaced Role and the ClusterRoles are
// read-only.
import { readFile } from 'node:fs/promises'
import { expect, it } from 'vitest'
import { parseAllDocuments } from 'yaml'
import { GRANTS, generateRbac } from '../../tools/rbac/generate.js'

type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] }
const triples = (rules: Rule[]) =>
  [
    ...new Set(
      rules.flatMap((r) =>
        r.apiGroups.flatMap((g) => r.resources.flatMap((res) => r.verbs.map((v) => `${g}/${res}:${v}`))),
      ),
    ),
  ].sort()

it('without namespaces: the same grants as base/rbac.yaml, role by role', async () => {
  const base = parseAllDocuments(await readFile(new URL('../../base/rbac.yaml', import.meta.url), 'utf8'))
    .map((d) => d.toJS())
    .filter((d) => d?.kind === 'ClusterRole')
  const generated = generateRbac().filter((m) => m.kind === 'ClusterRole')
  expect(generated.map((m) => m.metadata.name).sort()).toEqual(base.map((m) => m.metadata.name).sort())
  for (const role of base) {
    const mine = generated.find((m) => m.metadata.name === role.metadata.name) as unknown as { rules: Rule[] }
    expect(triples(mine.rules), role.metadata.name).toEqual(triples(role.rules))
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
