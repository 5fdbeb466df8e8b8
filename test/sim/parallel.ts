// The seed search of test/unit/support/dst.ts spread over worker threads: each worker runs whole schedules (a
// simulation is single-threaded and shares nothing), asking for the next few seeds when it is done with its own.
// Seeds are handed out in order, so once one fails no seed handed out later can be a lower failure: the search stops
// handing them out, lets the workers finish what they hold, and reports the lowest failing seed — replayed traced in
// this thread, which must fail the same way (as searchSeeds does). What a failing seed prints is therefore the same
// whatever the number of workers.
import { availableParallelism } from 'node:os'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import { simulate } from '../unit/support/dst.js'
import { addStats, emptyStats, type SimOptions, type SimResult, type SimStats } from '../unit/support/dst-options.js'

type Options = Omit<SimOptions, 'seed' | 'trace'>

/** One schedule's outcome, as a worker reports it (its schedule is not recorded: the replay records it). */
interface Ran {
  seed: number
  ok: boolean
  violation?: string
  steps: number
  stats: SimStats
}

type ToWorker = { seeds: [number, number] } | { stop: true }
type FromWorker = { ran: Ran } | { idle: true }

/** Seeds a worker takes at a time: few, so the workers end together and a failure stops the search soon. */
const CHUNK = 2

export const defaultJobs = () => availableParallelism()

export async function searchSeedsParallel(
  first: number,
  count: number,
  jobs: number,
  options: Options & { maxMs?: number } = {},
): Promise<{ failed: SimResult | undefined; runs: number; ms: number; steps: number; stats: SimStats }> {
  const started = performance.now()
  const stats = emptyStats()
  const end = first + count
  let next = first
  let runs = 0
  let steps = 0
  let lowest: Ran | undefined
  const { maxMs, ...sim } = options
  const handOut = (): ToWorker => {
    const late = maxMs !== undefined && performance.now() - started > maxMs
    if (lowest || late || next >= end) return { stop: true }
    const from = next
    next = Math.min(end, next + CHUNK)
    return { seeds: [from, next] }
  }
  await Promise.all(
    Array.from({ length: Math.max(1, Math.min(jobs, count)) }, () => {
      const worker = new Worker(new URL('./worker.mjs', import.meta.url), { workerData: sim })
      return new Promise<void>((resolve, reject) => {
        worker.on('message', (m: FromWorker) => {
          if ('ran' in m) {
            runs++
            steps += m.ran.steps
            addStats(stats, m.ran.stats)
            if (!m.ran.ok && (!lowest || m.ran.seed < lowest.seed)) lowest = m.ran
            return
          }
          const order = handOut()
          worker.postMessage(order)
          if ('stop' in order) void worker.terminate().then(() => resolve())
        })
        worker.on('error', reject)
      })
    }),
  )
  if (!lowest) return { failed: undefined, runs, ms: performance.now() - started, steps, stats }
  const ms = performance.now() - started
  const traced = await simulate({ ...sim, seed: lowest.seed, trace: true })
  if (traced.ok || traced.violation !== lowest.violation) {
    throw new Error(
      `seed ${lowest.seed} did not replay: ${lowest.violation} in a worker, ${traced.violation ?? 'ok'} traced`,
    )
  }
  return { failed: traced, runs, ms, steps, stats }
}

// A worker: runs the seeds it is handed, one result each, then asks for more.
if (!isMainThread && parentPort) {
  const port = parentPort
  const sim = workerData as Options
  port.on('message', async (m: ToWorker) => {
    if ('stop' in m) return
    for (let seed = m.seeds[0]; seed < m.seeds[1]; seed++) {
      const r = await simulate({ ...sim, seed, trace: false })
      port.postMessage({
        ran: { seed, ok: r.ok, violation: r.violation, steps: r.steps, stats: r.stats },
      } satisfies FromWorker)
    }
    port.postMessage({ idle: true } satisfies FromWorker)
  })
  port.postMessage({ idle: true } satisfies FromWorker)
}
