// Prints deploy/nats/gates.conf for the namespaces given: `npm run nats:gates -- team-a team-b > deploy/nats/gates.conf`.
import { gatesConf } from '../../pkg/jetstream/gates-conf.js'

try {
  process.stdout.write(gatesConf(process.argv.slice(2)))
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`)
  process.exit(2)
}
