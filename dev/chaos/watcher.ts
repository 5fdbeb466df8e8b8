// The local Kubernetes watcher (the ApiServerSource stand-in) alone in a process, as the chaos run deploys it:
// cmd/manager/main.ts only runs it together with functions.

import { startRunner } from '../../cmd/manager/runner.js'
import { createLogger } from '../../pkg/observability/log.js'

const log = createLogger('model-backfill')
const natsUrl = process.env.NATS_URL
if (!natsUrl) throw new Error('NATS_URL is not set')
const runner = await startRunner({
  natsUrl,
  functions: [],
  watch: true,
  provision: process.env.NATS_PROVISION !== 'false',
  logger: log,
})
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    runner.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    )
  })
}
