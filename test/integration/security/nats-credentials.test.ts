// NATS identities and permissions with a real nats-server running deploy/nats/auth.conf (NKey users only):
// - each function connects with its own seed file (a mounted Secret: NATS_NKEY_SEED_FILE); a wrong seed, a password
//   or no credential is refused; a placeholder seed stops the process before it connects;
// - no function user may create or delete a consumer on any stream (durable, ephemeral or ordered, the KV_* streams
//   included, no exception: buckets are followed through their republished subjects), nor purge or delete a stream
//   or bucket (timers are disarmed by a tombstone), nor publish an event type it does not own or on the republished
//   KV subjects; the gateway publishes foreground requests and nothing else. What they do use still works.
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { createUser } from '@nats-io/nkeys'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { provision } from '../../../cmd/manager/provision.js'
import { catalog } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { foregroundSince } from '../../../pkg/admission/nats-ports.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { natsServerOptions } from '../../../pkg/jetstream/connect.js'
import { KvMirror } from '../../../pkg/jetstream/kv-mirror.js'
import { sleep, waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import {
  type AuthNats,
  FUNCTIONS,
  NATS_STREAMS,
  type NatsUser,
  requestOutcome,
  startAuthNats,
} from '../support/deploy.js'

const env = useTestEnv()
let nats: AuthNats
const conns = new Map<NatsUser, NatsConnection>()

const as = async (user: NatsUser) => {
  let nc = conns.get(user)
  if (!nc) {
    nc = await connect({ ...natsServerOptions(nats.url(user)), name: `security-${user}` })
    conns.set(user, nc)
  }
  return nc
}

/** The server's answer to a request on `subject` as `user`. */
const attempt = async (user: NatsUser, subject: string, body = '{}') => requestOutcome(await as(user), subject, body)

beforeAll(async () => {
  nats = await startAuthNats(env.binaries.natsServer as string)
  await provision({ natsUrl: nats.url('provision'), consumers: [...FUNCTIONS] })
})

afterAll(async () => {
  for (const nc of conns.values()) await nc.close().catch(() => {})
  await nats?.stop()
})

describe('NKey credentials from mounted files', () => {
  it('each function binds with its own seed, named by NATS_NKEY_SEED_FILE as deployed', async () => {
    const url = `nats://demand@${nats.hostPort}`
    const opts = natsServerOptions(url, { NATS_NKEY_SEED_FILE: nats.seedFile('demand') })
    expect(opts.inboxPrefix).toBe('_INBOX_demand')
    expect(opts).not.toHaveProperty('pass')
    const nc = await connect(opts)
    try {
      const bus = await Bus.open(nc, { provision: false, waitMs: 5_000 })
      expect(await bus.kv.idle.status()).toBeTruthy()
    } finally {
      await nc.close()
    }
  })

  it('a wrong seed, a password or no credential is refused', async () => {
    const wrong = join(await tmpDir(), 'wrong.nk')
    await writeFile(wrong, new TextDecoder().decode(createUser().getSeed()))
    const host = nats.hostPort
    const refused = async (options: Parameters<typeof connect>[0]) => {
      try {
        const nc = await connect({ ...options, reconnect: false, timeout: 5_000 })
        await nc.close()
        return 'connected'
      } catch (err) {
        return String((err as Error).message)
      }
    }
    expect(await refused(natsServerOptions(`nats://demand@${host}`, { NATS_NKEY_SEED_FILE: wrong }))).toMatch(
      /authorization violation/i,
    )
    expect(await refused(natsServerOptions(`nats://demand:guessed-password@${host}`, {}))).toMatch(
      /authorization violation/i,
    )
    expect(await refused(natsServerOptions(`nats://${host}`, {}))).toMatch(/authorization violation/i)
  })

  it('a placeholder in the Secret stops the process before it connects, naming the file', async () => {
    const file = join(await tmpDir(), 'placeholder.nk')
    await writeFile(file, 'REPLACE_WITH_THE_DEMAND_NKEY_SEED\n')
    expect(() => natsServerOptions(`nats://demand@${nats.hostPort}`, { NATS_NKEY_SEED_FILE: file })).toThrow(
      new RegExp(`NKey seed file ${file} holds no user seed`),
    )
  })
})

describe('least privilege on JetStream', () => {
  const STREAMS = NATS_STREAMS
  const USERS = [...FUNCTIONS, 'ingress', 'bridge', 'gateway'] as const

  it('no function user creates a consumer on any stream: durable, named or unfiltered, KV_* streams included', async () => {
    const results: string[] = []
    for (const user of USERS) {
      for (const stream of STREAMS) {
        for (const subject of [
          `$JS.API.CONSUMER.CREATE.${stream}`,
          `$JS.API.CONSUMER.CREATE.${stream}.intruder`,
          `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.intruder`,
          // the filtered form, on another subject and on the KV watch subjects an ordered watch uses
          `$JS.API.CONSUMER.CREATE.${stream}.intruder.flexinfer.events.>`,
          `$JS.API.CONSUMER.CREATE.${stream}.intruder.$KV.flexinfer-backfills.>`,
          `$JS.API.CONSUMER.CREATE.${stream}.intruder.$KV.flexinfer-claims.model.>`,
          `$JS.API.CONSUMER.DELETE.${stream}.intruder`,
        ]) {
          const outcome = await attempt(user, subject)
          if (outcome !== 'refused') results.push(`${user} ${subject}: ${outcome}`)
        }
      }
    }
    // No exception: the KV watches follow the buckets' republished subjects instead (pkg/jetstream/kv-mirror.ts), so no
    // function can name a deliver subject the server would not check.
    expect(results).toEqual([])
  }, 120_000)

  it('no function user purges or deletes a stream or a bucket, the timers stream included', async () => {
    const results: string[] = []
    for (const user of [...USERS, 'provision'] as const) {
      for (const stream of STREAMS) {
        for (const op of ['DELETE', 'PURGE', 'UPDATE', 'CREATE']) {
          if (user === 'provision' && op !== 'DELETE' && op !== 'PURGE') continue
          const outcome = await attempt(
            user,
            `$JS.API.STREAM.${op}.${stream}`,
            op === 'PURGE' ? '{"filter":"x.y"}' : '{}',
          )
          if (outcome !== 'refused') results.push(`${user} ${op} ${stream}`)
        }
      }
    }
    // admit/cancel/lifecycle once had PURGE on FLEXINFER_TIMERS (a filtered purge cancelled a timer): its filter is
    // in the body, so the same right purged every timer. They disarm with a tombstone now (next test).
    expect(results).toEqual([])
  }, 120_000)

  it('a timer is disarmed without a purge: the tombstone never fires, expires, and the timer can be re-armed', async () => {
    const ns = 'disarm'
    const firedCount = async (jsm: Awaited<ReturnType<typeof jetstreamManager>>, name: string) => {
      const info = await jsm.streams.info('FLEXINFER_TIMERS', {
        subjects_filter: `flexinfer.events.timer.${ns}.${name}`,
      })
      return Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0)
    }
    const waitFired = async (jsm: Awaited<ReturnType<typeof jetstreamManager>>, name: string) => {
      // Bounded; a timer that never fires fails the caller's expectation, with its message.
      await waitFor(`${name} to fire`, async () => (await firedCount(jsm, name)) > 0, {
        timeoutMs: 10_000,
        intervalMs: 200,
      }).catch(() => {})
      return firedCount(jsm, name)
    }
    // The three users that arm timers, side by side (bounded: ~6 s each on an idle machine).
    await Promise.all(
      (['admit', 'cancel', 'lifecycle'] as const).map(async (user) => {
        const bus = await Bus.open(await as(user), { provision: false, waitMs: 5_000 })
        const name = `t-${user}`
        const due = new Date(Date.now() + 2_500).toISOString()
        // A control timer with the same due time, left armed: it must fire in the same wait.
        await bus.armTimer(ns, `${name}-control`, due)
        await bus.armTimer(ns, name, due)
        expect(await bus.timerArmed(ns, name), user).toBe(true)
        await bus.cancelTimer(ns, name)
        expect(await bus.timerArmed(ns, name), user).toBe(false)
        expect(await waitFired(bus.jsm, `${name}-control`), `${user}: the control timer did not fire`).toBe(1)
        // Time is the subject: past the due time and a few scheduler ticks more (~250 ms each; the machine is
        // loaded), and past the tombstone's 1 s TTL checked below.
        await sleep(2_000)
        expect(await firedCount(bus.jsm, name), `${user}: a disarmed timer fired`).toBe(0)
        // The tombstone carries a 1 s TTL: gone, so the sweep's listing of stored schedules no longer shows it.
        const left = await bus.jsm.streams.info('FLEXINFER_TIMERS', {
          subjects_filter: `flexinfer.schedules.${ns}.${name}`,
        })
        expect(left.state.subjects ?? {}, user).toEqual({})
        // Re-armed after the tombstone: fires once, bounded.
        await bus.armTimer(ns, name, new Date(Date.now() + 1_000).toISOString())
        expect(await bus.timerArmed(ns, name), user).toBe(true)
        expect(await waitFired(bus.jsm, name), `${user}: the re-armed timer did not fire`).toBe(1)
      }),
    )
    const log = await nats.log()
    expect(log.split('\n').filter((l) => /violation/i.test(l) && /\.disarm\./.test(l))).toEqual([])
  }, 120_000)

  it('the client libraries fail the same way: an ordered consumer, a new bucket, a bucket destroyed', async () => {
    const nc = await as('admit')
    const js = jetstream(nc)
    await expect(
      (async () => {
        const c = await js.consumers.get('FLEXINFER_EVENTS', { filter_subjects: ['flexinfer.events.>'] })
        await c.info()
      })(),
    ).rejects.toThrow()
    const jsm = await jetstreamManager(nc, { checkAPI: false })
    await expect(
      jsm.consumers.add('KV_flexinfer-claims', {
        durable_name: 'intruder',
        ack_policy: AckPolicy.None,
        deliver_policy: DeliverPolicy.All,
      }),
    ).rejects.toThrow(/permissions violation/i)
    const kvm = new Kvm(nc)
    await expect(kvm.create('intruder-bucket')).rejects.toThrow()
    const kv = await kvm.open('flexinfer-claims')
    await expect(kv.destroy()).rejects.toThrow(/permissions violation/i)
  })

  it('admit reads what the admission protocol reads: requests on the foreground subject past its cursor', async () => {
    // Stored by the gateway as a gateway publishes it, on the foreground subject (FLEXINFER_FOREGROUND).
    const js = jetstream(await as('gateway'))
    const data = { namespace: 'team-a', model: 'gemma', at: new Date().toISOString() }
    const stored = await js.publish(
      catalog['ai.flexinfer.foreground.request'].subject,
      encode('ai.flexinfer.foreground.request', data),
    )
    const admit = await jetstreamManager(await as('admit'))
    const seen = await foregroundSince(admit, 'team-a', 'gemma', stored.seq - 1, Date.now)
    expect(seen.at).not.toBeNull()
    expect(seen.cursor).toBeGreaterThanOrEqual(stored.seq)
    // And past the newest: nothing, in the one read of the common case.
    expect((await foregroundSince(admit, 'team-a', 'gemma', seen.cursor, Date.now)).at).toBeNull()
  })

  it('each user publishes only the events it owns; the gateway only foreground requests', async () => {
    const owned: Record<string, string[]> = {
      source: ['backfill.changed', 'model.ready', 'gaming.session', 'gpu.lease', 'job.completed'],
      demand: ['backfill.cancel'],
      admit: ['backfill.cancel'],
      cancel: ['backfill.admit'],
      lifecycle: ['backfill.admit', 'backfill.cancel', 'backfill.resync'],
      ingress: ['foreground.request'],
      gateway: ['foreground.request'],
      bridge: [],
      provision: [],
      operator: [],
    }
    const every = [...new Set(Object.values(owned).flat())]
    const results: string[] = []
    for (const [user, mine] of Object.entries(owned)) {
      for (const type of every) {
        const outcome = await attempt(user as NatsUser, `flexinfer.events.${type}`, 'not-an-event')
        // A JetStream ack (or its error) answers an allowed publish; a refused one never reaches the stream.
        if ((outcome === 'refused') !== !mine.includes(type)) results.push(`${user} ${type}: ${outcome}`)
      }
    }
    expect(results).toEqual([])
    expect(await attempt('gateway', '$KV.flexinfer-model-idle.x.y')).toBe('refused')
    expect(await attempt('gateway', '$JS.API.INFO')).toBe('refused')
  }, 120_000)

  it('the functions follow the buckets without a consumer: every metrics mirror of flexinfer-backfills, demand’s claims', async () => {
    // Written by admit (it may write both buckets), followed by every function user from the republished subjects.
    const admit = await Bus.open(await as('admit'), { provision: false, waitMs: 5_000 })
    await admit.kv.backfills.put('follow.before', JSON.stringify({ n: 1 }))
    await admit.kv.claims.put('model.follow.before', JSON.stringify({ n: 1 }))
    const mirrors: { user: string; mirror: KvMirror<unknown>; prefix: string }[] = []
    for (const user of FUNCTIONS) {
      const nc = await as(user)
      const bus = await Bus.open(nc, { provision: false, waitMs: 5_000 })
      const mirror = new KvMirror<unknown>()
      await mirror.start(nc, bus.kv.backfills)
      mirrors.push({ user, mirror, prefix: 'follow.' })
      if (user === 'demand') {
        const claims = new KvMirror<unknown>()
        await claims.start(nc, bus.kv.claims, 'model.>')
        mirrors.push({ user: 'demand claims', mirror: claims, prefix: 'model.follow.' })
      }
    }
    // The snapshot (stream info + direct gets) has what was there before the start.
    for (const { user, mirror, prefix } of mirrors) expect(mirror.values.get(`${prefix}before`), user).toEqual({ n: 1 })
    // Changes after the start arrive on the republished subjects: a put, an update, a delete.
    await admit.kv.backfills.put('follow.after', JSON.stringify({ n: 2 }))
    await admit.kv.claims.put('model.follow.after', JSON.stringify({ n: 2 }))
    await admit.kv.backfills.delete('follow.before')
    await admit.kv.claims.delete('model.follow.before')
    const caughtUp = () =>
      mirrors.every(
        ({ mirror, prefix }) => mirror.values.has(`${prefix}after`) && !mirror.values.has(`${prefix}before`),
      )
    // Bounded; a mirror that does not catch up fails the expectations below, by user.
    await waitFor('the mirrors to catch up', caughtUp, { timeoutMs: 10_000 }).catch(() => {})
    for (const { user, mirror, prefix } of mirrors) {
      expect(mirror.values.get(`${prefix}after`), user).toEqual({ n: 2 })
      expect(mirror.values.has(`${prefix}before`), user).toBe(false)
    }
    for (const { mirror } of mirrors) await mirror.stop()
    const log = await nats.log()
    expect(
      log
        .split('\n')
        .filter((l) => /violation/i.test(l) && /flexinfer\.kv\.|KV_flexinfer-(backfills|claims)\.\$KV/.test(l)),
    ).toEqual([])
  })

  it('nobody may publish on the republished KV subjects (a forged claim or state would reach the mirrors)', async () => {
    const results: string[] = []
    for (const user of [...USERS, 'provision'] as const) {
      for (const subject of ['flexinfer.kv.flexinfer-claims.model.ns.m', 'flexinfer.kv.flexinfer-backfills.ns.b']) {
        const nc = await as(user)
        nc.publish(subject, '{}')
        await nc.flush()
      }
    }
    // The server's log is written asynchronously: read it until every violation is there (bounded).
    const unlogged = async () => {
      const log = await nats.log()
      const missing: string[] = []
      for (const user of [...USERS, 'provision'])
        for (const subject of ['flexinfer.kv.flexinfer-claims.model.ns.m', 'flexinfer.kv.flexinfer-backfills.ns.b'])
          if (
            !log.includes(`security-${user}" - `) ||
            !new RegExp(`security-${user}".*Publish Violation - Subject "${subject.replace(/\./g, '\\.')}"`).test(log)
          )
            missing.push(`${user} ${subject}`)
      return missing
    }
    await waitFor('the violations logged', async () => (await unlogged()).length === 0, { timeoutMs: 5_000 }).catch(
      () => {},
    )
    results.push(...(await unlogged()))
    expect(results).toEqual([])
  })
})

let tmp: string | undefined
async function tmpDir() {
  if (!tmp) {
    const { mkdtemp } = await import('node:fs/promises')
    const { tmpdir } = await import('node:os')
    tmp = await mkdtemp(join(tmpdir(), 'nats-cred-'))
  }
  return tmp
}
