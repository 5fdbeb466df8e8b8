// The gate's own metrics (a registry per gate: one sidecar per Job pod, scraped at /flexinfer-gate/metrics).
import { Counter, Gauge, Histogram, Registry } from 'prom-client'

export class GateMetrics {
  readonly registry = new Registry()
  readonly requests = new Counter({
    name: 'flexinfer_gate_requests_total',
    help: 'Background requests the gate sent to the engine.',
    registers: [this.registry],
  })
  readonly inFlight = new Gauge({
    name: 'flexinfer_gate_in_flight',
    help: 'Background requests in flight at the engine through the gate.',
    registers: [this.registry],
  })
  readonly refused = new Counter({
    name: 'flexinfer_gate_refused_total',
    help: 'Background requests the gate answered itself: 503 closed, 429 over the cap, 413 too large.',
    labelNames: ['status'],
    registers: [this.registry],
  })
  readonly aborted = new Counter({
    name: 'flexinfer_gate_aborted_total',
    help: 'Background requests in flight whose upstream connection the gate closed when it closed.',
    registers: [this.registry],
  })
  readonly ended = new Counter({
    name: 'flexinfer_gate_requests_ended_total',
    help: 'Background requests that ended at the engine: completed (the whole answer), aborted (cut by the closing gate) or failed (the engine or the workload left).',
    labelNames: ['outcome'],
    registers: [this.registry],
  })
  readonly abortSeconds = new Histogram({
    name: 'flexinfer_gate_abort_seconds',
    help: 'Closing signal received to the last in-flight upstream request aborted.',
    buckets: [0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1],
    registers: [this.registry],
  })
  readonly tokens = new Counter({
    name: 'flexinfer_gate_tokens_total',
    help: 'Background tokens streamed through the gate: completed (the answer ended normally) or discarded (cut).',
    labelNames: ['outcome'],
    registers: [this.registry],
  })
  private readonly open = new Gauge({
    name: 'flexinfer_gate_open',
    help: '1 while the gate admits background requests; 0 starting or closed.',
    registers: [this.registry],
  })

  setOpen(open: boolean) {
    this.open.set(open ? 1 : 0)
  }
}
