// The monitoring manifests name only metrics the functions really export: every metric in an alert expression
// (deploy/monitoring/prometheusrule.yaml, and the chart's copy of its groups) must appear in the exposition of
// pkg/transport/metrics.ts (which includes pkg/observability/ops-metrics.ts). The chart's copies of the CRD, the dashboard and the
// alert groups must be the sources' own.
import { readFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { parse, parseAllDocuments } from 'yaml'
import { PHASES } from '../../pkg/core/api.js'
import { type BackfillState, emptyCounters } from '../../pkg/core/state.js'
import type { KvMirror } from '../../pkg/jetstream/kv-mirror.js'
import { preemptionLatency, registerConsumerLag } from '../../pkg/observability/ops-metrics.js'
import { BackfillMetrics } from '../../pkg/transport/metrics.js'

const read = (path: string) => readFile(new URL(`../../${path}`, import.meta.url), 'utf8')

interface Rule {
  alert: string
  expr: string
  for?: string
  labels?: { severity?: string }
  annotations?: { summary?: string; description?: string }
}
const rulesOf = (groups: { rules: Rule[] }[]) => groups.flatMap((g) => g.rules)

async function exposition() {
  const m = new BackfillMetrics()
  const state: BackfillState = {
    namespace: 'ns',
    name: 'bf',
    model: 'llm',
    generation: 1,
    phase: 'Blocked',
    reason: 'TemplateNotFound',
    message: '',
    attempts: 0,
    windowStart: '2026-03-01T00:00:00.000Z',
    counters: emptyCounters(),
    updatedAt: '2026-03-01T00:00:00.000Z',
  }
  ;(m as unknown as { mirror: KvMirror<BackfillState> }).mirror.values.set('ns.bf', state)
  preemptionLatency.observe({ reason: 'ForegroundDemand' }, 0.02)
  // What the runner adds for the consumers it pulls.
  registerConsumerLag(m.registry, () => [])
  return m.metrics()
}

describe('monitoring', () => {
  it('every metric an alert uses is exported by pkg/transport/metrics.ts', async () => {
    const [rule, text] = await Promise.all([read('deploy/monitoring/prometheusrule.yaml'), exposition()])
    const rules = rulesOf(parse(rule).spec.groups)
    const exported = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]))
    const used = new Set(
      rules.flatMap((r) =>
        [...r.expr.matchAll(/\bflexinfer_\w+/g)].map((m) => m[0].replace(/_(bucket|count|sum)$/, '')),
      ),
    )
    expect(used.size).toBeGreaterThanOrEqual(4)
    for (const name of used) expect(exported, `${name} (used by an alert)`).toContain(name)
    // What the alerts are for: stuck backfills, slow preemption, dead letters, NATS unreachable, the fail-safe
    // engaged, a consumer's lag growing.
    expect([...used].sort()).toEqual(
      expect.arrayContaining([
        'flexinfer_model_backfill_dead_letters_total',
        'flexinfer_model_backfill_phase',
        'flexinfer_model_backfill_preemption_latency_seconds',
        'flexinfer_model_backfill_nats_up',
        'flexinfer_model_backfill_failsafe_engaged',
        'flexinfer_model_backfill_consumer_pending',
        'flexinfer_model_backfill_ingress_publishing',
      ]),
    )
    // A function, and the whole preemption path, down: `up` and `absent` by the PodMonitor's component label.
    const availability = rules.map((r) => r.expr).join('\n')
    expect(availability).toMatch(/absent\(up\{app_kubernetes_io_component="demand"\} == 1\)/)
    expect(availability).toMatch(/absent\(up\{app_kubernetes_io_component="cancel"\} == 1\)/)
    for (const r of rules) {
      expect(r.labels?.severity, r.alert).toMatch(/^(info|warning|critical)$/)
      expect(r.annotations?.summary, r.alert).toBeTruthy()
      expect(r.for, r.alert).toMatch(/^\d+[mh]$/)
    }
  })

  it('every alert has a runbook_url into a section of docs/operating.md', async () => {
    const [rule, doc] = await Promise.all([read('deploy/monitoring/prometheusrule.yaml'), read('docs/operating.md')])
    // GitHub's anchors: the heading lower-cased, punctuation dropped, spaces to dashes.
    const anchors = new Set(
      [...doc.matchAll(/^#+ (.+)$/gm)].map((m) =>
        (m[1] as string)
          .toLowerCase()
          .replace(/[^a-z0-9 -]/g, '')
          .replace(/ /g, '-'),
      ),
    )
    for (const r of rulesOf(parse(rule).spec.groups)) {
      const url = (r.annotations as { runbook_url?: string } | undefined)?.runbook_url ?? ''
      const [base, anchor] = url.split('#')
      expect(base, r.alert).toBe('https://github.com/flexinfer/model-backfill/blob/main/docs/operating.md')
      expect(anchors, `${r.alert}: #${anchor}`).toContain(anchor)
    }
  })

  it('every function process exports prom-client’s default process metrics and its NATS reachability', async () => {
    const text = await new BackfillMetrics(undefined, () => false).metrics()
    for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_seconds']) {
      expect(text).toContain(`# TYPE ${name} `)
    }
    expect(text).toMatch(/^flexinfer_model_backfill_nats_up 0$/m)
    // Not the exporter: none of the cluster-wide series, so a sum over every pod counts each once.
    expect(text).not.toMatch(
      /^flexinfer_model_backfill_(starts|completions|preemptions|useful_running_seconds|dead_letters)_total\{/m,
    )
    expect(text).not.toMatch(/^flexinfer_model_backfill_phase\{/m)
  })

  it('the phase gauge and the latency histogram look as the alerts expect', async () => {
    const text = await exposition()
    const labels = 'backfill="bf",namespace="ns",model="llm"'
    expect(text).toContain(`flexinfer_model_backfill_phase{${labels},phase="Blocked"} 1`)
    for (const phase of PHASES.filter((p) => p !== 'Blocked')) {
      expect(text).toContain(`flexinfer_model_backfill_phase{${labels},phase="${phase}"} 0`)
    }
    expect(text).toMatch(
      /flexinfer_model_backfill_preemption_latency_seconds_bucket\{le="0.025",reason="ForegroundDemand"\} [1-9]/,
    )
    // No NATS here: the dead-letter counter stays at its last value (0) rather than failing the scrape.
    expect(text).toContain('flexinfer_model_backfill_dead_letters_total{stream="FLEXINFER_DEADLETTER"} 0')
  })

  it('the PodMonitor scrapes /metrics of every function and the ingress with the metrics’ own labels', async () => {
    const [monitor] = parseAllDocuments(await read('deploy/monitoring/podmonitor.yaml')).map((d) => d.toJS())
    expect(monitor.spec.selector.matchExpressions).toEqual([
      {
        key: 'app.kubernetes.io/component',
        operator: 'In',
        values: ['source', 'demand', 'admit', 'cancel', 'lifecycle', 'ingress'],
      },
    ])
    for (const e of monitor.spec.podMetricsEndpoints) expect(e).toMatchObject({ path: '/metrics', honorLabels: true })
  })

  it('the chart ships the sources’ own CRD, dashboard and alert groups', async () => {
    const [crd, chartCrd, dashboard, chartDashboard, rule, chartRules] = await Promise.all([
      read('crds/modelbackfill.yaml'),
      read('deploy/charts/model-backfill/files/crd-modelbackfill.yaml'),
      read('deploy/base/grafana-dashboard.json'),
      read('deploy/charts/model-backfill/files/grafana-dashboard.json'),
      read('deploy/monitoring/prometheusrule.yaml'),
      read('deploy/charts/model-backfill/files/alert-rules.yaml'),
    ])
    expect(chartCrd, 'cp crds/modelbackfill.yaml deploy/charts/model-backfill/files/crd-modelbackfill.yaml').toBe(crd)
    expect(chartDashboard, 'cp deploy/base/grafana-dashboard.json deploy/charts/model-backfill/files/').toBe(dashboard)
    expect(
      parse(chartRules),
      'deploy/charts/model-backfill/files/alert-rules.yaml = spec of deploy/monitoring/prometheusrule.yaml',
    ).toEqual(parse(rule).spec)
  })
})
