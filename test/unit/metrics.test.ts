// The exporter's families as contract.md pins them, read from stored backfill states (no NATS needed: the mirror
// is filled directly, as its KV watch would fill it).
import { describe, expect, it } from 'vitest'
import { type BackfillState, emptyCounters } from '../../pkg/core/state.js'
import type { KvMirror } from '../../pkg/jetstream/kv-mirror.js'
import { BackfillMetrics } from '../../pkg/transport/metrics.js'

const state = (counters: Partial<BackfillState['counters']>): BackfillState => ({
  namespace: 'ns',
  name: 'bf',
  model: 'llm',
  generation: 1,
  phase: 'Failed',
  reason: 'JobFailed',
  message: '',
  attempts: 3,
  windowStart: '2026-03-01T00:00:00.000Z',
  counters: { ...emptyCounters(), ...counters },
  updatedAt: '2026-03-01T00:00:00.000Z',
})

async function exposition(s: BackfillState) {
  const m = new BackfillMetrics()
  ;(m as unknown as { mirror: KvMirror<BackfillState> }).mirror.values.set('ns.bf', s)
  return m.metrics()
}

describe('BackfillMetrics', () => {
  it('completions use result="failure" (the reference value); a `failed` count stored earlier carries on under it', async () => {
    const text = await exposition(state({ success: 2, failed: 5 }))
    const labels = 'backfill="bf",namespace="ns",model="llm"'
    expect(text).toContain(`flexinfer_model_backfill_completions_total{${labels},result="success"} 2`)
    expect(text).toContain(`flexinfer_model_backfill_completions_total{${labels},result="failure"} 5`)
    expect(text).not.toContain('result="failed"')
  })

  it('preemptions by reason and useful seconds come from the stored counters', async () => {
    const text = await exposition(state({ preemptions: { other: 2, model_unavailable: 1 }, usefulSeconds: 90.5 }))
    const labels = 'backfill="bf",namespace="ns",model="llm"'
    expect(text).toContain(`flexinfer_model_backfill_preemptions_total{${labels},reason="other"} 2`)
    expect(text).toContain(`flexinfer_model_backfill_preemptions_total{${labels},reason="model_unavailable"} 1`)
    expect(text).toContain(`flexinfer_model_backfill_useful_running_seconds_total{${labels}} 90.5`)
  })

  it('beyond the contract: items completed and discarded, running seconds of preempted attempts', async () => {
    const labels = 'backfill="bf",namespace="ns",model="llm"'
    const text = await exposition(state({ itemsDone: 7, itemsDiscarded: 2, preemptedSeconds: 41.5, usefulSeconds: 60 }))
    expect(text).toContain(`flexinfer_model_backfill_items_completed_total{${labels}} 7`)
    expect(text).toContain(`flexinfer_model_backfill_items_discarded_total{${labels}} 2`)
    expect(text).toContain(`flexinfer_model_backfill_preempted_running_seconds_total{${labels}} 41.5`)
    // The contract's useful seconds keep their meaning: every attempt's running time, preempted ones included.
    expect(text).toContain(`flexinfer_model_backfill_useful_running_seconds_total{${labels}} 60`)
    // A state written before these counters existed exports 0.
    expect(await exposition(state({}))).toContain(`flexinfer_model_backfill_items_completed_total{${labels}} 0`)
  })

  it('a count the state takes back is held at its high-water mark: the series never goes down', async () => {
    const m = new BackfillMetrics()
    const states = (m as unknown as { mirror: KvMirror<BackfillState> }).mirror.values
    const labels = 'backfill="bf",namespace="ns",model="llm"'
    const starts = async () => Number(new RegExp(`starts_total\\{${labels}\\} (\\d+)`).exec(await m.metrics())?.[1])
    states.set('ns.bf', state({ starts: 3 }))
    expect(await starts()).toBe(3)
    // The apiserver refused attempt 3's Job: decide takes the start back.
    states.set('ns.bf', state({ starts: 2 }))
    expect(await starts()).toBe(3)
    states.set('ns.bf', state({ starts: 4 }))
    expect(await starts()).toBe(4)
  })

  it('a process that is not the exporter shows none of the cluster-wide series', async () => {
    const m = new BackfillMetrics(undefined, () => false)
    ;(m as unknown as { mirror: KvMirror<BackfillState> }).mirror.values.set('ns.bf', state({ starts: 3 }))
    const text = await m.metrics()
    expect(text).not.toMatch(/^flexinfer_model_backfill_starts_total\{/m)
    expect(text).not.toMatch(/^flexinfer_model_backfill_phase\{/m)
    expect(text).not.toMatch(/^flexinfer_model_backfill_dead_letters_total\{/m)
  })
})
