// deploy/nats/official-chart-values.yaml on a real nats-server: the configuration the official NATS chart writes from
// those values (test/integration/support/nats-chart.ts, our reproduction of its merge; the chart itself is not run),
// with the generated Secret mounted beside it as the chart's pod mounts it, starts; every generated identity logs in,
// the provision step creates the topology and a function binds to it; a server list reaches nats.js as several
// servers. With a server that already has an account of its own, both accounts work in the one merged block; the
// top-level include of auth.conf such a server must not use drops the other account, which is why the values merge.
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parse, parseAllDocuments } from 'yaml'
import { provision } from '../../../cmd/manager/provision.js'
import { AUTH_CONF, authConfIdentities, DEFAULTS, generate, render } from '../../../dev/tools/secrets/generate.js'
import { Bus } from '../../../pkg/jetstream/bus.js'
import { natsServerOptions } from '../../../pkg/jetstream/connect.js'
import { ensureBinaries, repoRoot } from '../../env/binaries.js'
import { waitFor } from '../../env/exec.js'
import { freePorts, LOOPBACK } from '../../env/net.js'
import { FUNCTIONS } from '../support/deploy.js'
import { chartNatsConf, reloaderFiles, valuesMerge } from '../support/nats-chart.js'

const VALUES = join(repoRoot, 'deploy/nats/official-chart-values.yaml')
/** A platform team's own account, already on their server. */
const THEIRS = { config: { merge: { accounts: { APP: { users: [{ user: 'app', password: 'app-secret' }] } } } } }

let root = ''
const seeds = new Map<string, string>()
const servers: { child: ChildProcess; dir: string }[] = []
const conns: NatsConnection[] = []

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'nats-chart-'))
  const authConf = await readFile(AUTH_CONF, 'utf8')
  const g = generate(authConfIdentities(authConf), ['team-a'])
  const out = render(authConf, g, { ...DEFAULTS, gateNamespaces: ['team-a'] })
  // The Secret's keys, as the chart's pod mounts them (a directory at /etc/nats-auth beside /etc/nats-config).
  const [secret] = parseAllDocuments(out['nats/secret.yaml'] as string).map(
    (d) => d.toJS() as { stringData: Record<string, string> },
  )
  await mkdir(join(root, 'nats-auth'))
  for (const [key, text] of Object.entries(secret?.stringData ?? {}))
    await writeFile(join(root, 'nats-auth', key), text)
  for (const [user, id] of Object.entries(g.identities)) {
    await writeFile(join(root, `${user}.seed`), id.seed, { mode: 0o600 })
    seeds.set(user, join(root, `${user}.seed`))
  }
  await writeFile(join(root, 'gate.seed'), g.gates['team-a']?.seed as string, { mode: 0o600 })
  seeds.set('gate', join(root, 'gate.seed'))
}, 60_000)

afterAll(async () => {
  for (const nc of conns) await nc.close().catch(() => {})
  for (const { child } of servers) if (child.exitCode === null) child.kill('SIGKILL')
  if (root) await rm(root, { recursive: true, force: true })
})

/** The chart's nats.conf for these values files (in helm -f order), started as the chart's container starts it. */
async function startChartServer(name: string, ...valueFiles: unknown[]) {
  const dir = join(root, name)
  await mkdir(join(dir, 'nats-config'), { recursive: true })
  await mkdir(join(dir, 'data'))
  const [port, monitor] = (await freePorts(2)) as [number, number]
  // What differs from a pod only: loopback, free ports, a temporary store and pid file.
  const local = {
    config: {
      nats: { port },
      monitor: { enabled: false },
      jetstream: { fileStore: { dir: join(dir, 'data') } },
      merge: { host: LOOPBACK, http: `${LOOPBACK}:${monitor}`, pid_file: join(dir, 'nats.pid') },
    },
  }
  const values = valuesMerge(...valueFiles, local)
  const conf = chartNatsConf(values)
  // The include is relative to nats.conf, as in the pod: ../nats-auth from /etc/nats-config.
  await writeFile(join(dir, 'nats-config/nats.conf'), conf)
  await symlink(join(root, 'nats-auth'), join(dir, 'nats-auth'))
  const child = spawn(ensureBinaries().natsServer, ['--config', join(dir, 'nats-config/nats.conf')], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, SERVER_NAME: `chart-${name}` },
  })
  let log = ''
  child.stderr?.on('data', (b: Buffer) => {
    if (log.length < 64_000) log += b.toString()
  })
  servers.push({ child, dir })
  await waitFor(
    `nats-server ${name} /healthz`,
    async () => {
      if (child.exitCode !== null) throw new Error(`nats-server exited ${child.exitCode}:\n${log}\n${conf}`)
      return (await fetch(`http://${LOOPBACK}:${monitor}/healthz`, { signal: AbortSignal.timeout(2000) })).ok
    },
    { timeoutMs: 20_000, intervalMs: 100 },
  )
  return { hostPort: `${LOOPBACK}:${port}`, conf, values, log: () => log }
}

const login = async (url: string, seed?: string) => {
  const nc = await connect({
    ...natsServerOptions(url, seed ? { NATS_NKEY_SEED_FILE: seed } : {}),
    reconnect: false,
    timeout: 5_000,
  })
  conns.push(nc)
  await nc.flush()
  return nc
}
const refusal = (p: Promise<unknown>) =>
  p.then(
    () => 'connected',
    (err: Error) => err.message,
  )

describe('the official NATS chart with deploy/nats/official-chart-values.yaml', () => {
  it('renders our accounts inside one accounts block, and the reloader watches every file of them', async () => {
    const values = parse(await readFile(VALUES, 'utf8'))
    const conf = chartNatsConf(values)
    expect(conf.match(/"accounts"/g)).toHaveLength(1)
    expect(conf).toMatch(/"accounts": \{\s*include \.\.\/nats-auth\/accounts\.conf;\s*\}/)
    expect(conf).toContain('"max_file_store": 10Gi')
    expect(conf).toContain('"http_port": 8222')
    expect(reloaderFiles(values)).toEqual([
      '/etc/nats-config/nats.conf',
      '/etc/nats-auth/accounts.conf',
      '/etc/nats-auth/gates.conf',
    ])
    const patched = values.container.patch[0].value
    expect(patched).toMatchObject({ name: 'model-backfill-nats-auth', mountPath: '/etc/nats-auth' })
    expect(patched.subPath).toBeUndefined()
    expect(values.podTemplate.patch[0].value.secret.secretName).toBe('model-backfill-nats-auth')
  })

  it('starts; every generated identity logs in, provision creates the topology, a function binds, a list connects', async () => {
    const values = parse(await readFile(VALUES, 'utf8'))
    const server = await startChartServer('ours', values)
    for (const user of [...seeds.keys()].filter((u) => u !== 'gate')) {
      const nc = await login(`nats://${user}@${server.hostPort}`, seeds.get(user))
      expect(nc.info?.server_name, user).toBe('chart-ours')
    }
    await login(`nats://gate@${server.hostPort}`, seeds.get('gate'))
    await provision({
      natsUrl: `nats://provision@${server.hostPort}?nkey_seed_file=${encodeURIComponent(seeds.get('provision') as string)}`,
      consumers: [...FUNCTIONS],
    })
    const demand = await Bus.open(await login(`nats://demand@${server.hostPort}`, seeds.get('demand')), {
      provision: false,
      waitMs: 5_000,
    })
    expect(await demand.kv.idle.status()).toBeTruthy()
    // NATS_HOST=a:4222,b:4222 as the manifests expand it: the first server is down, the second takes the connection.
    const [dead] = (await freePorts(1)) as [number]
    const listed = await login(`nats://demand@${LOOPBACK}:${dead},${server.hostPort}`, seeds.get('demand'))
    expect(listed.getServer()).toBe(server.hostPort)
    // A seed the generation did not make is refused: the server knows only the generated public keys.
    const stranger = join(root, 'stranger.seed')
    await writeFile(stranger, generate(['admit']).identities.admit?.seed as string, { mode: 0o600 })
    expect(await refusal(login(`nats://admit@${server.hostPort}`, stranger))).toMatch(/authorization/i)
  }, 90_000)

  it('on a server that already has an account, both accounts work in the one merged block', async () => {
    const values = parse(await readFile(VALUES, 'utf8'))
    const server = await startChartServer('merged', THEIRS, values)
    expect(server.conf.match(/"accounts"/g)).toHaveLength(1)
    expect(server.conf).toMatch(/"APP": \{/)
    const app = await login(`nats://app:app-secret@${server.hostPort}`)
    const sub = app.subscribe('orders.>', { max: 1 })
    await app.flush()
    app.publish('orders.new', 'x')
    for await (const m of sub) expect(m.string()).toBe('x')
    const demand = await login(`nats://demand@${server.hostPort}`, seeds.get('demand'))
    expect(demand.info?.server_name).toBe('chart-merged')
  }, 60_000)

  it('a top-level include of auth.conf on that server drops its account: why the values merge', async () => {
    const naive = {
      config: { jetstream: { enabled: true }, merge: { zz$include: '../nats-auth/auth.conf' } },
    }
    const server = await startChartServer('naive', THEIRS, naive)
    expect(server.conf.match(/"accounts"/g)).toHaveLength(1)
    await login(`nats://demand@${server.hostPort}`, seeds.get('demand'))
    expect(await refusal(login(`nats://app:app-secret@${server.hostPort}`))).toMatch(/authorization/i)
  }, 60_000)
})
