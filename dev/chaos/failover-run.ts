// `npm run failover`: kill -9 the leader of the claims bucket, the backfill-state bucket, the events stream and the
// timers stream in turn on a 3-server JetStream cluster, with traffic running (dev/chaos/failover.ts). Progress on
// stderr; the last line (stdout) is one JSON object, also written to dev/bench/results/failover.json. Exit code 0 only
// when every invariant count is 0. `--short`: the one-leader variant `npm test` runs.
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { repoRoot } from '../../test/env/binaries.js'
import { withOverrides } from './config.js'
import { type FailoverConfig, fullFailover, runFailover, shortFailover } from './failover.js'

const base = process.argv.includes('--short') ? shortFailover : fullFailover
const config: FailoverConfig = { ...base, ...withOverrides(base) }
const result = await runFailover(config, { keepLogs: process.argv.includes('--keep-logs') })
await mkdir(join(repoRoot, 'dev/bench/results'), { recursive: true })
await writeFile(
  join(repoRoot, 'dev/bench/results/failover.json'),
  `${JSON.stringify({ config, ...result }, null, 2)}\n`,
)
const { evidence: _evidence, ...summary } = result
process.stdout.write(`${JSON.stringify(summary)}\n`)
process.exit(result.ok ? 0 : 1)
