// `npm run gen:secrets` against a real nats-server: the generated auth.conf (public keys filled in, mounted beside
// the server's config as the Secret would be) loads with no key in the server's environment; every identity logs in
// with the seed its output holds (a seed from another generation is refused); the read-only operator identity
// reads what people and `kubectl mbf` read — stream and consumer info, KV get/history/watch with the real nats CLI —
// and is refused every write: an event, a bucket, a stream, a durable consumer, a pull from a function's consumer,
// another user's inbox.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAllDocuments } from 'yaml'
import { main as mbf } from '../../../cmd/kubectl-mbf/kubectl-mbf.js'
import { provision } from '../../../cmd/manager/provision.js'
import { authConfIdentities } from '../../../dev/tools/secrets/generate.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { natsServerOptions } from '../../../pkg/jetstream/connect.js'
import { repoRoot } from '../../env/binaries.js'
import { run } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { type AuthNats, FUNCTIONS, NATS_STREAMS, requestOutcome, startAuthNats } from '../support/deploy.js'

const env = useTestEnv()
let nats: AuthNats
let out = ''
let users: string[] = []
const seedFiles = new Map<string, string>()
const conns = new Map<string, NatsConnection>()

/** The CLI as a user runs it, into a directory of its own (written 0600, never to stdout). */
const generateInto = async (dir: string, ...args: string[]) =>
  run(process.execPath, ['--import', 'tsx', join(repoRoot, 'dev/tools/secrets/generate.ts'), '--out', dir, ...args], {
    cwd: repoRoot,
    timeoutMs: 60_000,
  })
const secretsOf = async (file: string) =>
  parseAllDocuments(await readFile(file, 'utf8')).map(
    (d) => d.toJS() as { metadata: { name: string }; stringData: Record<string, string> },
  )

const as = async (user: string) => {
  let nc = conns.get(user)
  if (!nc) {
    nc = await connect({
      ...natsServerOptions(`nats://${user}@${nats.hostPort}`, { NATS_NKEY_SEED_FILE: seedFiles.get(user) }),
      name: `generated-${user}`,
    })
    conns.set(user, nc)
  }
  return nc
}
const attempt = async (user: string, subject: string, body = '{}') => requestOutcome(await as(user), subject, body)
/** The nats CLI as the operator, with the context file the generator wrote (its seed, its inbox prefix). */
const natsCli = (args: string[], timeoutMs = 20_000) =>
  run(
    env.binaries.nats,
    ['--context', join(out, 'operator/nats-context.json'), '--server', `nats://${nats.hostPort}`, ...args],
    { timeoutMs, env: { ...process.env, NATS_URL: '', NATS_CONTEXT: '', XDG_CONFIG_HOME: join(out, 'xdg') } },
  )

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'gen-secrets-it-'))
  const made = await generateInto(join(out, 'secrets'), '--gate-namespaces', 'team-a')
  expect(made.stderr).toBe('')
  expect(made.code).toBe(0)
  // Seeds never reach stdout.
  expect(made.stdout).not.toMatch(/SU[A-Z2-7]{20}/)
  out = join(out, 'secrets')
  users = authConfIdentities(await readFile(join(repoRoot, 'deploy/nats/auth.conf'), 'utf8'))
  const workloads = await secretsOf(join(out, 'model-backfill/secrets.yaml'))
  const [gateway] = await secretsOf(join(out, 'gateway/secret.yaml'))
  for (const s of workloads) {
    const user = /^model-backfill-nats-(.+)$/.exec(s.metadata.name)?.[1]
    if (!user) continue
    const file = join(out, `${user}.seed`)
    await writeFile(file, s.stringData.seed as string, { mode: 0o600 })
    seedFiles.set(user, file)
  }
  await writeFile(join(out, 'gateway.seed'), gateway?.stringData.seed as string, { mode: 0o600 })
  seedFiles.set('gateway', join(out, 'gateway.seed'))
  seedFiles.set('operator', join(out, 'operator/seed.nk'))
  const [natsSecret] = await secretsOf(join(out, 'nats/secret.yaml'))
  const [gateSecret] = await secretsOf(join(out, 'gates/team-a/secret.yaml'))
  await writeFile(join(out, 'gate-team-a.seed'), gateSecret?.stringData.seed as string, { mode: 0o600 })
  seedFiles.set('gate', join(out, 'gate-team-a.seed'))
  nats = await startAuthNats(env.binaries.natsServer as string, {
    authConf: natsSecret?.stringData['auth.conf'] as string,
    gatesConf: natsSecret?.stringData['gates.conf'] as string,
    nkeys: { seedFile: (u) => seedFiles.get(u) as string, publicKey: () => '' },
  })
  await provision({
    natsUrl: `nats://provision@${nats.hostPort}?nkey_seed_file=${seedFiles.get('provision')}`,
    consumers: [...FUNCTIONS],
  })
}, 120_000)

afterAll(async () => {
  for (const nc of conns.values()) await nc.close().catch(() => {})
  await nats?.stop()
  if (out) await rm(join(out, '..'), { recursive: true, force: true })
})

describe('the generated secrets on a real nats-server', () => {
  it('the filled-in auth.conf loads with no key in the environment; every identity logs in with its own seed', async () => {
    expect(users).toHaveLength(10)
    expect([...seedFiles.keys()].sort()).toEqual([...users, 'gate'].sort())
    for (const user of users) {
      const nc = await as(user)
      await nc.flush()
      expect(nc.info?.server_name, user).toBe('modelbackfill-auth-test')
    }
    // A second generation's seeds are other keys: refused at connect.
    const other = await mkdtemp(join(tmpdir(), 'gen-secrets-other-'))
    try {
      expect((await generateInto(join(other, 's'))).code).toBe(0)
      const refused = await connect({
        ...natsServerOptions(`nats://operator@${nats.hostPort}`, {
          NATS_NKEY_SEED_FILE: join(other, 's/operator/seed.nk'),
        }),
        reconnect: false,
        timeout: 5_000,
      }).then(
        async (nc) => {
          await nc.close()
          return 'connected'
        },
        (err: Error) => err.message,
      )
      expect(refused).toMatch(/authorization violation/i)
    } finally {
      await rm(other, { recursive: true, force: true })
    }
    // The functions bind to the provisioned topology with their generated identities.
    const demand = await Bus.open(await as('demand'), { provision: false, waitMs: 5_000 })
    expect(await demand.kv.idle.status()).toBeTruthy()
  })

  it("a gate namespace's generated user hears its own namespace's preemptions, nothing else", async () => {
    const gate = await as('gate')
    const own = gate.subscribe('flexinfer.preempt.team-a.>', { max: 1 })
    const heard = (async () => {
      for await (const m of own) return m.subject
    })()
    await gate.flush()
    // Only demand publishes preempt subjects (deploy/nats/auth.conf); the gates' account imports them.
    ;(await as('demand')).publish('flexinfer.preempt.team-a.gemma', '{}')
    expect(await heard).toBe('flexinfer.preempt.team-a.gemma')
    // The server answers a subscription outside its allowance with a permissions violation that closes it.
    const other = gate.subscribe('flexinfer.preempt.team-b.>')
    const closed = await Promise.race([other.closed, new Promise((r) => setTimeout(() => r('still open'), 5_000))])
    expect(String((closed as Error)?.message ?? closed)).toMatch(/permissions violation for subscription/i)
  })

  it('the operator reads with the nats CLI: stream and consumer info, KV get, history and watch', async () => {
    const admit = await Bus.open(await as('admit'), { provision: false, waitMs: 5_000 })
    await admit.kv.backfills.put('ops.seen', JSON.stringify({ phase: 'WaitingForIdle', n: 1 }))
    await admit.kv.backfills.put('ops.seen', JSON.stringify({ phase: 'Running', n: 2 }))

    const info = await natsCli(['stream', 'info', 'FLEXINFER_EVENTS', '--json'])
    expect(info.stderr).toBe('')
    expect(JSON.parse(info.stdout).config.name).toBe('FLEXINFER_EVENTS')
    const consumer = await natsCli(['consumer', 'info', 'FLEXINFER_EVENTS', 'admit', '--json'])
    expect(consumer.stderr).toBe('')
    expect(JSON.parse(consumer.stdout).name).toBe('admit')
    const get = await natsCli(['kv', 'get', 'flexinfer-backfills', 'ops.seen', '--raw'])
    expect(get.stderr).toBe('')
    expect(JSON.parse(get.stdout)).toEqual({ phase: 'Running', n: 2 })
    const history = await natsCli(['kv', 'history', 'flexinfer-backfills', 'ops.seen'])
    expect(history.code, history.stderr).toBe(0)
    expect(history.stdout).toContain('Running')
    const keys = await natsCli(['kv', 'ls', 'flexinfer-backfills'])
    expect(keys.code, keys.stderr).toBe(0)
    expect(keys.stdout).toContain('ops.seen')
    // The dead letters, as docs/troubleshooting.md reads them.
    await (await as('demand')).request('flexinfer.deadletter.demand', 'refused-event', { timeout: 5_000 })
    const dead = await natsCli(['stream', 'get', 'FLEXINFER_DEADLETTER', '--last-for', 'flexinfer.deadletter.demand'])
    expect(dead.code, dead.stderr).toBe(0)
    expect(dead.stdout).toContain('refused-event')
    // `stream view` pages interactively: under a terminal (script(1)), as a person runs it.
    const view = await run(
      'script',
      [
        '-qec',
        [
          env.binaries.nats,
          '--context',
          join(out, 'operator/nats-context.json'),
          '--server',
          `nats://${nats.hostPort}`,
          'stream view FLEXINFER_DEADLETTER',
        ].join(' '),
        '/dev/null',
      ],
      { timeoutMs: 20_000, env: { ...process.env, XDG_CONFIG_HOME: join(out, 'xdg') } },
    )
    expect(view.stdout).toContain('refused-event')
    expect(view.stdout).not.toMatch(/violation/i)
    // A watch runs until stopped: killed after a few seconds, once the current value has been printed.
    const watch = await natsCli(['kv', 'watch', 'flexinfer-backfills', 'ops.seen'], 6_000)
    expect(`${watch.stdout}${watch.stderr}`).toContain('Running')
    expect(`${watch.stdout}${watch.stderr}`).not.toMatch(/permissions violation/i)
    expect(await nats.log()).not.toMatch(/operator.*[Pp]ermissions [Vv]iolation|[Pp]ermissions [Vv]iolation.*operator/)
    // Not a real attempt state: gone before kubectl mbf reads the bucket (it expects the state's shape).
    await admit.kv.backfills.delete('ops.seen')
  }, 90_000)

  it('kubectl mbf runs as the operator (NATS_URL nats://operator@…, its seed file): get, explain, top', async () => {
    const url = `nats://operator@${nats.hostPort}?nkey_seed_file=${encodeURIComponent(seedFiles.get('operator') as string)}`
    const args = ['--kubeconfig', env.kubeconfigPath, '--nats-url', url]
    const before = (await nats.log()).length
    for (const cmd of [
      ['get', '-A', '-o', 'json'],
      ['top', '-A', '-o', 'json'],
    ]) {
      const r = await mbf([...cmd, ...args])
      expect(r.stderr, cmd.join(' ')).toBe('')
      expect(r.code, cmd.join(' ')).toBe(0)
    }
    const explain = await mbf(['explain', 'nothing-here', '-n', env.namespace, ...args])
    // No such ModelBackfill: a clean answer from the apiserver, not a NATS refusal.
    expect(explain.stderr).not.toMatch(/permission/i)
    expect((await nats.log()).slice(before)).not.toMatch(/[Pp]ermissions [Vv]iolation/)
  }, 60_000)

  it('the operator is refused every write: events, buckets, streams, durables, pulls, other inboxes', async () => {
    const refusedOrNot: string[] = []
    const expectRefused = async (subject: string, body = '{}') => {
      const outcome = await attempt('operator', subject, body)
      if (outcome !== 'refused') refusedOrNot.push(`${subject}: ${outcome}`)
    }
    for (const type of [
      'foreground.request',
      'foreground.request.ns.model',
      'backfill.changed',
      'backfill.cancel',
      'backfill.admit',
      'backfill.resync',
      'model.ready',
      'gaming.session',
      'gpu.lease',
      'job.completed',
      'k8s.job',
      'timer.ns.name',
      'resync.due',
    ])
      await expectRefused(`flexinfer.events.${type}`, 'not-an-event')
    await expectRefused('flexinfer.schedules.ns.name')
    await expectRefused('flexinfer.deadletter.operator')
    for (const bucket of ['flexinfer-model-idle', 'flexinfer-backfills', 'flexinfer-claims']) {
      await expectRefused(`$KV.${bucket}.forged`)
      await expectRefused(`flexinfer.kv.${bucket}.forged`)
    }
    const streams = [...NATS_STREAMS]
    for (const stream of streams) {
      for (const op of ['CREATE', 'UPDATE', 'DELETE', 'PURGE']) await expectRefused(`$JS.API.STREAM.${op}.${stream}`)
      await expectRefused(`$JS.API.STREAM.MSG.DELETE.${stream}`, '{"seq":1}')
      await expectRefused(`$JS.API.CONSUMER.DURABLE.CREATE.${stream}.intruder`)
    }
    // No consumer at all on the streams the functions consume (the operator reads their messages by sequence or
    // subject instead); only the KV_* and dead-letter streams, where no durable lives, take its short-lived ones.
    for (const stream of streams.filter((s) => !s.startsWith('KV_') && s !== 'FLEXINFER_DEADLETTER')) {
      await expectRefused(`$JS.API.CONSUMER.CREATE.${stream}`)
      await expectRefused(`$JS.API.CONSUMER.CREATE.${stream}.intruder.flexinfer.events.>`)
    }
    // Every durable consumer of the functions: no pull (it would take their events), no ack, no delete, no pause.
    const jsm = await jetstreamManager(await as('operator'))
    const durables: string[] = []
    for (const stream of streams) {
      for await (const c of jsm.consumers.list(stream)) if (c.config.durable_name) durables.push(`${stream}.${c.name}`)
    }
    expect(durables.length).toBeGreaterThanOrEqual(8)
    for (const d of durables) {
      await expectRefused(`$JS.API.CONSUMER.MSG.NEXT.${d}`, '{"batch":1,"expires":1000000000}')
      await expectRefused(`$JS.API.CONSUMER.DELETE.${d}`)
      await expectRefused(`$JS.API.CONSUMER.PAUSE.${d}`)
      await expectRefused(`$JS.ACK.${d}.1.1.1.1.1`)
    }
    expect(refusedOrNot).toEqual([])
    // Subscriptions: another user's inbox, the event subjects.
    for (const subject of ['_INBOX_demand.>', '_INBOX.>', 'flexinfer.events.>', 'flexinfer.schedules.>']) {
      const nc = await connect({
        ...natsServerOptions(`nats://operator@${nats.hostPort}`, { NATS_NKEY_SEED_FILE: seedFiles.get('operator') }),
        reconnect: false,
      })
      const violation = new Promise<string>((resolve) => {
        ;(async () => {
          for await (const s of nc.status()) if (s.type === 'error') resolve(String(s.error))
        })()
        setTimeout(() => resolve('none'), 3_000)
      })
      nc.subscribe(subject)
      await nc.flush()
      expect(await violation, subject).toMatch(/permissions violation/i)
      await nc.close()
    }
  }, 180_000)

  it('a push consumer the operator points at an event or republished-KV subject delivers nothing there', async () => {
    // nats-server does not check a consumer's deliver subject against the creator's permissions; it delivers only
    // to subscriptions on exactly that subject. The streams and the functions' bucket mirrors subscribe with
    // wildcards, so nothing they read can be reached this way (deploy/nats/README.md, "operator").
    const admit = await Bus.open(await as('admit'), { provision: false, waitMs: 5_000 })
    await admit.kv.claims.put('model.forge.target', JSON.stringify({ n: 1 }))
    const demand = await as('demand')
    const mirrored: string[] = []
    const sub = demand.subscribe('flexinfer.kv.flexinfer-claims.model.>', {
      callback: (_err, m) => {
        mirrored.push(m.subject)
      },
    })
    await demand.flush()
    const operator = await as('operator')
    const jsm = await jetstreamManager(operator)
    const eventsBefore = (await jsm.streams.info('FLEXINFER_EVENTS')).state.last_seq
    // Last, a control consumer delivering to the operator's own inbox: once its message has arrived, the server has
    // had its chance to deliver the forged ones too (each consumer pushes what it holds as soon as it is created).
    const control = `_INBOX_operator.control${Math.random().toString(36).slice(2, 8)}`
    const controlSub = operator.subscribe(control, { max: 1 })
    await operator.flush()
    for (const deliver of ['flexinfer.events.backfill.cancel', 'flexinfer.kv.flexinfer-claims.model.forged', control]) {
      const name = `forge${Math.random().toString(36).slice(2, 8)}`
      const reply = await operator.request(
        `$JS.API.CONSUMER.CREATE.KV_flexinfer-claims.${name}.$KV.flexinfer-claims.>`,
        JSON.stringify({
          stream_name: 'KV_flexinfer-claims',
          config: {
            name,
            deliver_subject: deliver,
            filter_subject: '$KV.flexinfer-claims.>',
            ack_policy: 'none',
            deliver_policy: 'all',
            inactive_threshold: 10_000_000_000,
            mem_storage: true,
            num_replicas: 1,
          },
        }),
        { timeout: 3_000 },
      )
      expect(reply.string()).toContain(deliver)
    }
    const controlArrived = (async () => {
      for await (const _ of controlSub) return true
      return false
    })()
    expect(await Promise.race([controlArrived, new Promise((r) => setTimeout(() => r('none in 10 s'), 10_000))])).toBe(
      true,
    )
    await demand.flush()
    sub.unsubscribe()
    expect(mirrored).toEqual([])
    expect((await jsm.streams.info('FLEXINFER_EVENTS')).state.last_seq).toBe(eventsBefore)
  }, 60_000)
})
