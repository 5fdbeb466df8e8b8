// `npm run bench:contenders`: what admit's contender gate costs per admission with N live backfill Jobs in its
// watched copy — the walk of every Job (the list copied, each Job's view looked up, each tested) against the index
// of live Jobs by model, node and label (pkg/kube/active-jobs.ts). No servers: the Jobs are objects as a watch delivers
// them. Prints µs per admission for each and the load average; run it alone.
import { loadavg } from 'node:os'
import { ANNOTATION_MODEL, ANNOTATION_NODE, LABEL_BACKFILL } from '../../pkg/core/names.js'
import { isActiveJob, jobView } from '../../pkg/core/world.js'
import { ActiveJobs } from '../../pkg/kube/active-jobs.js'

const SIZES = (process.env.BENCH_CONTENDERS_SIZES ?? '100,1000,5000,10000').split(',').map(Number)
const ADMISSIONS = Number(process.env.BENCH_CONTENDERS_ADMISSIONS ?? 20_000)

const job = (i: number) => ({
  metadata: {
    namespace: 'fleet',
    name: `w-${i}-1`,
    uid: `uid-${i}`,
    labels: { [LABEL_BACKFILL]: `w-${i}` },
    annotations: { [ANNOTATION_MODEL]: `m-${i}`, [ANNOTATION_NODE]: `node-${i % 500}` },
  },
  status: { active: 1 },
})

/** What observe() keeps of the candidates: the count stands for the contenders and strays it builds. */
function pick(candidates: unknown[], model: string, node: string, label: string) {
  let n = 0
  for (const j of candidates.map(jobView)) {
    if (!isActiveJob(j)) continue
    if (j.backfillLabel === label || j.model === model || j.node === node) n++
  }
  return n
}

function time(label: string, n: number, each: (i: number) => number) {
  let sink = 0
  for (let i = 0; i < Math.min(ADMISSIONS, 2000); i++) sink += each(i) // warm-up
  const t0 = performance.now()
  for (let i = 0; i < ADMISSIONS; i++) sink += each(i)
  const us = ((performance.now() - t0) * 1000) / ADMISSIONS
  process.stdout.write(
    `${label.padEnd(6)} ${String(n).padStart(6)} live Jobs: ${us.toFixed(2).padStart(9)} µs per admission (${sink})\n`,
  )
  return us
}

const out: Record<string, number | string> = { load_average_1m_before: Math.round((loadavg()[0] ?? 0) * 100) / 100 }
for (const n of SIZES) {
  const jobs = Array.from({ length: n }, (_, i) => job(i))
  const index = new ActiveJobs<(typeof jobs)[number]>()
  for (const j of jobs) index.change(j, false)
  // The watched copy's list(): client-node builds an array of its objects, and the cache copies it once more.
  const list = () => [...[...jobs]]
  const q = (i: number) => {
    const k = i % n
    return { model: `m-${k}`, node: `node-${k % 500}`, label: `w-${k}` }
  }
  out[`walk_us_${n}`] = time('walk', n, (i) => {
    const { model, node, label } = q(i)
    return pick(list(), model, node, label)
  })
  out[`index_us_${n}`] = time('index', n, (i) => {
    const { model, node, label } = q(i)
    return pick(index.near('fleet', model, node, label), model, node, label)
  })
}
out.load_average_1m_after = Math.round((loadavg()[0] ?? 0) * 100) / 100
process.stdout.write(`${JSON.stringify(out)}\n`)
