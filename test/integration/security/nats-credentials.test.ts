// NATS identities and permissions with a real nats-server running nats/auth.conf (NKey users only):
// - each function connects with its own seed file (a mounted Secret: NATS_NKEY_SEED_FILE); a wrong seed, a password
//   or no credential is refused; a placeholder seed stops the process before it connects;
// - no function user may create a consumer on any stream (durable, ephemeral or ordered, the KV_* streams included)
//   other than the KV watches it really runs, nor purge or delete a stream or bucket, nor publish an event type it
//   does not own; the gateway publishes foreground requests and nothing else. What they do use still works.
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { createUser } from '@nats-io/nkeys'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Bus, KvMirror, natsServerOptions } from '../../../runtime/nats.js'
import { provision } from '../../../runtime/provision.js'
import { useTestEnv } from '../../env/fixture.js'
import { type AuthNats, FUNCTIONS, type NatsUser, startAuthNats } from '../support/deploy.js'

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

/** The server's answer to a request on `subject` as `user`: 'refused' (permissions violation) or 'answered'. */
async function attempt(user: NatsUser, subject: string, body = '{}'): Promise<'refused' | 'answered' | 'timeout'> {
  const nc = await as(user)
  try {
    await nc.request(subject, body, { timeout: 3_000 })
    return 'answered'
  } catch (err) {
    const text = `${(err as Error).message} ${String((err as { cause?: unknown }).cause ?? '')}`
    if (/permissions violation/i.test(text)) return 'refused'
    if (/timeout/i.test(text)) return 'timeout'
    return 'answered'
  }
}

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
  const STREAMS = [
    'FLEXINFER_EVENTS',
    'FLEXINFER_TIMERS',
    'FLEXINFER_DEADLETTER',
    'FLEXINFER_FOREGROUND',
    'FLEXINFER_FOREGROUND_LAST',
    'KV_flexinfer-model-idle',
    'KV_flexinfer-backfills',
    'KV_flexinfer-claims',
  ]
  const USERS = [...FUNCTIONS, 'ingress', 'bridge', 'gateway'] as const

  it('no function user creates a consumer on any stream: durable, named or unfiltered, KV_* streams included', async () => {
    const results: string[] = []
    for (const user of USERS) {
      for (const stream of STREAMS) {
        for (const subject of [
          `$JS.API.CONSUMER.CREATE.${stream}`,
          `$JS.API.CONSUMER.CREATE.${stream}.intruder`,
          `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.intruder`,
          // another subject than the watch the code runs, in the filtered form
          `$JS.API.CONSUMER.CREATE.${stream}.intruder.flexinfer.events.>`,
        ]) {
          const outcome = await attempt(user, subject)
          if (outcome !== 'refused') results.push(`${user} ${subject}: ${outcome}`)
        }
      }
    }
    // The one exception: lifecycle's resync sweep over several namespaces (multi-filter watch of its bucket).
    expect(results).toEqual(['lifecycle $JS.API.CONSUMER.CREATE.KV_flexinfer-backfills.intruder: answered'])
  }, 120_000)

  it('no function user purges or deletes a stream or a bucket (only the timers subject purge of admit/cancel/lifecycle)', async () => {
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
    expect(results.sort()).toEqual(['admit', 'cancel', 'lifecycle'].map((u) => `${u} PURGE FLEXINFER_TIMERS`).sort())
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

  it('what the functions do use still works: every metrics watch of flexinfer-backfills, demand’s claims watch', async () => {
    for (const user of FUNCTIONS) {
      const bus = await Bus.open(await as(user), { provision: false, waitMs: 5_000 })
      const mirror = new KvMirror<unknown>()
      await mirror.start(bus.kv.backfills)
      await mirror.stop()
      if (user === 'demand') {
        const claims = new KvMirror<unknown>()
        await claims.start(bus.kv.claims, 'model.>')
        await claims.stop()
      }
    }
    const log = await nats.log()
    expect(
      log.split('\n').filter((l) => /violation/i.test(l) && /KV_WATCHER|KV_flexinfer-backfills\.KV/.test(l)),
    ).toEqual([])
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
