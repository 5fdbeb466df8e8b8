// The dead-letter counter the ModelBackfillDeadLettersGrowing alert watches, on a real nats-server: it counts what
// the functions store in FLEXINFER_DEADLETTER (the stream's last sequence), read at scrape time.
import { afterAll, expect, it } from 'vitest'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { BackfillMetrics } from '../../../pkg/transport/metrics.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
let metrics: BackfillMetrics | undefined
afterAll(async () => {
  await metrics?.stop()
})

const deadLetters = async (m: BackfillMetrics) =>
  Number(
    /^flexinfer_model_backfill_dead_letters_total\{stream="FLEXINFER_DEADLETTER"\} (\d+)$/m.exec(
      await m.metrics(),
    )?.[1],
  )

it('flexinfer_model_backfill_dead_letters_total grows with every dead letter stored', async () => {
  const bus = await Bus.open(env.nc)
  metrics = new BackfillMetrics()
  await metrics.start(bus)
  const before = await deadLetters(metrics)
  expect(before).toBeGreaterThanOrEqual(0)
  await bus.deadLetter('cancel', 'test: a forged cancel', '{"not":"an event"}', 'flexinfer.events.backfill.cancel')
  await bus.deadLetter('admit', 'test: malformed', 'garbage', 'flexinfer.events.backfill.admit')
  // Other test files share the server and may dead-letter too: at least our two.
  expect(await deadLetters(metrics)).toBeGreaterThanOrEqual(before + 2)
})
