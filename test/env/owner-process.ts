// A separate Node process that owns an environment, for the no-orphans test: it starts one, prints its
// EnvironmentInfo as a single JSON line on stdout, and then stays alive until it is killed. When its stdin closes
// (the test, or the vitest worker running it, is gone) it exits at once, and its reaper cleans up: this process
// cannot itself outlive the test that started it.
import { startEnvironment } from './environment.js'

process.stdin.on('end', () => process.exit(0))
process.stdin.resume()
const env = await startEnvironment({
  log: (line) => process.stderr.write(`[owner ${process.pid}] ${line}\n`),
  // --node: with a real node (test/integration/node: nothing of it may be left on the machine either).
  node: process.argv.includes('--node'),
})
process.stdout.write(`${JSON.stringify({ ...env, ownerPid: process.pid })}\n`)
