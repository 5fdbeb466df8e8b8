// `npm run replay -- --trace FILE.csv [--speed 60] [--idle-for 10m] [--models 3] [--seed 1] [--out DIR] [--keep]`
//   [--item 1m] [--items 60] [--attempt-start 0s]  the workload as items, for the goodput section (trace time)
// `npm run replay -- --synthetic [--duration 6h] [--day 24h] [--models 3] [--seed 1] …`  generate a trace, replay it
// `npm run replay -- --generate FILE.csv [--duration 24h] [--day 24h] [--models 3] [--seed 1]`  only write a trace
//
// Uses the local environment when it is up (`npm run env:up`, .testenv/), else starts a temporary one for the run.
// Writes report.json, report.md and timeline.png to --out (default test-results/replay/<time>/). Exit code 1 when a
// Job was admitted inside an idle window or a request left a Job running.
import { readFile, writeFile } from 'node:fs/promises'
import { join, relative } from 'node:path'
import { parseDuration } from '../../pkg/core/duration.js'
import { repoRoot } from '../../test/env/binaries.js'
import { belongsTo, readEnvironmentInfo, startEnvironment, stopEnvironment } from '../../test/env/environment.js'
import { checkWorkload } from './goodput.js'
import { runReplay } from './replay.js'
import { keptRatio, type ReplayReport, runsRatio, traceDuration } from './report.js'
import { GENERATE_DEFAULTS, generateTrace, parseTrace } from './trace.js'

const USAGE = `usage: npm run replay -- (--trace FILE.csv | --synthetic | --generate FILE.csv) [options]
  --speed N        time compression (default 60: an hour of trace in a minute)
  --idle-for DUR   idleFor in trace time (default 10m)
  --models N       models to assign when the trace has no model column (default 3)
  --seed N         seed of the model assignment and the generator (default 1)
  --duration DUR   generator: trace length (default 24h)
  --day DUR        generator: length of the diurnal cycle (default 24h; quiet periods and bursts scale with it)
  --gap DUR        generator: mean gap between requests inside a burst (default 10s)
  --item DUR       goodput: one item's duration in trace time (default 1m)
  --items N        goodput: items per run (default 60)
  --attempt-start DUR  goodput: trace time every attempt spends before its first item (default 0s)
  --max-wall DUR   refuse a replay longer than this in wall time (default 2h)
  --out DIR        output directory (default test-results/replay/<time>)
  --keep           keep the replay's namespace afterwards`

function flags(argv: string[]) {
  const out: Record<string, string | true> = {}
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string
    if (!a.startsWith('--')) throw new Error(`unexpected argument "${a}"\n${USAGE}`)
    const [k, v] = a.slice(2).split('=', 2) as [string, string | undefined]
    if (v !== undefined) out[k] = v
    else if (['keep', 'synthetic', 'help'].includes(k)) out[k] = true
    else {
      const next = argv[++i]
      if (next === undefined) throw new Error(`--${k} needs a value\n${USAGE}`)
      out[k] = next
    }
  }
  return out
}

const num = (v: string | true | undefined, fallback: number, what: string) => {
  if (v === undefined) return fallback
  const n = Number(v)
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${what} must be a positive number`)
  return n
}
const dur = (v: string | true | undefined, fallback: string) => parseDuration(typeof v === 'string' ? v : fallback)

/** The goodput section in a few lines: both semantics side by side over the Jobs that ran. */
function goodputLines(r: ReplayReport): string[] {
  const g = r.goodput
  if (!g) return []
  const share = (ms: number) => {
    const k = keptRatio(ms, g.harvestableMs)
    return k === null ? '-' : k.toFixed(3)
  }
  const col = (v: string, width = 12) => v.padStart(width)
  const ratio = runsRatio(g.jobs)
  const { resumable: a, restart: b } = g.jobs
  return [
    `goodput (trace time; runs of ${g.workload.itemsPerRun} × ${traceDuration(g.workload.itemMs)} = ${traceDuration(g.runMs)}, ` +
      `median harvestable window ${g.medianIdleWindowMs === null ? '-' : traceDuration(g.medianIdleWindowMs)}; ` +
      `${g.jobs.windows} Jobs, ${g.jobs.preemptions} preempted; of ${traceDuration(g.harvestableMs)} harvestable):`,
    `  ${''.padEnd(30)}${col('resumable')}${col('restart')}`,
    `  ${'whole runs completed'.padEnd(30)}${col(String(a.runs))}${col(String(b.runs))}`,
    `  ${'item-time kept'.padEnd(30)}${col(traceDuration(a.keptMs))}${col(traceDuration(b.keptMs))}`,
    `  ${'item-time thrown away'.padEnd(30)}${col(traceDuration(a.thrownMs))}${col(traceDuration(b.thrownMs))}`,
    `  ${'kept / harvestable'.padEnd(30)}${col(share(a.keptMs))}${col(share(b.keptMs))}`,
    `  resumable completes ${ratio === null ? `${a.runs} runs against none` : `${ratio.toFixed(2)}× the runs`}`,
  ]
}

async function main() {
  const f = flags(process.argv.slice(2))
  if (f.help || (!f.trace && !f.synthetic && !f.generate)) {
    console.log(USAGE)
    return
  }
  const seed = num(f.seed, 1, 'seed')
  const models = num(f.models, 3, 'models')
  const generated = () =>
    generateTrace({
      seed,
      models,
      durationMs: dur(f.duration, '24h'),
      dayMs: dur(f.day, '24h'),
      requestGapMeanMs: typeof f.gap === 'string' ? parseDuration(f.gap) : GENERATE_DEFAULTS.requestGapMeanMs,
    })
  if (typeof f.generate === 'string') {
    await writeFile(f.generate, generated())
    console.log(`wrote ${f.generate}`)
    return
  }
  const source = typeof f.trace === 'string' ? f.trace : `synthetic trace (seed ${seed})`
  const trace = parseTrace(typeof f.trace === 'string' ? await readFile(f.trace, 'utf8') : generated(), {
    models,
    seed,
  })
  if (!trace.requests.length) throw new Error(`${source}: no readable requests`)
  const speed = num(f.speed, 60, 'speed')
  const wallMs = trace.durationMs / speed
  const maxWall = dur(f['max-wall'], '2h')
  if (wallMs > maxWall) {
    throw new Error(
      `the replay would take ${(wallMs / 60_000).toFixed(0)} min (over --max-wall); raise --speed or --max-wall`,
    )
  }
  // Checked before an environment is started: a bad setting fails at once.
  const workload = checkWorkload({
    itemMs: dur(f.item, '1m'),
    itemsPerRun: num(f.items, 60, 'items'),
    attemptStartMs: dur(f['attempt-start'], '0s'),
  })
  const outDir =
    typeof f.out === 'string'
      ? f.out
      : join(repoRoot, 'test-results', 'replay', new Date().toISOString().replace(/[:.]/g, '-'))

  const dir = join(repoRoot, '.testenv')
  const existing = await readEnvironmentInfo(dir)
  const up = existing?.processes.every((p) => belongsTo(p.pid, existing.dir)) ? existing : undefined
  let started: Awaited<ReturnType<typeof startEnvironment>> | undefined
  if (up) console.log(`Using the local environment in ${relative(process.cwd(), dir) || dir}.`)
  else {
    console.log('No local environment is up (npm run env:up); starting a temporary one for this replay…')
    started = await startEnvironment({ log: (line) => console.log(`  ${line}`) })
  }
  const env = (up ?? started) as NonNullable<typeof up>
  try {
    const result = await runReplay({
      trace,
      speed,
      idleForTraceMs: dur(f['idle-for'], '10m'),
      kubeconfigPath: env.kubeconfigPath,
      natsUrl: env.natsUrl,
      outDir,
      keep: f.keep === true,
      source,
      workload,
    })
    const r = result.report
    const pct = r.harvest.fraction === null ? '-' : `${(r.harvest.fraction * 100).toFixed(1)}%`
    console.log(
      [
        '',
        `Jobs admitted inside an idle window: ${r.admissionsInsideWindow} (must be 0)`,
        `exposure (request → pods deleted): p50 ${r.exposure.p50Ms ?? '-'} ms, p99 ${r.exposure.p99Ms ?? '-'} ms, max ${r.exposure.maxMs ?? '-'} ms over ${r.exposure.count} preemptions` +
          ` (request → Job deleted: p50 ${r.jobDeleted.p50Ms ?? '-'} ms, max ${r.jobDeleted.maxMs ?? '-'} ms)`,
        `harvested ${(r.harvest.harvestedMs / 1000).toFixed(1)} s of ${(r.harvest.theoreticalMs / 1000).toFixed(1)} s idle beyond idleFor: ${pct}`,
        ...goodputLines(r),
        `report: ${relative(process.cwd(), result.files.markdown)} (+ report.json, timeline.png)`,
      ].join('\n'),
    )
    if (r.admissionsInsideWindow > 0 || r.unresolved.length > 0) process.exitCode = 1
  } finally {
    if (started) await stopEnvironment(started)
  }
}

main()
  .catch((err) => {
    console.error(`replay: ${err instanceof Error ? err.message : err}`)
    process.exitCode = 1
  })
  // Everything is stopped by now; a handle a library left open must not keep the command from returning.
  .finally(() => setTimeout(() => process.exit(), 5_000).unref())
