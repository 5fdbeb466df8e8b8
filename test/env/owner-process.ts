// A separate Node process that owns an environment, for the no-orphans test: it starts one, prints its
// EnvironmentInfo as a single JSON line on stdout, and then just stays alive until it is killed or its stdin closes
// (so it cannot itself outlive the test that started it).
import { startEnvironment } from './environment.js'

const env = await startEnvironment({ log: (line) => process.stderr.write(`[owner ${process.pid}] ${line}\n`) })
process.stdout.write(`${JSON.stringify({ ...env, ownerPid: process.pid })}\n`)
process.stdin.resume()
process.stdin.on('end', () => {
  void env.stop().then(() => process.exit(0))
})
