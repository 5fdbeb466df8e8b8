// A consumer's waiting pull is what says "a demand instance is consuming" (pkg/admission/fence.ts), but a live consumer
// is between two pulls for a moment whenever one ends: the server answers the expired pull (408), and the client
// sends its next one when its event loop gets to it — a round trip, plus however late that loop runs under load. A
// check that lands in that moment must not read a live demand as gone: the fence would hold admission back, and the
// fail-safe, engaged after an outage, would go on deleting the Jobs the fence had just admitted (seen in CI under load:
// attempt 2's Jobs deleted for "no demand instance is pulling foreground requests" after the path was back).
//
// On the real server, demand's and cancel's consumers are pulled by stand-ins that renew each expired pull 150 ms
// late (a loaded event loop), pulls expiring every second, foreground requests arriving on both subjects meanwhile; the
// fence and the fail-safe's probe are sampled back to back for several of those gaps and must say pulling every time.
// The stand-ins then stop pulling: both must say so.
import { jetstreamManager } from '@nats-io/jetstream'
import type { NatsConnection, Subscription } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { STREAM_EVENTS, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST } from '../../../events/catalog.js'
import { probeVisibility } from '../../../functions/cancel/fail-safe.js'
import { checkFence, consumers } from '../../../pkg/admission/fence.js'
import { ensureStreams } from '../../../pkg/jetstream/streams.js'
import type { Deps } from '../../../pkg/transport/function.js'
import { useTestEnv } from '../../env/fixture.js'
import { fakeDeps } from '../../unit/support/deps.js'
import { BackfillWorld } from '../support/backfill-world.js'
import { testInstance } from '../support/runner.js'

const env = useTestEnv()
const instance = testInstance()
const EXPIRES_MS = 1_000
const RENEWAL_LATE_MS = 150

/** Pulls a consumer as nats.js does, but renews each expired pull RENEWAL_LATE_MS late. */
class LatePuller {
  private sub: Subscription | undefined
  private timer: NodeJS.Timeout | undefined
  private stopped = false
  renewals = 0

  constructor(
    private readonly nc: NatsConnection,
    private readonly stream: string,
    private readonly name: string,
  ) {}

  start() {
    const inbox = `_INBOX.late-puller.${this.name}`
    this.sub = this.nc.subscribe(inbox, {
      callback: (_err, msg) => {
        // Other test files publish on these streams: their messages are acknowledged (this consumer's only), and a
        // pull asks for more than they can fill, so it ends by expiring, as demand's idle pulls do.
        if (!msg.headers?.code && msg.reply) msg.respond('+ACK')
        if (msg.headers?.code !== 408 || this.stopped) return
        this.timer = setTimeout(() => {
          this.renewals++
          this.pull(inbox)
        }, RENEWAL_LATE_MS)
      },
    })
    this.pull(inbox)
  }

  private pull(inbox: string) {
    if (this.stopped) return
    const request = { batch: 1_000_000, expires: EXPIRES_MS * 1_000_000 }
    this.nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${this.stream}.${this.name}`, JSON.stringify(request), {
      reply: inbox,
    })
  }

  stop() {
    this.stopped = true
    clearTimeout(this.timer)
    this.sub?.unsubscribe()
  }
}

let pullers: LatePuller[] = []
let deps: Deps

beforeAll(async () => {
  const jsm = await jetstreamManager(env.nc)
  await ensureStreams(jsm)
  deps = fakeDeps({ instance, bus: { jsm }, settings: {} })
  const names = consumers(deps)
  const of = [
    [STREAM_FOREGROUND, names.demandForeground],
    [STREAM_FOREGROUND_LAST, names.demandLast],
    [STREAM_EVENTS, names.cancel],
  ] as const
  for (const [stream, name] of of) {
    await jsm.consumers.add(stream, { durable_name: name, ack_policy: 'explicit', deliver_policy: 'new' })
    pullers.push(new LatePuller(env.nc, stream, name))
  }
  for (const p of pullers) p.start()
})

afterAll(async () => {
  for (const p of pullers) p.stop()
  pullers = []
  const jsm = await jetstreamManager(env.nc)
  const names = consumers(deps)
  await jsm.consumers.delete(STREAM_FOREGROUND, names.demandForeground).catch(() => {})
  await jsm.consumers.delete(STREAM_FOREGROUND_LAST, names.demandLast).catch(() => {})
  await jsm.consumers.delete(STREAM_EVENTS, names.cancel).catch(() => {})
})

describe('a consumer renewing its pull', () => {
  it('is pulling to the fence and to the fail-safe in the gap between two pulls; stopped, it is not', {
    timeout: 60_000,
  }, async () => {
    // Foreground requests on both subjects meanwhile (for a namespace no demand serves), as demand's pulls get them:
    // more than one pull's worth would end a pull by count, not by expiry (seen in CI, other files publishing).
    const world = new BackfillWorld(env.kc, env.namespace, env.nc)
    let traffic = true
    const publishing = (async () => {
      for (let i = 0; traffic && i < 200; i++) {
        await world.foregroundOnDocumentedSubject('pull-renewal')
        await world.foreground('pull-renewal')
        await new Promise((r) => setTimeout(r, 40))
      }
    })()
    const until = Date.now() + 4 * EXPIRES_MS + 500
    const fences: string[] = []
    const probes: string[] = []
    let samples = 0
    while (Date.now() < until) {
      const [fence, probe] = await Promise.all([checkFence(deps), probeVisibility(deps)])
      samples++
      if (!fence.ready) fences.push(fence.why ?? 'not ready')
      if (!probe.visible) probes.push(probe.why)
      await new Promise((r) => setTimeout(r, 10))
    }
    traffic = false
    await publishing
    world.close()
    process.stderr.write(
      `[pull renewal] ${samples} samples: ${fences.length} fences and ${probes.length} probes said not pulling\n`,
    )
    // The gaps were there to fall into: each puller renewed at least three times, 150 ms late each.
    for (const p of pullers) expect(p.renewals).toBeGreaterThanOrEqual(3)
    expect(samples).toBeGreaterThan(20)
    expect({ fences, probes }).toEqual({ fences: [], probes: [] })

    for (const p of pullers) p.stop()
    // Once the last pulls expire (and the renewal allowance has passed), both see demand gone.
    await new Promise((r) => setTimeout(r, EXPIRES_MS + 500))
    const [fence, probe] = await Promise.all([checkFence(deps), probeVisibility(deps)])
    expect(fence).toMatchObject({ ready: false, why: 'no demand instance is pulling foreground requests' })
    expect(probe).toEqual({ visible: false, why: 'no demand instance is pulling foreground requests' })
  })
})
