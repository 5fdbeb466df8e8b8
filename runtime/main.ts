// `npm start` (every function, the local watcher and the metrics endpoint in one process) and the container
// entry point (`FUNCTION=admit`, one function per Deployment).
import { createLogger } from './log.js'
import { startRunner } from './runner.js'

const log = createLogger('model-backfill')
const natsUrl = process.env.NATS_URL
if (!natsUrl) {
  log.error('NATS_URL is not set (with the local environment: `. .testenv/env.sh`)')
  process.exit(2)
}
const only = process.env.FUNCTION ?? process.argv[2]
const runner = await startRunner({
  natsUrl,
  functions: only && only !== 'all' ? only.split(',') : undefined,
  watch: process.env.WATCH ? process.env.WATCH !== 'false' : !only || only === 'all',
  httpPort: Number(process.env.PORT ?? 9464),
  httpHost: process.env.HOST ?? '127.0.0.1',
  logger: log,
})
log.info(`metrics at ${runner.httpUrl}/metrics`)

let stopping = false
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return
    stopping = true
    log.info({ signal }, 'draining in-flight events, then stopping')
    runner
      .stop()
      .then(() => process.exit(0))
      .catch((err) => {
        log.error({ err }, 'shutdown failed')
        process.exit(1)
      })
  })
}
