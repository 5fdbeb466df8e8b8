// The four metric families of contract.md, with their exact names and labels, and three beyond them (items
// completed, items discarded by preemption, running seconds of preempted attempts). The counts live in each
// backfill's KV state and change atomically with the transition that causes them, so an instance scaling to
// zero right after counting loses nothing; the exporter only reads them (pkg/jetstream/kv-mirror.ts keeps its copy current from the republished changes).
//
// Labels, and nothing else: backfill, namespace, model (names a tenant already gave its own objects), result
// (success|failure), reason (the bounded PREEMPTION_REASONS). No message, node, Job, image or user-supplied text.
// A deployment scoped by WATCH_NAMESPACES exports only the backfills of those namespaces: a tenant allowed to
// scrape it learns nothing about another namespace's backfills or models (the bucket holds every namespace's).
//
// One count per series: every process mirrors the same state, so these series (and the phase and dead-letter ones
// of ops-metrics.ts) are exported only where `exportsCluster()` says so — in a deployment, the one process holding
// the exporter lease (pkg/observability/exporter-lease.ts) — and `sum by (…)` over everything scraped is the truth. A
// stored count can be taken back (a start whose Job the apiserver refused, a preemption a completion won over): the
// exporter holds each series at its high-water mark until the count passes it again, so a series never goes down
// and rate() never reads a reset where there was none.
import { Counter, collectDefaultMetrics, Registry } from 'prom-client'
import { STREAM_DEAD_LETTER } from '../../events/catalog.js'
import { type BackfillState, PREEMPTION_REASONS, parseBackfillState } from '../core/state.js'
import type { Bus } from '../jetstream/bus.js'
import { KvMirror } from '../jetstream/kv-mirror.js'
import { registerOpsMetrics } from '../observability/ops-metrics.js'

export class BackfillMetrics {
  readonly registry = new Registry()
  // An unreadable state exports nothing until a decision replaces it (reconcile logs it when it reads it).
  private readonly mirror = new KvMirror<BackfillState>((raw) => {
    const r = parseBackfillState(raw)
    return r.ok ? r.value : null
  })
  private bus?: Bus

  /**
   * namespaces: export only these (WATCH_NAMESPACES); undefined: every backfill in the bucket. exportsCluster: whether
   * this process exports the cluster-wide series now (default: always, one process alone).
   */
  constructor(namespaces?: readonly string[], exportsCluster: () => boolean = () => true) {
    // The process's own (CPU, memory, event-loop lag, GC, open handles): per pod, whatever it exports besides.
    collectDefaultMetrics({ register: this.registry })
    const states = this.mirror.values
    const scope = namespaces?.length ? new Set(namespaces) : undefined
    // High-water marks by backfill (its KV key) and series; a backfill that left the mirror is forgotten.
    const marks = new Map<string, Map<string, number>>()
    const monotonic = (key: string, series: string, value: number) => {
      const own = marks.get(key) ?? new Map<string, number>()
      marks.set(key, own)
      const v = Math.max(value, own.get(series) ?? 0)
      own.set(series, v)
      return v
    }
    const exporting = () => exportsCluster()
    type Labels = { backfill: string; namespace: string; model: string }
    const each = (fn: (s: BackfillState, labels: Labels, mono: (series: string, v: number) => number) => void) => {
      if (!exporting()) return
      for (const key of marks.keys()) if (!states.has(key)) marks.delete(key)
      for (const [key, s] of states) {
        if (scope && !scope.has(s.namespace)) continue
        fn(s, { backfill: s.name, namespace: s.namespace, model: s.model }, (series, v) => monotonic(key, series, v))
      }
    }
    new Counter({
      name: 'flexinfer_model_backfill_starts_total',
      help: 'Admitted Job attempts, including retries after preemption.',
      labelNames: ['backfill', 'namespace', 'model'],
      registers: [this.registry],
      collect() {
        this.reset()
        each((s, l, mono) => this.inc(l, mono('starts', s.counters.starts)))
      },
    })
    new Counter({
      name: 'flexinfer_model_backfill_completions_total',
      help: 'Terminal attempts by bounded result.',
      labelNames: ['backfill', 'namespace', 'model', 'result'],
      registers: [this.registry],
      collect() {
        this.reset()
        each((s, l, mono) => {
          // The label is `failure`, the FlexInfer reference controller's value, which contract.md pins. The state's
          // counter is `failed`: renaming a stored field would restart every existing count at 0.
          this.inc({ ...l, result: 'success' }, mono('success', s.counters.success))
          this.inc({ ...l, result: 'failure' }, mono('failure', s.counters.failed))
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
        each((s, l, mono) => {
          for (const reason of PREEMPTION_REASONS) {
            const n = s.counters.preemptions[reason]
            const v = mono(`preemptions ${reason}`, n ?? 0)
            if (v) this.inc({ ...l, reason }, v)
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
        each((s, l, mono) => this.inc(l, mono('useful', s.counters.usefulSeconds)))
      },
    })
    // Beyond the contract's four (which keep their meaning): what the workloads' reports and the preemptions cost.
    const beyond = [
      ['flexinfer_model_backfill_items_completed_total', 'Work items the attempts reported completed.', 'itemsDone'],
      [
        'flexinfer_model_backfill_items_discarded_total',
        'Work items in flight when a preemption stopped their attempt, thrown away.',
        'itemsDiscarded',
      ],
      [
        'flexinfer_model_backfill_preempted_running_seconds_total',
        'Running seconds of attempts that were preempted (also in useful_running_seconds).',
        'preemptedSeconds',
      ],
    ] as const
    for (const [name, help, field] of beyond) {
      new Counter({
        name,
        help,
        labelNames: ['backfill', 'namespace', 'model'],
        registers: [this.registry],
        collect() {
          this.reset()
          each((s, l, mono) => this.inc(l, mono(field, s.counters[field] ?? 0)))
        },
      })
    }
    // Phase, preemption latency, dead letters: what the PrometheusRule alerts on (pkg/observability/ops-metrics.ts).
    registerOpsMetrics(this.registry, {
      *states() {
        for (const s of states.values()) if (!scope || scope.has(s.namespace)) yield s
      },
      deadLetterSeq: () => this.bus?.jsm.streams.info(STREAM_DEAD_LETTER).then((info) => info.state.last_seq),
      natsPing: () => (this.bus && !this.bus.nc.isClosed() ? this.bus.nc.rtt() : undefined),
      exportsCluster: exporting,
    })
  }

  /** The mirrored states by KV key (the runner lends them to lifecycle's sweep). */
  get states(): ReadonlyMap<string, BackfillState> {
    return this.mirror.values
  }

  /** Mirrors the backfill states from `bus` (what the cluster-wide series and lifecycle's sweep read). */
  start(bus: Bus) {
    this.attach(bus)
    return this.mirror.start(bus.nc, bus.kv.backfills)
  }

  /**
   * Only this process's own metrics over `bus` (NATS reachability), without mirroring the states: a process that
   * never exports the cluster-wide series (one served over HTTP) has no use for the mirror.
   */
  attach(bus: Bus) {
    this.bus = bus
  }

  stop() {
    return this.mirror.stop()
  }

  metrics() {
    return this.registry.metrics()
  }
}
