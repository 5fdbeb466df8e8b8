// npm run sim -- --seeds N [--from S] [--steps K] [--max-seconds T] [--jobs J] [--revert a,b] [--seed S --print]: the
// deterministic simulation of admission (test/unit/support/dst.ts) over many seeds, on J worker threads (default: one
// per CPU; --jobs 1 runs them in this thread); the lowest failing seed is printed with its schedule and replays
// exactly. --revert undoes fixes of the simulated drivers (the race-finding check, see
// test/sim/mutants.ts); --hostile draws more duplicates and slow calls; --no-caches decides on fresh reads alone
// (admit and lifecycle without their watched copies); --stats prints how often each fault kind was generated.
import { parseArgs } from 'node:util'
import { searchSeeds, simulate } from '../unit/support/dst.js'
import { DEFAULT_FAULTS, HOSTILE_FAULTS, type Reverts } from '../unit/support/dst-options.js'
import { defaultJobs, searchSeedsParallel } from './parallel.js'

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '1000' },
    from: { type: 'string', default: '1' },
    steps: { type: 'string', default: '400' },
    'max-seconds': { type: 'string' },
    jobs: { type: 'string' },
    revert: { type: 'string', default: '' },
    seed: { type: 'string' },
    print: { type: 'boolean', default: false },
    stats: { type: 'boolean', default: false },
    hostile: { type: 'boolean', default: false },
    'no-caches': { type: 'boolean', default: false },
  },
})
const KNOWN: (keyof Reverts)[] = ['documentedSubjectBlind']
const reverts: Reverts = {}
for (const r of values.revert.split(',').filter(Boolean)) {
  if (!KNOWN.includes(r as keyof Reverts)) {
    process.stderr.write(`--revert ${r}: not one of ${KNOWN.join(', ')}\n`)
    process.exit(2)
  }
  reverts[r as keyof Reverts] = true
}
const steps = Number(values.steps)
const faults = values.hostile ? HOSTILE_FAULTS : DEFAULT_FAULTS
const caches = !values['no-caches']
const flags = `${values.revert ? ` --revert ${values.revert}` : ''}${values.hostile ? ' --hostile' : ''}${caches ? '' : ' --no-caches'}`
if (values.seed !== undefined) {
  const r = await simulate({ seed: Number(values.seed), steps, reverts, faults, caches, trace: true })
  if (values.print || !r.ok) process.stdout.write(`${r.schedule.join('\n')}\n`)
  process.stdout.write(
    `seed ${r.seed}: ${r.ok ? 'ok' : `VIOLATION ${r.violation}`} (${r.jobs} Jobs, ${r.requests} requests)\n`,
  )
  process.exit(r.ok ? 0 : 1)
}
const from = Number(values.from)
const count = Number(values.seeds)
const maxMs = values['max-seconds'] === undefined ? undefined : Number(values['max-seconds']) * 1000
const jobs = values.jobs === undefined ? defaultJobs() : Number(values.jobs)
const cpu0 = process.cpuUsage()
const r =
  jobs > 1
    ? await searchSeedsParallel(from, count, jobs, { steps, reverts, faults, caches, maxMs })
    : await searchSeeds(from, count, { steps, reverts, faults, caches, maxMs })
// The process's CPU time: every worker thread's included.
const cpu = process.cpuUsage(cpu0)
const cpuS = (cpu.user + cpu.system) / 1e6
const rate = Math.round((r.runs / r.ms) * 1000)
const stepRate = Math.round((r.steps / r.ms) * 1000)
if (values.stats) process.stdout.write(`${JSON.stringify(r.stats)}\n`)
if (r.failed) {
  const f = r.failed
  process.stdout.write(`${f.schedule.slice(-60).join('\n')}\n`)
  process.stdout.write(
    `seed ${f.seed} FAILED after ${r.runs} schedules, ${Math.round(r.ms)} ms: ${f.violation}\n` +
      `failed ${f.steps >= steps ? 'in the quiet tail' : `at step ${f.steps} of ${steps}`}\n` +
      `replay: npm run sim -- --seed ${f.seed} --steps ${steps}${flags} --print\n`,
  )
  process.exit(1)
}
process.stdout.write(
  `${r.runs} schedules ok (seeds ${from}..${from + r.runs - 1}, ${steps} steps, ${jobs} job${jobs > 1 ? 's' : ''}) in ` +
    `${Math.round(r.ms)} ms: ${rate} schedules/s, ${stepRate} steps/s (${Math.round(r.runs / cpuS)} schedules ` +
    `per CPU second)\n`,
)
