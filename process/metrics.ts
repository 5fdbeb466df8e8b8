// The four metric families of contract.md, with their exact names and labels. The counts live in each
// backfill's KV state and change atomically with the transition that causes them, so an instance scaling to
// zero right after counting loses nothing; the exporter only reads them (jetstream/kv-mirror.ts keeps its copy current from the republished changes).
//
// Labels, and nothing else: backfill, namespace, model (names a tenant already gave its own objects), result
// (success|failure), reason (the bounded PREEMPTION_REASONS). No message, node, Job, image or user-supplied text.
// A deployment scoped by WATCH_NAMESPACES exports only the backfills of those namespaces: a tenant allowed to
// scrape it learns nothing about another namespace's backfills or models (the bucket holds every namespace's).
import { Counter, Registry } from 'prom-client'
import { type BackfillState, PREEMPTION_REASONS, parseBackfillState } from '../core/state.js'
import { STREAM_DEAD_LETTER } from '../events/catalog.js'
import { type Bus, KvMirror } from '../jetstream/bus.js'
import { registerOpsMetrics } from '../observability/ops-metrics.js'

export class BackfillMetrics {
  readonly registry = new Registry()
  // An unreadable state exports nothing until a decision replaces it (reconcile logs it when it reads it).
  private readonly mirror = new KvMirror<BackfillState>((raw) => {
    const r = parseBackfillState(raw)
    return r.ok ? r.value : null
  })
  private bus?: Bus

  /** namespaces: export only these (WATCH_NAMESPACES); undefined: every backfill in the bucket. */
  constructor(namespaces?: readonly string[]) {
    const states = this.mirror.values
    const scope = namespaces?.length ? new Set(namespaces) : undefined
    const each = (fn: (s: BackfillState, labels: { backfill: string; namespace: string; model: string }) => void) => {
      for (const s of states.values()) {
        if (scope && !scope.has(s.namespace)) continue
        fn(s, { backfill: s.name, namespace: s.namespace, model: s.model })
      }
    }
    new Counter({
      name: 'flexinfer_model_backfill_starts_total',
      help: 'Admitted Job attempts, including retries after preemption.',
      labelNames: ['backfill', 'namespace', 'model'],
      registers: [this.registry],
      collect() {
        this.reset()
        each((s, l) => this.inc(l, s.counters.starts))
      },
    })
    new Counter({
      name: 'flexinfer_model_backfill_completions_total',
      help: 'Terminal attempts by bounded result.',
      labelNames: ['backfill', 'namespace', 'model', 'result'],
      registers: [this.registry],
      collect() {
        this.reset()
        each((s, l) => {
          // `failure`, the reference's value, which contract.md pins; the stored counter keeps its old name so a
          // count written by an earlier release carries on under the new label rather than restarting at 0.
          this.inc({ ...l, result: 'success' }, s.counters.success)
          this.inc({ ...l, result: 'failure' }, s.counters.failed)
        })
      },
    })
    new Counter({
      name: 'flexinfer_model_backfill_preemptions_total',
      help: 'Attempts cancelled for foreground or gaming priority.',
      labelNames: ['backfill', 'namespace', 'model', 'reason'],
      registers: [this.registry],
      collect() {
        this.reset()
        each((s, l) => {
          for (const reason of PREEMPTION_REASONS) {
            const n = s.counters.preemptions[reason]
            if (n) this.inc({ ...l, reason }, n)
          }
        })
      },
    })
    new Counter({
      name: 'flexinfer_model_backfill_useful_running_seconds_total',
      help: 'Cumulative time from Job creation to completion or cancellation; idle waiting is excluded.',
      labelNames: ['backfill', 'namespace', 'model'],
      registers: [this.registry],
      collect() {
        this.reset()
        each((s, l) => this.inc(l, s.counters.usefulSeconds))
      },
    })
    // Phase, preemption latency, dead letters: what the PrometheusRule alerts on (observability/ops-metrics.ts).
    registerOpsMetrics(
      this.registry,
      function* () {
        for (const s of states.values()) if (!scope || scope.has(s.namespace)) yield s
      },
      () => this.bus?.jsm.streams.info(STREAM_DEAD_LETTER).then((info) => info.state.last_seq),
    )
  }

  /** The mirrored states by KV key (the runner lends them to lifecycle's sweep). */
  get states(): ReadonlyMap<string, BackfillState> {
    return this.mirror.values
  }

  start(bus: Bus) {
    this.bus = bus
    return this.mirror.start(bus.nc, bus.kv.backfills)
  }

  stop() {
    return this.mirror.stop()
  }

  metrics() {
    return this.registry.metrics()
  }
}
