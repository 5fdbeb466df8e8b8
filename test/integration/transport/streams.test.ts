// The foreground firehose lives apart from the control events: a burst of foreground requests can never push a
// job.completed or backfill.admit out of a drop-oldest stream, and each stream keeps what its readers need.
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { expect, it } from 'vitest'
import {
  catalog,
  foregroundSubject,
  STREAM_EVENTS,
  STREAM_FOREGROUND,
  STREAM_FOREGROUND_LAST,
} from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()

it('foreground requests land on their own streams, never on FLEXINFER_EVENTS; the per-model one keeps the newest', async () => {
  await Bus.open(env.nc) // the topology as every process ensures it
  const js = jetstream(env.nc)
  const jsm = await jetstreamManager(env.nc)
  const model = 'firehose'
  const documented = catalog['ai.flexinfer.foreground.request'].subject
  const data = { namespace: env.namespace, model }
  const acks = []
  for (let i = 0; i < 20; i++) {
    acks.push(await js.publish(documented, encode('ai.flexinfer.foreground.request', data)))
    acks.push(
      await js.publish(foregroundSubject(env.namespace, model), encode('ai.flexinfer.foreground.request', data)),
    )
  }
  expect(new Set(acks.map((a) => a.stream))).toEqual(new Set([STREAM_FOREGROUND, STREAM_FOREGROUND_LAST]))
  const events = await jsm.streams.info(STREAM_EVENTS, { subjects_filter: 'flexinfer.events.foreground.>' })
  expect(events.state.subjects ?? {}).toEqual({})
  const last = await jsm.streams.info(STREAM_FOREGROUND_LAST, {
    subjects_filter: foregroundSubject(env.namespace, model),
  })
  expect(last.state.subjects).toEqual({ [foregroundSubject(env.namespace, model)]: 1 })
  // Control events outlive a firehose's retention; the firehose is bounded by age and size.
  const [control, firehose] = await Promise.all([jsm.streams.info(STREAM_EVENTS), jsm.streams.info(STREAM_FOREGROUND)])
  expect(control.config.max_age).toBeGreaterThan(firehose.config.max_age)
  expect(firehose.config.max_bytes).toBeGreaterThan(0)
})
