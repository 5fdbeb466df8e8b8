// npm run sim -- --seeds N [--from S] [--steps K] [--seed S --print]: the deterministic simulation of admission
// (test/unit/support/dst.ts) over many seeds; a failing seed is printed with its schedule and replays exactly.
import { parseArgs } from 'node:util'
import { searchSeeds, simulate } from '../unit/support/dst.js'

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '1000' },
    from: { type: 'string', default: '1' },
    steps: { type: 'string', default: '400' },
    seed: { type: 'string' },
    print: { type: 'boolean', default: false },
  },
})
const steps = Number(values.steps)
if (values.seed !== undefined) {
  const r = await simulate({ seed: Number(values.seed), steps })
  if (values.print || !r.ok) process.stdout.write(`${r.schedule.join('\n')}\n`)
  process.stdout.write(
    `seed ${r.seed}: ${r.ok ? 'ok' : `VIOLATION ${r.violation}`} (${r.jobs} Jobs, ${r.requests} requests)\n`,
  )
  process.exit(r.ok ? 0 : 1)
}
const from = Number(values.from)
const count = Number(values.seeds)
const r = await searchSeeds(from, count, { steps })
const rate = Math.round((r.runs / r.ms) * 1000)
if (r.failed) {
  const f = r.failed
  process.stdout.write(`${f.schedule.slice(-60).join('\n')}\n`)
  process.stdout.write(
    `seed ${f.seed} FAILED after ${r.runs} schedules, ${Math.round(r.ms)} ms: ${f.violation}\n` +
      `replay: npm run sim -- --seed ${f.seed} --steps ${steps} --print\n`,
  )
  process.exit(1)
}
process.stdout.write(
  `${r.runs} schedules ok (seeds ${from}..${from + count - 1}) in ${Math.round(r.ms)} ms, ${rate}/s\n`,
)
