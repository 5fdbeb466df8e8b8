// What a scrape of a namespace-scoped deployment shows: only its own namespaces' backfills, and only the documented
// labels (pkg/transport/metrics.ts): nothing of another tenant's backfills or models.
import { expect, it } from 'vitest'
import { type BackfillState, emptyCounters } from '../../pkg/core/state.js'
import type { KvMirror } from '../../pkg/jetstream/kv-mirror.js'
import { BackfillMetrics } from '../../pkg/transport/metrics.js'

const state = (namespace: string, name: string, model: string): BackfillState => ({
  namespace,
  name,
  model,
  generation: 1,
  phase: 'Running',
  reason: 'JobRunning',
  message: 'secret detail of the attempt',
  attempts: 1,
  windowStart: '2026-03-01T00:00:00.000Z',
  counters: { ...emptyCounters(), starts: 1, preemptions: { foreground: 1 } },
  updatedAt: '2026-03-01T00:00:00.000Z',
})

async function scrape(namespaces?: string[]) {
  const m = new BackfillMetrics(namespaces)
  const values = (m as unknown as { mirror: KvMirror<BackfillState> }).mirror.values
  values.set('team-a.bf', state('team-a', 'bf', 'llm-a'))
  values.set('team-b.other', state('team-b', 'other', 'llm-secret-b'))
  return m.metrics()
}

it('a scoped exporter shows only its namespaces', async () => {
  const text = await scrape(['team-a'])
  expect(text).toContain('namespace="team-a"')
  expect(text).not.toContain('team-b')
  expect(text).not.toContain('llm-secret-b')
  const all = await scrape()
  expect(all).toContain('namespace="team-b"')
})

it('labels are exactly backfill, namespace, model, phase, result, reason, stream: no message or free text', async () => {
  // Ours only: prom-client's process metrics carry their own (version, GC kind, heap space).
  const text = (await scrape())
    .split('\n')
    .filter((l) => l.startsWith('flexinfer_'))
    .join('\n')
  const labels = new Set([...text.matchAll(/[{,]([a-z_]+)="/g)].map((m) => m[1]))
  expect([...labels].sort()).toEqual(['backfill', 'model', 'namespace', 'phase', 'reason', 'result', 'stream'])
  expect(text).not.toContain('secret detail')
})
