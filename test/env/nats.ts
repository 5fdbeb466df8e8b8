// The NATS side of the test environment: one nats-server (the default, fastest) or a 3-server JetStream cluster
// (routes on loopback, each server with its own port, monitoring port and store directory), as users run it when
// they outgrow one machine. Also what a failover test needs: which server leads a stream (or a KV bucket's stream).
import { randomBytes } from 'node:crypto'
import { mkdir, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ensureBinaries } from './binaries.js'
import { waitFor } from './exec.js'
import { freePorts, httpGet, LOOPBACK } from './net.js'
import { Reaper, type ServerProcess, startServer, whileRunning } from './supervisor.js'

export const NATS_CLUSTER_SIZE = 3
export const NATS_CLUSTER_NAME = 'modelbackfill'

/** One nats-server of the environment (JSON-serializable). */
export interface NatsServerInfo {
  /** Process name in the environment and the server's server_name: `nats-server` (single) or `nats-0`…`nats-2`. */
  name: string
  url: string
  monitorUrl: string
  storeDir: string
  configPath: string
}

/** Cluster mode from the environment: MBF_NATS_CLUSTER=1 (or true). */
export function natsClusterFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return /^(1|true|yes)$/i.test(env.MBF_NATS_CLUSTER ?? '')
}

/** Writes the configuration of each server; ports are chosen here. */
export async function writeNatsConfigs(dir: string, cluster: boolean): Promise<NatsServerInfo[]> {
  const n = cluster ? NATS_CLUSTER_SIZE : 1
  // Per server: client, monitoring and (cluster) route port.
  const ports = await freePorts(n * 3)
  const servers = Array.from({ length: n }, (_, i) => {
    const [client, monitor, route] = ports.slice(i * 3, i * 3 + 3) as [number, number, number]
    const name = cluster ? `nats-${i}` : 'nats-server'
    return { name, client, monitor, route }
  })
  const out: NatsServerInfo[] = []
  for (const s of servers) {
    const storeDir = join(dir, cluster ? `nats/${s.name}` : 'nats')
    const configPath = join(dir, `${s.name}.conf`)
    const lines = [
      `server_name: ${cluster ? s.name : 'modelbackfill-test'}`,
      `listen: "${LOOPBACK}:${s.client}"`,
      `http: "${LOOPBACK}:${s.monitor}"`,
      'jetstream {',
      `  store_dir: ${JSON.stringify(storeDir)}`,
      '  max_memory_store: 256MB',
      '  max_file_store: 2GB',
      '}',
    ]
    if (cluster) {
      lines.push(
        'cluster {',
        `  name: ${NATS_CLUSTER_NAME}`,
        `  listen: "${LOOPBACK}:${s.route}"`,
        // Every server lists all routes (its own is ignored): any one can restart and find the others.
        `  routes: [${servers.map((o) => `"nats-route://${LOOPBACK}:${o.route}"`).join(', ')}]`,
        // Loopback only: never advertise an interface address to clients or peers.
        '  no_advertise: true',
        '}',
      )
    }
    await writeFile(configPath, `${lines.join('\n')}\n`)
    out.push({
      name: s.name,
      url: `nats://${LOOPBACK}:${s.client}`,
      monitorUrl: `http://${LOOPBACK}:${s.monitor}`,
      storeDir,
      configPath,
    })
  }
  return out
}

/** The client URL of the whole environment: comma-separated when it is a cluster (every client knows every server). */
export const natsUrlOf = (servers: Pick<NatsServerInfo, 'url'>[]) => servers.map((s) => s.url).join(',')

interface Jsz {
  server_name?: string
  meta_cluster?: { leader?: string; cluster_size?: number }
  account_details?: {
    stream_detail?: {
      name: string
      cluster?: { leader?: string; replicas?: { name: string; current: boolean }[] }
      consumer_detail?: { name: string; cluster?: { leader?: string } }[]
    }[]
  }[]
}

async function jsz(monitorUrl: string, query = ''): Promise<Jsz> {
  const r = await httpGet(`${monitorUrl}/jsz${query}`)
  if (r.status !== 200) throw new Error(`GET ${monitorUrl}/jsz: ${r.status}`)
  return JSON.parse(r.body) as Jsz
}

/**
 * Ready: /healthz answers 200, and in a cluster the server knows a JetStream meta leader (before that, creating a
 * stream fails with "JetStream system temporarily unavailable").
 */
export async function natsServerReady(server: Pick<NatsServerInfo, 'monitorUrl'>, cluster: boolean): Promise<true> {
  const health = await httpGet(`${server.monitorUrl}/healthz`)
  if (health.status !== 200) throw new Error(`/healthz ${health.status}: ${health.body.slice(0, 200)}`)
  if (cluster) {
    const info = await jsz(server.monitorUrl)
    if (!info.meta_cluster?.leader) throw new Error('no JetStream meta leader yet')
  }
  return true
}

/**
 * The server_name of the server leading `stream` (a KV bucket's stream is `KV_<bucket>`), or with `consumer` that
 * durable consumer of it, read from the monitoring endpoints (`/jsz?…&raft=true`) of the servers given — ask the
 * live ones. Undefined while it has no leader (an election is running) or none of them answers.
 */
export async function streamLeader(
  servers: Pick<NatsServerInfo, 'monitorUrl'>[],
  stream: string,
  consumer?: string,
): Promise<string | undefined> {
  for (const s of servers) {
    try {
      const info = await jsz(s.monitorUrl, `?accounts=true&streams=true&raft=true${consumer ? '&consumers=true' : ''}`)
      for (const account of info.account_details ?? []) {
        const detail = account.stream_detail?.find((d) => d.name === stream)
        const leader = consumer
          ? detail?.consumer_detail?.find((c) => c.name === consumer)?.cluster?.leader
          : detail?.cluster?.leader
        if (leader) return leader
      }
    } catch {
      // that server is down or busy: ask the next
    }
  }
  return undefined
}

/** Waits (bounded) until `stream` (or its durable `consumer`) has a leader among the servers; returns its name. */
export function waitForStreamLeader(
  servers: Pick<NatsServerInfo, 'monitorUrl'>[],
  stream: string,
  opts: { timeoutMs?: number; not?: string; consumer?: string } = {},
): Promise<string> {
  const what = opts.consumer ? `consumer ${opts.consumer} of ${stream}` : stream
  return waitFor(
    `a leader of ${what}${opts.not ? ` other than ${opts.not}` : ''}`,
    async () => {
      const leader = await streamLeader(servers, stream, opts.consumer)
      return leader && leader !== opts.not ? leader : undefined
    },
    { timeoutMs: opts.timeoutMs ?? 30_000, intervalMs: 100 },
  )
}

/** NATS alone (no Kubernetes), for tests that only need JetStream: seconds instead of the whole environment. */
export interface NatsOnly {
  cluster: boolean
  servers: NatsServerInfo[]
  /** Every server's URL, comma-separated. */
  natsUrl: string
  /** kill -9 of one server (a crash: no clean shutdown, no leadership hand-off); waits until it is gone. */
  kill(name: string): Promise<void>
  /** Starts a killed server again (same port, configuration and store) and waits until it is ready. */
  restart(name: string): Promise<void>
  /** The servers now running. */
  live(): NatsServerInfo[]
  stop(): Promise<void>
}

export async function startNats(opts: { cluster: boolean; log?: (line: string) => void }): Promise<NatsOnly> {
  const dir = join(tmpdir(), `modelbackfill-nats-${randomBytes(6).toString('hex')}`)
  const reaper = new Reaper()
  reaper.removeDir(dir)
  try {
    await mkdir(join(dir, 'logs'), { recursive: true, mode: 0o700 })
    const binary = ensureBinaries().natsServer
    const servers = await writeNatsConfigs(dir, opts.cluster)
    const procs = new Map<string, ServerProcess>()
    const launch = async (server: NatsServerInfo) => {
      const p = startServer(reaper, server.name, binary, ['-c', server.configPath], {
        cwd: dir,
        logPath: join(dir, 'logs', `${server.name}.log`),
      })
      procs.set(server.name, p)
      await whileRunning(
        p,
        waitFor(`${server.name} ready`, () => natsServerReady(server, opts.cluster), { timeoutMs: 60_000 }),
      )
    }
    const named = (name: string) => {
      const server = servers.find((s) => s.name === name)
      if (!server) throw new Error(`no nats-server "${name}" (${servers.map((s) => s.name).join(', ')})`)
      return server
    }
    await Promise.all(servers.map(launch))
    opts.log?.(`${servers.length} nats-server(s) ready at ${natsUrlOf(servers)}`)
    return {
      cluster: opts.cluster,
      servers,
      natsUrl: natsUrlOf(servers),
      async kill(name) {
        const p = procs.get(named(name).name)
        if (!p || p.hasExited()) return
        process.kill(-p.pid, 'SIGKILL')
        await p.exited
        reaper.forgetGroup(p.pid)
      },
      async restart(name) {
        const server = named(name)
        if (procs.get(name)?.hasExited() === false) throw new Error(`${name} is running`)
        await launch(server)
      },
      live: () => servers.filter((s) => procs.get(s.name)?.hasExited() === false),
      stop: () => reaper.reap(),
    }
  } catch (err) {
    await reaper.reap()
    throw err
  }
}
