// The kustomize base carries a copy of the ModelBackfill CRD (kustomize cannot load files outside its folder):
// it must be the generated one, byte for byte. Also the dashboard's metric families and the keda overlay's rules.
import { readFile } from 'node:fs/promises'
import { expect, it } from 'vitest'
import { parseAllDocuments } from 'yaml'
import { type FunctionName, loadFunctions } from '../../functions/registry.js'
import { consumerName } from '../../pkg/jetstream/names.js'

it('deploy/base/crds/modelbackfill.yaml is identical to crds/modelbackfill.yaml (cp crds/modelbackfill.yaml deploy/base/crds/)', async () => {
  const [generated, copy] = await Promise.all([
    readFile(new URL('../../crds/modelbackfill.yaml', import.meta.url), 'utf8'),
    readFile(new URL('../../deploy/base/crds/modelbackfill.yaml', import.meta.url), 'utf8'),
  ])
  expect(copy).toBe(generated)
})

it('the Grafana dashboard charts exactly the four metric families of the contract', async () => {
  const dashboard = JSON.parse(
    await readFile(new URL('../../deploy/base/grafana-dashboard.json', import.meta.url), 'utf8'),
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

// The keda overlay's scaling rules, read from the file an operator applies (the real KEDA operator runs them in
// test/integration/deploy/keda-operator.test.ts).
it('keda/: each ScaledObject scales on its function’s real consumers; the watcher and the preemption path never scale to zero', async () => {
  const text = await readFile(new URL('../../keda/scaledobjects.yaml', import.meta.url), 'utf8')
  const objects = parseAllDocuments(text)
    .map((d) => d.toJS())
    .filter((o) => o?.kind === 'ScaledObject')
  const rules = Object.fromEntries(
    objects.map((so) => [
      so.spec.scaleTargetRef.name.replace(/^model-backfill-/, ''),
      {
        min: so.spec.minReplicaCount,
        triggers: (so.spec.triggers as { type: string; metadata: Record<string, string> }[])
          .map((t) => `${t.type}:${t.metadata.stream}/${t.metadata.consumer}`)
          .sort(),
      },
    ]),
  )
  const functions = await loadFunctions()
  const consumers = (fn: FunctionName) =>
    functions[fn]()
      .subscriptions.map((s) => `nats-jetstream:${s.stream}/${consumerName(fn, s.stream)}`)
      .sort()
  // Only lag triggers: demand and cancel are held by minReplicaCount, not by a probe of active Jobs.
  expect(rules).toEqual({
    source: { min: 1, triggers: consumers('source') },
    demand: { min: 1, triggers: consumers('demand') },
    admit: { min: 0, triggers: consumers('admit') },
    cancel: { min: 1, triggers: consumers('cancel') },
    lifecycle: { min: 0, triggers: consumers('lifecycle') },
  })
  expect(rules.demand?.triggers).toEqual([
    'nats-jetstream:FLEXINFER_FOREGROUND/demand-foreground',
    'nats-jetstream:FLEXINFER_FOREGROUND_LAST/demand-foreground_last',
  ])
})
