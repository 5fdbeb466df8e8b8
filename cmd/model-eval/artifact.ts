// The run's artifact per model, from its assembled items: the benchmark over its iterations, the coherence verdict
// with each probe's evidence, and the provenance a result needs to be read later (the model as the engine reported
// it, the engine kind, the settings, the probe set's version, the run identity and the attempts it took).
import type { IterationResult } from './benchmark.js'
import { quantile } from './benchmark.js'
import type { GateProfile } from './gate-profile.js'
import type { AssembledRun } from './items.js'
import { PROBE_SET_VERSION, type ProbeEvidence, type Verdict, verdictOf } from './probes.js'
import type { Settings } from './settings.js'
import type { ModelInfo, Skipped } from './work.js'

export interface ModelArtifact {
  runId: string
  model: string
  engine: string
  reported: ModelInfo
  probeSetVersion: string
  settings: {
    api: string
    expect: string
    batchSize: number
    iters: number
    minDurationMs: number
    benchMaxTokens: number
  }
  /**
   * The benchmark's concurrency: BATCH_SIZE as configured, and the gate's cap in front of the endpoint (null without
   * a gate); at most the smaller of the two requests reached the engine at once.
   */
  concurrency: { configured: number; gateMaxInFlight: number | null; effective: number }
  /** The gate's profile as it reported it, or null. */
  gate: GateProfile | null
  attempts: number[]
  items: { total: number; byAttempt: Record<string, number> }
  startedAt: string
  finishedAt: string
  verdict: Verdict & { error?: string }
  probes: ProbeEvidence[]
  benchmark: {
    iterations: IterationResult[]
    /** Medians of the iterations' p50 and the largest p99: one slow iteration shows. */
    ttftMs: { p50: number; p99: number }
    latencyMs: { p50: number; p99: number }
    outputTokensPerSecond: number
    requests: number
    failed: number
  }
  /** Why the model could not be evaluated, when it could not (unreachable, not served). */
  error?: { kind: string; message: string }
}

const skippedOf = (v: unknown) => (v as Partial<Skipped>)?.skipped

export function modelArtifacts(run: AssembledRun, settings: Settings): ModelArtifact[] {
  return settings.models.map(({ name, engine }) => {
    const mine = run.items.filter((i) => i.model === name)
    const info = (mine.find((i) => i.kind === 'info')?.record.result ?? {}) as ModelInfo
    const probes: ProbeEvidence[] = []
    const iterations: IterationResult[] = []
    let skipped: { kind: string; message: string } | undefined
    const byAttempt: Record<string, number> = {}
    for (const i of mine) {
      byAttempt[i.record.attempt] = (byAttempt[i.record.attempt] ?? 0) + 1
      const s = skippedOf(i.record.result)
      if (s) skipped ??= s
      else if (i.kind === 'probe') probes.push(i.record.result as ProbeEvidence)
      else if (i.kind === 'bench') iterations.push(i.record.result as IterationResult)
    }
    const error = info.error ?? skipped
    const verdict = verdictOf(probes)
    const median = (xs: number[]) => quantile(xs, 0.5)
    const times = mine.map((i) => ({
      start: Date.parse(i.record.startedAt),
      end: Date.parse(i.record.startedAt) + i.record.ms,
    }))
    const tokens = iterations.reduce((a, it) => a + it.outputTokens, 0)
    const benchMs = iterations.reduce((a, it) => a + it.durationMs, 0)
    return {
      runId: run.runId,
      model: name,
      engine,
      reported: info,
      probeSetVersion: PROBE_SET_VERSION,
      settings: {
        api: settings.api,
        expect: settings.expect,
        batchSize: settings.batchSize,
        iters: settings.iters,
        minDurationMs: settings.minDurationMs,
        benchMaxTokens: settings.benchMaxTokens,
      },
      concurrency: {
        configured: settings.batchSize,
        gateMaxInFlight: settings.gate?.maxInFlight ?? null,
        effective: Math.min(settings.batchSize, settings.gate?.maxInFlight ?? settings.batchSize),
      },
      gate: settings.gate ?? null,
      attempts: run.attempts,
      items: { total: mine.length, byAttempt },
      startedAt: new Date(Math.min(...times.map((t) => t.start))).toISOString(),
      finishedAt: new Date(Math.max(...times.map((t) => t.end))).toISOString(),
      verdict: error ? { ...verdict, pass: false, error: error.message } : verdict,
      probes,
      benchmark: {
        iterations,
        ttftMs: {
          p50: median(iterations.map((i) => i.ttftMs.p50)),
          p99: Math.max(0, ...iterations.map((i) => i.ttftMs.p99)),
        },
        latencyMs: {
          p50: median(iterations.map((i) => i.latencyMs.p50)),
          p99: Math.max(0, ...iterations.map((i) => i.latencyMs.p99)),
        },
        outputTokensPerSecond: benchMs > 0 ? Math.round((tokens / (benchMs / 1000)) * 10) / 10 : 0,
        requests: iterations.reduce((a, it) => a + it.requests, 0),
        failed: iterations.reduce((a, it) => a + it.failed, 0),
      },
      ...(error ? { error } : {}),
    }
  })
}
