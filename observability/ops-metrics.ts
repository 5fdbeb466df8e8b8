// What an operator alerts on beyond the contract's four counters (monitoring/prometheus-rule.yaml): the phase each
// backfill is in (a backfill stuck in Blocked, Starting or Cancelling), how long a cancel signal took to become the
// Job's DELETE (preemption latency), and the dead letters stored so far. The phase and the dead-letter count are
// read from NATS, so any one instance reports the cluster-wide values (take one copy per series, as with the
// counters); the latency is observed by the cancel instances themselves (sum them).
import { Counter, Gauge, Histogram, type Registry } from 'prom-client'
import { PHASES } from '../core/api.js'
import type { BackfillState } from '../core/state.js'

/**
 * Foreground signal (the cancel request's `at`) → the Job's DELETE accepted, per cancel reason. One histogram per
 * process: the cancel function observes it, every registry of that process exports it.
 */
export const preemptionLatency = new Histogram({
  name: 'flexinfer_model_backfill_preemption_latency_seconds',
  help: 'From the signal that cancels an attempt (foreground request, gaming session, spec change…) to its Job DELETE accepted.',
  labelNames: ['reason'],
  buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [],
})

/** Adds the operational metrics to a registry that mirrors the backfill states. */
export function registerOpsMetrics(
  registry: Registry,
  /** The backfills this exporter may show (a namespace-scoped deployment: only its namespaces). */
  states: () => Iterable<BackfillState>,
  /** The dead-letter stream's last sequence (stream info; undefined while there is no NATS connection). */
  deadLetterSeq: () => Promise<number> | undefined,
) {
  registry.registerMetric(preemptionLatency)
  new Gauge({
    name: 'flexinfer_model_backfill_phase',
    help: 'The phase each backfill is in (1 for its current phase, 0 for the others).',
    labelNames: ['backfill', 'namespace', 'model', 'phase'],
    registers: [registry],
    collect() {
      this.reset()
      for (const s of states()) {
        for (const phase of PHASES) {
          this.set({ backfill: s.name, namespace: s.namespace, model: s.model, phase }, s.phase === phase ? 1 : 0)
        }
      }
    },
  })
  // The dead-letter stream's last sequence: every event any function (or the bridge) ever refused, a counter that
  // only resets when the stream is re-created. Read at scrape time (stream info, the JetStream API's deadline);
  // when NATS does not answer, the last value read stands.
  let deadLetters = 0
  new Counter({
    name: 'flexinfer_model_backfill_dead_letters_total',
    help: 'Events refused by any function and stored in FLEXINFER_DEADLETTER (its last sequence number).',
    registers: [registry],
    async collect() {
      const read = deadLetterSeq()
      if (read) {
        try {
          deadLetters = await read
        } catch {
          // keep the last value: a scrape must not fail because NATS is briefly away
        }
      }
      this.reset()
      this.inc(deadLetters)
    },
  })
}
