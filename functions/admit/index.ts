// admit: when a backfill's timer fires (idle window end, cooldown over, re-check) or another function asks,
// run the gates and create the attempt's Job. The only function that creates Jobs.
import { STREAM_EVENTS, STREAM_TIMERS } from '../../events/catalog.js'
import type { EventFunction } from '../../runtime/function.js'
import { SCHEDULER_TICK_MS } from '../../runtime/nats.js'
import { reconcile } from '../../runtime/reconcile.js'
import { StepTimings } from '../../runtime/step-timings.js'

export const admit: EventFunction = {
  name: 'admit',
  // Admissions are I/O-bound (API reads, KV, Job create): many at once keeps a burst of due timers on time.
  concurrency: 32,
  subscriptions: [
    { stream: STREAM_TIMERS, subjects: ['flexinfer.events.timer.>'] },
    { stream: STREAM_EVENTS, subjects: ['flexinfer.events.backfill.admit'] },
  ],
  async handle(event, deps) {
    if (event.type === 'ai.flexinfer.timer.fired') {
      const { namespace, backfill, due } = event.data
      const timings = new StepTimings()
      // Timers fire up to one scheduler tick early (see Bus.armTimer): wait out that remainder, never more.
      const early = Date.parse(due) - deps.now()
      if (early > 0 && early <= 2 * SCHEDULER_TICK_MS) await new Promise((r) => setTimeout(r, early))
      timings.mark('wait')
      const d = await reconcile(deps, 'admit', namespace, backfill, { type: 'timer' }, { timings })
      const startedAt = d?.actions.some((a) => a.type === 'createJob') ? d.state?.startedAt : undefined
      if (startedAt) {
        // The lateness profile (bench/README.md): lateMs is what the benchmark measures, startedAt − due.
        deps.log.info(
          { namespace, backfill, due, earlyMs: early, lateMs: Date.parse(startedAt) - Date.parse(due), ms: timings.ms },
          'admission timings',
        )
      }
    } else if (event.type === 'ai.flexinfer.backfill.admit') {
      await reconcile(deps, 'admit', event.data.namespace, event.data.backfill, { type: 'admit' })
    }
  },
}
