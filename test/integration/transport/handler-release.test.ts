// A handler that releases its place (HandleContext.release), on the real nats-server: the next events start at once
// while it finishes, and each event is still acknowledged only when its handler ends. cancel releases once its
// DELETEs are answered; held through its bookkeeping, a burst of 2,000 preemptions (more than its 1,024 handlers) had
// the later Jobs' DELETEs wait for the earlier ones' reconciles, up to a minute (bench, burst of 2,000).
import { jetstream } from '@nats-io/jetstream'
import { expect, it } from 'vitest'
import { STREAM_EVENTS } from '../../../events/catalog.js'
import type { InboundEvent } from '../../../events/codec.js'
import type { Deps, EventFunction, HandleContext } from '../../../pkg/transport/function.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { configMapEvent, eventName, useScratchFunctions } from './scratch-functions.js'

const env = useTestEnv()
const scratch = useScratchFunctions(env, 'release')
const event = (name: string) => configMapEvent(name, env.namespace)

/**
 * A function of 2 handlers on a subject of its own: each records its event's urgent part, releases its place when
 * `release` says so, then waits for `gate` (its bookkeeping) before it ends.
 */
async function start(release: boolean, gate: Promise<void>, urgent: string[]) {
  const { name, base, consumer } = scratch.fresh()
  const fn: EventFunction = {
    name,
    subscriptions: [{ stream: STREAM_EVENTS, subjects: [`${base}.>`], deliverNew: true }],
    concurrency: 2,
    maxAckPending: 100,
    async handle(e: InboundEvent, _deps: Deps, ctx?: HandleContext) {
      urgent.push(eventName(e.data))
      if (release) ctx?.release()
      await gate
    },
  }
  await scratch.run(fn)
  return { base, consumer }
}

const N = 12

for (const release of [true, false]) {
  it(release
    ? 'released handlers: every event starts while the first ones still wait, and is acked only when it ends'
    : 'handlers that keep their place: only `concurrency` events start while they wait (the contrast)', {
    timeout: 60_000,
  }, async () => {
    let open!: () => void
    const gate = new Promise<void>((r) => {
      open = r
    })
    const urgent: string[] = []
    const fn = await start(release, gate, urgent)
    const info = await scratch.bus.jsm.consumers.info(STREAM_EVENTS, fn.consumer)
    expect(info.config.max_ack_pending).toBe(100)
    const js = jetstream(env.nc)
    await Promise.all(Array.from({ length: N }, (_, i) => js.publish(`${fn.base}.e`, event(`e-${i}`))))
    // Opened whatever happens, so a failure here does not leave the function's stop waiting on its handlers.
    try {
      await startedAndHeld(fn.consumer)
    } finally {
      open()
    }
    await waitFor(
      'every event acknowledged',
      async () => {
        const i = await scratch.bus.jsm.consumers.info(STREAM_EVENTS, fn.consumer)
        return i.num_ack_pending === 0 && i.num_pending === 0 ? true : undefined
      },
      { timeoutMs: 20_000 },
    )
    expect([...urgent].sort()).toEqual(Array.from({ length: N }, (_, i) => `e-${i}`).sort())

    async function startedAndHeld(consumer: string) {
      if (release) {
        await waitFor('every event started while the gate is shut', () => (urgent.length === N ? true : undefined), {
          timeoutMs: 20_000,
        })
        // None acknowledged: each handler still waits for its bookkeeping.
        expect((await scratch.bus.jsm.consumers.info(STREAM_EVENTS, consumer)).num_ack_pending).toBe(N)
      } else {
        // All N delivered (max_ack_pending 100), but only the 2 handlers' events start.
        await waitFor(
          'every event delivered',
          async () =>
            (await scratch.bus.jsm.consumers.info(STREAM_EVENTS, consumer)).num_ack_pending === N ? true : undefined,
          { timeoutMs: 20_000 },
        )
        expect(urgent.length).toBe(2)
      }
    }
  })
}
