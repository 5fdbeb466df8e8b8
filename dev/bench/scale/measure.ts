// What dev/bench/scale/run.ts reads from the outside, never from the functions' own bookkeeping: a process's CPU time
// and RSS from /proc, the apiserver's own request counters from its /metrics, and lifecycle's sweep log lines.
import { execFileSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'

let clockTicks: number | undefined
/** Clock ticks per second of /proc/<pid>/stat (getconf CLK_TCK; 100 on Linux almost everywhere). */
function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8', timeout: 5000 }).trim()) || 100
    } catch {
      clockTicks = 100
    }
  }
  return clockTicks
}

/** user + system CPU seconds of a /proc/<pid>/stat line (the command name may hold spaces and parentheses). */
export function parseCpuSeconds(stat: string, ticks = 100): number | undefined {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  // After ") ": field 3 (state) is index 0, so utime (14) and stime (15) are 11 and 12.
  const utime = Number(fields[11])
  const stime = Number(fields[12])
  return Number.isFinite(utime) && Number.isFinite(stime) ? (utime + stime) / ticks : undefined
}

export function cpuSeconds(pid: number): number | undefined {
  try {
    return parseCpuSeconds(readFileSync(`/proc/${pid}/stat`, 'utf8'), ticksPerSecond())
  } catch {
    return undefined // exited
  }
}

export function rssMb(pid: number): number | undefined {
  try {
    const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m ? Math.round((Number(m[1]) / 1024) * 10) / 10 : undefined
  } catch {
    return undefined
  }
}

/** `apiserver_request_total` summed by verb (every client, every resource) from the apiserver's /metrics text. */
export function requestsByVerb(metrics: string): Record<string, number> {
  const out: Record<string, number> = {}
  for (const line of metrics.split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue
    const verb = /verb="([A-Z]+)"/.exec(line)?.[1] ?? 'OTHER'
    const value = Number(line.slice(line.lastIndexOf(' ') + 1))
    if (Number.isFinite(value)) out[verb] = (out[verb] ?? 0) + value
  }
  return out
}

/** b − a per verb (verbs with no change left out). */
export function verbDelta(a: Record<string, number>, b: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {}
  for (const [verb, v] of Object.entries(b)) {
    const d = v - (a[verb] ?? 0)
    if (d > 0) out[verb] = d
  }
  return out
}

export interface Sweep {
  /** When it was logged (ms since the epoch). */
  at: number
  ms: number
  backfills: number
  picked: number
}

/** lifecycle's `resync sweep` lines (pino JSON; other lines and garbage are skipped). */
export function parseSweeps(log: string): Sweep[] {
  const out: Sweep[] = []
  for (const line of log.split('\n')) {
    if (!line.includes('"resync sweep"')) continue
    try {
      const j = JSON.parse(line) as { time?: number; ms?: number; backfills?: number; picked?: number; msg?: string }
      if (j.msg === 'resync sweep' && typeof j.ms === 'number' && typeof j.time === 'number')
        out.push({ at: j.time, ms: j.ms, backfills: j.backfills ?? 0, picked: j.picked ?? 0 })
    } catch {
      // a torn line: not a sweep
    }
  }
  return out
}

/** CPU seconds and command name of every process on the machine, by pid (one read of /proc). */
export function processCpu(): Map<number, { comm: string; cpu: number }> {
  const out = new Map<number, { comm: string; cpu: number }>()
  let pids: string[]
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d))
  } catch {
    return out
  }
  const ticks = ticksPerSecond()
  for (const d of pids) {
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8')
      const cpu = parseCpuSeconds(stat, ticks)
      if (cpu !== undefined) out.set(Number(d), { comm: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), cpu })
    } catch {
      // exited between the listing and the read
    }
  }
  return out
}

/**
 * CPU seconds used between two `processCpu` snapshots, summed by label (`labelOf(pid, comm)`, e.g. our functions by
 * pid and everything else by command name). A process started in between counts from 0; one that exited in between
 * is lost (its last figure is not known). Labels under 10 ms are left out.
 */
export function cpuDeltaBy(
  before: Map<number, { comm: string; cpu: number }>,
  after: Map<number, { comm: string; cpu: number }>,
  labelOf: (pid: number, comm: string) => string,
): Record<string, number> {
  const sums: Record<string, number> = {}
  for (const [pid, a] of after) {
    const b = before.get(pid)
    const d = a.cpu - (b && b.comm === a.comm ? b.cpu : 0)
    if (d <= 0) continue
    const label = labelOf(pid, a.comm)
    sums[label] = (sums[label] ?? 0) + d
  }
  return Object.fromEntries(
    Object.entries(sums)
      .filter(([, v]) => v >= 0.01)
      .sort((x, y) => y[1] - x[1])
      .map(([k, v]) => [k, Math.round(v * 100) / 100]),
  )
}

/** Where one phase of a benchmark spent the machine: CPU by process, the apiserver's requests by verb, its wall time. */
export interface PhaseSpend {
  wallS: number
  /** CPU seconds by label, largest first (labelOf's). */
  cpu: Record<string, number>
  requests: Record<string, number>
}

/**
 * `begin()` at a phase's start, `end()` at its end → where the machine's CPU went in between (every process, by
 * `labelOf`: our functions by pid, everything else by command name — kube-apiserver, etcd, nats-server, the
 * controller-manager) and the requests the apiserver served (`apiserverRequests`: its own counters, every client).
 */
export function phaseSpend(
  apiserverRequests: () => Record<string, number>,
  labelOf: (pid: number, comm: string) => string = (_pid, comm) => comm,
) {
  let from: { at: number; cpu: ReturnType<typeof processCpu>; requests: Record<string, number> } | undefined
  return {
    begin() {
      from = { at: Date.now(), cpu: processCpu(), requests: apiserverRequests() }
    },
    end(): PhaseSpend | undefined {
      if (!from) return undefined
      const wallS = Math.round((Date.now() - from.at) / 100) / 10
      return {
        wallS,
        cpu: cpuDeltaBy(from.cpu, processCpu(), labelOf),
        requests: verbDelta(from.requests, apiserverRequests()),
      }
    },
  }
}

/** `GET 12, DELETE 3` */
export const formatRequests = (requests: Record<string, number>) =>
  Object.entries(requests)
    .map(([verb, c]) => `${verb} ${c}`)
    .join(', ')

/** `12.3 CPU s (kube-apiserver 4.1, …)` */
export const formatCpu = (cpu: Record<string, number>) =>
  `${Object.values(cpu)
    .reduce((a, b) => a + b, 0)
    .toFixed(1)} CPU s (${Object.entries(cpu)
    .map(([label, v]) => `${label} ${v}`)
    .join(', ')})`

/** The apiserver's own request counters, by verb, read with kubectl (its /metrics; every client). */
export function apiserverRequestsVia(kubectl: string, kubeconfigPath: string) {
  return () =>
    requestsByVerb(
      execFileSync(kubectl, ['--kubeconfig', kubeconfigPath, 'get', '--raw', '/metrics'], {
        encoding: 'utf8',
        maxBuffer: 256 * 1024 * 1024,
        timeout: 60_000,
      }),
    )
}
