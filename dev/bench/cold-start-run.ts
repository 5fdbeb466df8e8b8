// `npm run bench:cold`: dev/bench/cold-start.ts on its own, against the environment of `npm run env:up` (NATS_URL and
// KUBECONFIG from `. .testenv/env.sh`): provisions the topology, then measures each function BENCH_COLD_RUNS times
// (default 3) back to back. Build first (`npm run build`). Prints one line per run and one JSON object at the end.
// BENCH_COLD_FUNCTIONS=admit,cancel: only these; BENCH_COLD_ENTRY=dist/cmd/manager/main.js: tsc's unbundled output.
import { openSync } from 'node:fs'
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import { provision } from '../../cmd/manager/provision.js'
import { repoRoot } from '../../test/env/binaries.js'
import { COLD_START_FUNCTIONS, measureColdStart } from './cold-start.js'

const natsUrl = process.env.NATS_URL
const kubeconfigPath = process.env.KUBECONFIG
if (!natsUrl || !kubeconfigPath) {
  console.error('NATS_URL and KUBECONFIG must be set (`npm run env:up && . .testenv/env.sh`)')
  process.exit(2)
}
const runs = Math.min(20, Math.max(1, Number(process.env.BENCH_COLD_RUNS ?? 3) || 3))
const only = process.env.BENCH_COLD_FUNCTIONS?.split(',') ?? [...COLD_START_FUNCTIONS]
await mkdir(join(repoRoot, 'dev/bench/results'), { recursive: true })
const logFd = openSync(join(repoRoot, 'dev/bench/results/cold-start.log'), 'a')
await provision({ natsUrl })
const nc = await connect({ servers: natsUrl, name: 'bench:cold-start' })
const js = jetstream(nc)
const jsm = await jetstreamManager(nc)
const results: Record<string, number[]> = {}
try {
  for (let i = 0; i < runs; i++) {
    for (const fn of only) {
      const m = await measureColdStart({
        fn,
        repoRoot,
        natsUrl,
        kubeconfigPath,
        namespace: 'cold',
        js,
        jsm,
        logFd,
        entry: process.env.BENCH_COLD_ENTRY,
      })
      const add = (key: string, v: number) => {
        results[key] = [...(results[key] ?? []), v]
      }
      add(`cold_start_ms_${fn}`, m.coldStartMs)
      add(`cold_start_cpu_ms_${fn}`, m.cpuMs)
      add(`rss_mb_${fn}`, m.rssMb)
      console.log(
        `run ${i + 1} ${fn}: cold start ${m.coldStartMs} ms (CPU ${m.cpuMs} ms), RSS at idle ${m.rssMb} MB` +
          (m.backlog ? ` (drained a backlog of ${m.backlog} first)` : ''),
      )
    }
  }
} finally {
  await nc.close()
}
console.log(JSON.stringify({ runs, load_average_1m: (await import('node:os')).loadavg()[0], ...results }))
