// `npm run chaos`: the chaos suite (dev/chaos/README.md). Prints progress on stderr; its last line (stdout) is one JSON
// object with the invariant counts, also written to dev/bench/results/chaos.json. Exit code 0 only when every
// invariant count is 0. `npm run chaos -- --short` runs the scaled-down variant that `npm test` runs.
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { repoRoot } from '../../test/env/binaries.js'
import { runChaos } from './chaos.js'
import { full, short, withOverrides } from './config.js'

const config = withOverrides(process.argv.includes('--short') ? short : full)
const result = await runChaos(config, { keepLogs: process.argv.includes('--keep-logs') })
await mkdir(join(repoRoot, 'dev/bench/results'), { recursive: true })
await writeFile(join(repoRoot, 'dev/bench/results/chaos.json'), `${JSON.stringify({ config, ...result }, null, 2)}\n`)
const { evidence: _evidence, ...counts } = result
process.stdout.write(`${JSON.stringify(counts)}\n`)
// Client libraries may keep sockets half-open after close; the run is over.
process.exit(result.ok ? 0 : 1)
