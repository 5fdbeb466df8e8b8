// demand's cancels against the window an attempt was admitted on, on a real nats-server: the request that opened
// the window is not one that breaks it, and a cancel that did not end the attempt is sent again while requests keep
// breaking its window.
//
// Found by the failover run: a request stored at …56.446602 (JetStream's store times have microseconds) opened the
// window of an admission whose claim says idleSince …56.446Z (milliseconds). demand compared the two, sent a cancel,
// and cancel rightly found the claim's window not broken by it (the same millisecond) and dropped it. demand then
// remembered that cancel as sent for 60 s, so the requests that did break the window, from 3 s later on, sent none:
// the Job ran 21.5 s under foreground traffic until the fail-safe deleted it.
import { jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { afterAll, describe, expect, it } from 'vitest'
import { CANCEL_RESEND_MS, Demand } from '../../../functions/demand/index.js'
import type { Claim } from '../../../pkg/core/state.js'
import { toKv } from '../../../pkg/core/state.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { useTestEnv } from '../../env/fixture.js'
import { fakeDeps } from '../../unit/support/deps.js'
import { storedRequest } from '../support/demand.js'

const env = useTestEnv()
const log = createLogger('demand-cancel-window')
const bucket = `claims-window-${Date.now()}`
afterAll(async () => {
  await (await jetstreamManager(env.nc)).streams.delete(`KV_${bucket}`).catch(() => {})
})

const T = Date.parse('2026-12-03T16:16:56.446Z')

async function world() {
  const shared = await Bus.open(env.nc)
  const claims = await new Kvm(env.nc).create(bucket, { history: 1 })
  const bus = new Bus(env.nc, shared.jsm, { ...shared.kv, claims })
  // What demand published, with JetStream's answer (a duplicate msgID is acknowledged but not stored again).
  const cancels: { job: string; at: string; msgID?: string; stored: boolean }[] = []
  const publish = bus.publish.bind(bus)
  bus.publish = (async (type, data, options) => {
    const ack = await publish(type, data, options)
    if (type === 'ai.flexinfer.backfill.cancel') {
      const d = data as { jobName: string; at: string }
      cancels.push({ job: d.jobName, at: d.at, msgID: options?.msgID, stored: !ack.duplicate })
    }
    return ack
  }) as Bus['publish']
  let now = T + 10_000
  const clock = {
    now: () => now,
    advance: (ms: number) => {
      now += ms
    },
  }
  const demand = Demand.overNats(fakeDeps({ bus, now: clock.now, log }))
  const claim = async (model: string, jobName: string, idleSince: number) => {
    const c: Claim = {
      namespace: env.namespace,
      backfill: `bf-${model}`,
      attempt: 1,
      jobName,
      claimedAt: new Date(clock.now()).toISOString(),
      idleSince: new Date(idleSince).toISOString(),
    }
    await claims.put(`model.${env.namespace}.${model}`, toKv(c))
  }
  const request = (model: string, storedAt: number) => demand.handle(storedRequest(env.namespace, model, storedAt))
  return { demand, cancels, clock, claim, request }
}

describe('demand: cancels against the admitted window', () => {
  it('the request that opened the window, stored within its millisecond, sends no cancel', async () => {
    const w = await world()
    await w.claim('m-open', 'bf-m-open-1', T)
    // Stored 0.602 ms into the millisecond the window starts at.
    await w.request('m-open', T + 0.602)
    expect(w.cancels.filter((c) => c.job === 'bf-m-open-1')).toEqual([])
    // A request a millisecond later breaks it.
    await w.request('m-open', T + 1.2)
    expect(w.cancels.filter((c) => c.job === 'bf-m-open-1')).toHaveLength(1)
  })

  it('a cancel that did not end the attempt is sent again, once per resend interval, while its window is broken', async () => {
    const w = await world()
    await w.claim('m-again', 'bf-m-again-1', T)
    await w.request('m-again', T + 1_000)
    const ours = () => w.cancels.filter((c) => c.job === 'bf-m-again-1')
    expect(ours()).toHaveLength(1)
    // The claim still stands (cancel dropped it, or it was lost): requests right after send nothing more …
    w.clock.advance(CANCEL_RESEND_MS / 4)
    await w.request('m-again', T + 2_000)
    expect(ours()).toHaveLength(1)
    // … and one after the resend interval sends it again, stored by JetStream (not dropped as a duplicate).
    w.clock.advance(CANCEL_RESEND_MS)
    await w.request('m-again', T + 3_000)
    expect(ours()).toHaveLength(2)
    expect(ours().every((c) => c.stored)).toBe(true)
    expect(new Set(ours().map((c) => c.msgID)).size).toBe(2)
  })
})
