// Whether a backfill's recorded timer is still on its way to admit, so that nobody arms it a second time: arming
// a timer that admit already holds admits the same window twice.
//
// A timer is stored as a schedule until it fires; the server then removes the schedule and stores the fired event on
// `flexinfer.events.timer.<ns>.<backfill>` (one per backfill, kept: FLEXINFER_TIMERS is a limits stream) for admit's
// consumer. It fires early (pkg/core/timer-tick.ts), so for that moment a state's future timerAt has no schedule:
// re-arming then fired the same window again, a second admission of it. A fired event whose `due` is the state's
// timerAt means "fired, its handling not committed yet" (handling it clears or moves timerAt, pkg/core/decide.ts): held.
// Whether admit dead-lettered it instead is not visible here; that only matters once it is past due, where the
// sweep's TimerLost (pkg/core/resync.ts) re-decides it anyway.

import { STREAM_TIMERS, subjectFor } from '../../events/catalog.js'
import { decode } from '../../events/codec.js'
import type { Bus } from '../jetstream/bus.js'
import { lastBySubject } from '../jetstream/streams.js'

/** The timer event fired for `timerAt` is stored, its handling not yet committed. */
export async function firedNotHandled(bus: Bus, namespace: string, backfill: string, timerAt: string) {
  const subject = subjectFor('ai.flexinfer.timer.fired', { namespace, backfill, due: timerAt })
  const stored = await lastBySubject(bus.jsm, STREAM_TIMERS, subject)
  if (!stored) return false
  const r = decode(stored.data)
  return r.ok && r.event.type === 'ai.flexinfer.timer.fired' && r.event.data.due === timerAt
}

/** The timer recorded at `timerAt` will reach admit: its schedule is stored, or it fired and awaits handling. */
export async function timerHeld(bus: Bus, namespace: string, backfill: string, timerAt: string) {
  return (await bus.timerArmed(namespace, backfill)) || firedNotHandled(bus, namespace, backfill, timerAt)
}
