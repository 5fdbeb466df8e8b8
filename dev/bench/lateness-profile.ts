// Admission lateness profile: reads admit's 'admission timings' log lines (functions/admit) from a
// benchmark log and gives p50 / p99 of each step. `npx tsx dev/bench/lateness-profile.ts [dev/bench/results/bench.log]`.
import { readFileSync } from 'node:fs'
import { percentileOfSorted } from './percentile.js'

export interface StepProfile {
  step: string
  n: number
  p50: number
  p99: number
  mean: number
}

/** Admission lines in a log (admit writes each once the admission's bookkeeping is done too). */
export const admissionLines = (logText: string) =>
  logText.split('\n').filter((line) => line.includes('"admission timings"')).length

/** One row per step met in the log's admission lines (lateMs, earlyMs and slotMs among them), in first-seen order. */
export function latenessProfile(logText: string): StepProfile[] {
  const steps = new Map<string, number[]>()
  const add = (step: string, v: unknown) => {
    if (typeof v !== 'number' || !Number.isFinite(v)) return
    let list = steps.get(step)
    if (!list) {
      list = []
      steps.set(step, list)
    }
    list.push(v)
  }
  for (const line of logText.split('\n')) {
    if (!line.includes('"admission timings"')) continue
    let entry: { lateMs?: unknown; earlyMs?: unknown; slotMs?: unknown; ms?: Record<string, unknown> }
    try {
      entry = JSON.parse(line)
    } catch {
      continue // a line cut by another writer: skipped, not fatal
    }
    add('lateMs', entry.lateMs)
    add('earlyMs', entry.earlyMs)
    // How long the admission held one of admit's slots (its bookkeeping after the Job runs in a lane of its own).
    add('slotMs', entry.slotMs)
    for (const [step, v] of Object.entries(entry.ms ?? {})) add(step, v)
  }
  return [...steps].map(([step, values]) => {
    const sorted = [...values].sort((a, b) => a - b)
    const mean = Math.round((values.reduce((a, b) => a + b, 0) / values.length) * 10) / 10
    return { step, n: values.length, p50: percentileOfSorted(sorted, 50), p99: percentileOfSorted(sorted, 99), mean }
  })
}

export const formatProfile = (rows: StepProfile[]) =>
  rows
    .map((r) => `${r.step.padEnd(16)} n ${String(r.n).padStart(4)}  p50 ${r.p50}  p99 ${r.p99}  mean ${r.mean}`)
    .join('\n')

if (import.meta.url === `file://${process.argv[1]}`) {
  const path = process.argv[2] ?? 'dev/bench/results/bench.log'
  process.stdout.write(`${formatProfile(latenessProfile(readFileSync(path, 'utf8')))}\n`)
}
