// Preemption, hop by hop: joins, per preempted Job, the benchmark's own line (foreground request published,
// its PubAck, the Job's and the pods' deletion seen on its watches), demand's debug line (request stored, handled,
// cancel published and acked) and cancel's line (cancel stored, handled, the apiserver's answers to the Job's DELETE
// and the pods' deletecollection), and gives p50 / p99 of each hop. All epoch ms on one machine's clock (the stored
// times are nats-server's). `npx tsx dev/bench/preemption-profile.ts [dev/bench/results/bench.log]`.
import { readFileSync } from 'node:fs'
import { percentileOfSorted } from './percentile.js'

/** The benchmark's line for one preemption (dev/bench/run.ts). */
export const BENCH_LINE = 'bench: preemption'

interface Times {
  bench?: { sent?: number; acked?: number; jobSeen?: number; podsSeen?: number }
  demand?: { stored?: number; handled?: number; acked?: number; via?: string }
  cancel?: { stored?: number; handled?: number; job?: number; pods?: number }
}

/** Hops in path order: name, from, to. Consecutive where both ends are known; the totals last. */
const HOPS: [string, (t: Times) => number | undefined, (t: Times) => number | undefined][] = [
  ['publish_to_stored', (t) => t.bench?.sent, (t) => t.demand?.stored],
  ['publish_to_puback', (t) => t.bench?.sent, (t) => t.bench?.acked],
  ['stored_to_demand', (t) => t.demand?.stored, (t) => t.demand?.handled],
  ['demand_to_cancel_stored', (t) => t.demand?.handled, (t) => t.cancel?.stored],
  ['cancel_stored_to_demand_puback', (t) => t.cancel?.stored, (t) => t.demand?.acked],
  ['cancel_queued', (t) => t.cancel?.stored, (t) => t.cancel?.handled],
  ['job_delete', (t) => t.cancel?.handled, (t) => t.cancel?.job],
  ['pods_delete', (t) => t.cancel?.job, (t) => t.cancel?.pods],
  ['pods_watch', (t) => t.cancel?.pods, (t) => t.bench?.podsSeen],
  ['job_watch', (t) => t.cancel?.job, (t) => t.bench?.jobSeen],
  ['total_job', (t) => t.bench?.sent, (t) => t.bench?.jobSeen],
  ['total_pods', (t) => t.bench?.sent, (t) => t.bench?.podsSeen],
]

export interface HopProfile {
  hop: string
  n: number
  p50: number
  p99: number
  max: number
}

const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined)

/**
 * One row per hop, over the Jobs the benchmark preempted (its lines name them). A Job cancelled twice (demand, then
 * lifecycle) counts its first cancel: the one that deleted it. `via` (demand's watched claim or its read after the
 * idle write) is counted in `vias`.
 */
export function preemptionProfile(logText: string): {
  rows: HopProfile[]
  samples: number
  vias: Record<string, number>
} {
  const byJob = new Map<string, Times>()
  const of = (job: string) => {
    let t = byJob.get(job)
    if (!t) {
      t = {}
      byJob.set(job, t)
    }
    return t
  }
  const benchJobs: string[] = []
  for (const line of logText.split('\n')) {
    if (!line.startsWith('{')) continue
    const isBench = line.includes(BENCH_LINE)
    const isDemand = line.includes('"demand: cancel published"')
    const isCancel = line.includes('"cancel: job delete accepted"')
    if (!isBench && !isDemand && !isCancel) continue
    let e: { job?: unknown; via?: unknown; t?: Record<string, unknown> }
    try {
      e = JSON.parse(line)
    } catch {
      continue // a line cut by another writer: skipped, not fatal
    }
    if (typeof e.job !== 'string' || typeof e.t !== 'object' || e.t === null) continue
    const times = of(e.job)
    const t = e.t
    if (isBench && !times.bench) {
      times.bench = { sent: num(t.sent), acked: num(t.acked), jobSeen: num(t.jobSeen), podsSeen: num(t.podsSeen) }
      benchJobs.push(e.job)
    } else if (isDemand && !times.demand) {
      times.demand = { stored: num(t.stored), handled: num(t.handled), acked: num(t.acked), via: String(e.via) }
    } else if (isCancel) {
      const handled = num(t.handled)
      if (handled !== undefined && (times.cancel?.handled ?? Number.POSITIVE_INFINITY) > handled)
        times.cancel = { stored: num(t.stored), handled, job: num(t.job), pods: num(t.pods) }
    }
  }
  const vias: Record<string, number> = {}
  const values = new Map<string, number[]>(HOPS.map(([h]) => [h, []]))
  for (const job of benchJobs) {
    const t = byJob.get(job) as Times
    if (t.demand?.via) vias[t.demand.via] = (vias[t.demand.via] ?? 0) + 1
    for (const [hop, from, to] of HOPS) {
      const a = from(t)
      const b = to(t)
      if (a !== undefined && b !== undefined) values.get(hop)?.push(b - a)
    }
  }
  const rows = HOPS.flatMap(([hop]) => {
    const sorted = [...(values.get(hop) ?? [])].sort((a, b) => a - b)
    if (!sorted.length) return []
    return [
      {
        hop,
        n: sorted.length,
        p50: percentileOfSorted(sorted, 50),
        p99: percentileOfSorted(sorted, 99),
        max: percentileOfSorted(sorted, 100),
      },
    ]
  })
  return { rows, samples: benchJobs.length, vias }
}

export const formatHops = (rows: HopProfile[]) =>
  rows
    .map(
      (r) =>
        `${r.hop.padEnd(31)} n ${String(r.n).padStart(4)}  p50 ${String(r.p50).padStart(6)}  p99 ${String(r.p99).padStart(6)}  max ${r.max}`,
    )
    .join('\n')

if (import.meta.url === `file://${process.argv[1]}`) {
  const path = process.argv[2] ?? 'dev/bench/results/bench.log'
  const { rows, samples, vias } = preemptionProfile(readFileSync(path, 'utf8'))
  process.stdout.write(`${samples} preemptions; demand's cancel via ${JSON.stringify(vias)}\n${formatHops(rows)}\n`)
}
