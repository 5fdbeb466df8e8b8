// Why `Next Run` stays a string column (README, crds/generate.ts): checked against the real apiserver and kubectl of
// the test environment rather than taken on faith. A probe CRD (its own group, removed afterwards) prints the same
// time twice, as a date column and as a string column: a date column is rendered as an age, and a future time —
// what nextRunTime always is while it is shown — as "<invalid>"; the string column shows the time itself.
import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, it } from 'vitest'
import { useTestEnv } from '../../env/fixture.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const group = `probe${randomBytes(3).toString('hex')}.flexinfer.test`
const crdName = `nextruns.${group}`

beforeAll(async () => {
  const crd = {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: crdName },
    spec: {
      group,
      names: { plural: 'nextruns', singular: 'nextrun', kind: 'NextRun' },
      scope: 'Namespaced',
      versions: [
        {
          name: 'v1',
          served: true,
          storage: true,
          additionalPrinterColumns: [
            { name: 'As Date', type: 'date', jsonPath: '.spec.nextRunTime' },
            { name: 'As String', type: 'string', jsonPath: '.spec.nextRunTime' },
          ],
          schema: {
            openAPIV3Schema: {
              type: 'object',
              properties: {
                spec: { type: 'object', properties: { nextRunTime: { type: 'string', format: 'date-time' } } },
              },
            },
          },
        },
      ],
    },
  }
  const applied = await env.kubectl(['apply', '-f', '-'], { input: JSON.stringify(crd) })
  if (applied.code !== 0) throw new Error(applied.stderr)
  await env.kubectl(['wait', '--for=condition=Established', `crd/${crdName}`, '--timeout=30s'])
})
afterAll(async () => {
  await env.kubectl(['delete', 'crd', crdName, '--wait=false'])
})

describe('a date printer column', () => {
  it('prints a future time as <invalid> and a past one as an age; a string column prints the time', async ({
    expect,
  }) => {
    const future = new Date(Date.now() + 3_600_000).toISOString().replace(/\.\d+Z$/, 'Z')
    const past = new Date(Date.now() - 600_000).toISOString().replace(/\.\d+Z$/, 'Z')
    for (const [name, at] of [
      ['future', future],
      ['past', past],
    ]) {
      const obj = { apiVersion: `${group}/v1`, kind: 'NextRun', metadata: { name }, spec: { nextRunTime: at } }
      // The new resource may take a moment to be served after Established.
      await waitUntil(`create ${name}`, async () => {
        const r = await env.kubectl(['apply', '-n', env.namespace, '-f', '-'], { input: JSON.stringify(obj) })
        return r.code === 0 ? true : undefined
      })
    }
    const out = await env.kubectl(['get', `nextruns.${group}`, '-n', env.namespace, '--sort-by=.metadata.name'])
    expect(out.code, out.stderr).toBe(0)
    const rows = out.stdout
      .trim()
      .split('\n')
      .map((l) => l.trim().split(/\s{2,}/))
    expect(rows[0]).toEqual(['NAME', 'AS DATE', 'AS STRING'])
    expect(rows[1]).toEqual(['future', '<invalid>', future])
    expect(rows[2]?.[0]).toBe('past')
    expect(rows[2]?.[1]).toMatch(/^(9m\d+s|10m|1\dm)$/)
    expect(rows[2]?.[2]).toBe(past)
  })
})
