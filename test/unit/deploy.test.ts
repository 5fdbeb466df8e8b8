// The kustomize base carries a copy of the ModelBackfill CRD (kustomize cannot load files outside its folder):
// it must be the generated one, byte for byte.
import { readFile } from 'node:fs/promises'
import { expect, it } from 'vitest'

it('base/crds/modelbackfill.yaml is identical to crds/modelbackfill.yaml (cp crds/modelbackfill.yaml base/crds/)', async () => {
  const [generated, copy] = await Promise.all([
    readFile(new URL('../../crds/modelbackfill.yaml', import.meta.url), 'utf8'),
    readFile(new URL('../../base/crds/modelbackfill.yaml', import.meta.url), 'utf8'),
  ])
  expect(copy).toBe(generated)
})

it('the Grafana dashboard charts exactly the four metric families of the contract', async () => {
  const dashboard = JSON.parse(
    await readFile(new URL('../../base/grafana-dashboard.json', import.meta.url), 'utf8'),
  ) as { panels: { targets: { expr: string }[] }[] }
  const names = new Set(
    dashboard.panels.flatMap((p) => p.targets.flatMap((t) => t.expr.match(/flexinfer_model_backfill_\w+/g) ?? [])),
  )
  expect([...names].sort()).toEqual([
    'flexinfer_model_backfill_completions_total',
    'flexinfer_model_backfill_preemptions_total',
    'flexinfer_model_backfill_starts_total',
    'flexinfer_model_backfill_useful_running_seconds_total',
  ])
})
