// What an operator alerts on beyond the contract's four counters (deploy/monitoring/prometheusrule.yaml): the phase each
// backfill is in (a backfill stuck in Blocked, Starting or Cancelling), how long a cancel signal took to become the
// Job's DELETE (preemption latency), the dead letters stored so far, whether this process reaches NATS, what its
// consumers hold, and the fail-safe's state. The phase and the dead-letter count are read from NATS and exported only
// by the process that exports the cluster-wide series (pkg/transport/metrics.ts); the rest is each process's own.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client'
import { PHASES } from '../core/api.js'
import type { BackfillState } from '../core/state.js'
import { withDeadline } from '../lib/deadline.js'

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

/**
 * The fail-safe (functions/cancel/fail-safe.ts), per cancel process: whether it is engaged, for how long foreground
 * demand has been unobservable as it sees it, and the Jobs it deleted. Other processes export 0.
 */
export const failSafeEngaged = new Gauge({
  name: 'flexinfer_model_backfill_failsafe_engaged',
  help: 'Foreground demand has not been observable for longer than FAILSAFE_BLIND_MS: running backfills are cancelled and none start.',
  registers: [],
})
export const foregroundUnobservable = new Gauge({
  name: 'flexinfer_model_backfill_foreground_unobservable_seconds',
  help: 'How long the fail-safe has not seen foreground demand observable (NATS reachable, demand pulling); 0 while it is.',
  registers: [],
})
export const failSafeCancellations = new Counter({
  name: 'flexinfer_model_backfill_failsafe_cancellations_total',
  help: 'Backfill Jobs deleted by the fail-safe through Kubernetes while foreground demand was unobservable.',
  registers: [],
})
/**
 * The gateway ingress (functions/ingress): whether this instance can publish foreground requests now. 0 makes
 * foreground demand invisible to the preemption path (cancel's fail-safe sees it through the ingress's /readyz).
 * Other processes export 1: they have nothing to publish.
 */
export const ingressPublishing = new Gauge({
  name: 'flexinfer_model_backfill_ingress_publishing',
  help: 'Whether this gateway ingress can publish foreground requests to NATS (its stream answers, its latest publish succeeded).',
  registers: [],
})
ingressPublishing.set(1)
/** How long a scrape waits for NATS before it reports it unreachable (or keeps a NATS-read value as it was). */
const NATS_DEADLINE_MS = 1_000

export interface OpsSources {
  /** The backfills this exporter may show (a namespace-scoped deployment: only its namespaces). */
  states: () => Iterable<BackfillState>
  /** The dead-letter stream's last sequence (stream info; undefined while there is no NATS connection). */
  deadLetterSeq: () => Promise<number> | undefined
  /** A round trip to NATS (undefined: no connection). */
  natsPing: () => Promise<unknown> | undefined
  /** Whether this process exports the cluster-wide series (the phase and the dead letters are). */
  exportsCluster: () => boolean
}

/** Adds the operational metrics to a registry that mirrors the backfill states. */
export function registerOpsMetrics(registry: Registry, src: OpsSources) {
  registry.registerMetric(preemptionLatency)
  for (const m of [failSafeEngaged, foregroundUnobservable, failSafeCancellations, ingressPublishing]) {
    registry.registerMetric(m)
  }
  // Reachability as this process sees it, at scrape time and bounded. Every function reports its own (a partition
  // may cut one off and not the others): the NATS-unreachable alert is per pod.
  new Gauge({
    name: 'flexinfer_model_backfill_nats_up',
    help: 'Whether this process reached NATS at scrape time (a ping answered within 1 s).',
    registers: [registry],
    async collect() {
      const ping = src.natsPing()
      this.set(
        ping
          ? await withDeadline(ping, NATS_DEADLINE_MS, 'NATS ping').then(
              () => 1,
              () => 0,
            )
          : 0,
      )
    },
  })
  new Gauge({
    name: 'flexinfer_model_backfill_phase',
    help: 'The phase each backfill is in (1 for its current phase, 0 for the others).',
    labelNames: ['backfill', 'namespace', 'model', 'phase'],
    registers: [registry],
    collect() {
      this.reset()
      if (!src.exportsCluster()) return
      for (const s of src.states()) {
        for (const phase of PHASES) {
          this.set({ backfill: s.name, namespace: s.namespace, model: s.model, phase }, s.phase === phase ? 1 : 0)
        }
      }
    },
  })
  // The dead-letter stream's last sequence: every event any function (or the bridge) ever refused, a counter that
  // only resets when the stream is re-created (held at its high-water mark then). Read at scrape time, bounded;
  // when NATS does not answer, the last value read stands. Labelled by the stream so that a process that does not
  // export the cluster-wide series has no series at all (an unlabelled counter would show 0, and the exporter's
  // series jumping from 0 to the count after a handover would read as that many dead letters at once).
  let deadLetters = 0
  new Counter({
    name: 'flexinfer_model_backfill_dead_letters_total',
    help: 'Events refused by any function and stored in FLEXINFER_DEADLETTER (its last sequence number).',
    labelNames: ['stream'],
    registers: [registry],
    async collect() {
      this.reset()
      if (!src.exportsCluster()) return
      const read = src.deadLetterSeq()
      if (read) {
        try {
          deadLetters = Math.max(deadLetters, await withDeadline(read, NATS_DEADLINE_MS * 2, 'dead-letter stream info'))
        } catch {
          // keep the last value: a scrape must not fail because NATS is briefly away
        }
      }
      this.inc({ stream: 'FLEXINFER_DEADLETTER' }, deadLetters)
    },
  })
}

/**
 * What this process's durable consumers hold undelivered or unacknowledged, read at scrape time (bounded): a lag that
 * keeps growing is a function that does not keep up (or is not running). Replicas of one function share its consumers
 * and report the same value: take one copy (`max by (stream, consumer)`).
 */
export interface PulledConsumer {
  stream: string
  consumer: string
  /** Its num_pending + num_ack_pending (consumer info). */
  pending: () => Promise<number>
}

export function registerConsumerLag(registry: Registry, consumers: () => readonly PulledConsumer[]) {
  new Gauge({
    name: 'flexinfer_model_backfill_consumer_pending',
    help: 'Messages of a durable consumer this process pulls that are pending or awaiting acknowledgement.',
    labelNames: ['stream', 'consumer'],
    registers: [registry],
    async collect() {
      this.reset()
      await Promise.all(
        consumers().map(async ({ stream, consumer, pending }) => {
          try {
            this.set({ stream, consumer }, await withDeadline(pending(), NATS_DEADLINE_MS, 'consumer info'))
          } catch {
            // NATS away: no value rather than a wrong one (flexinfer_model_backfill_nats_up says why)
          }
        }),
      )
    },
  })
}
