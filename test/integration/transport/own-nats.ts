// A nats-server of a test's own (free loopback ports, a temp JetStream store) that the test may stop and start
// again on the same port and store: an outage the shared environment's server (used by other files running in
// parallel) must never see.
import { type ChildProcess, spawn } from 'node:child_process'
import { createWriteStream, type WriteStream } from 'node:fs'
import { copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { waitFor } from '../../env/exec.js'
import { freePorts, LOOPBACK } from '../../env/net.js'

export interface OwnNats {
  url: string
  /** SIGTERM (SIGKILL after 5 s); resolves when the process is gone. */
  stop(): Promise<void>
  /** The same server again (port, store); resolves when /healthz answers. */
  start(): Promise<void>
  /** Stops it and removes its store. */
  destroy(): Promise<void>
}

export interface OwnNatsOptions {
  /** Copied beside the configuration and included by it (e.g. deploy/nats/auth.conf, as in a ConfigMap). */
  include?: string
  /** Files the included one includes in turn, copied beside it (deploy/nats/auth.conf includes deploy/nats/gates.conf). */
  alongside?: string[]
  /** The server's environment on top of this process's (the NKeys auth.conf reads). */
  env?: Record<string, string>
}

export async function startOwnNats(natsServer: string, options: OwnNatsOptions = {}): Promise<OwnNats> {
  const dir = await mkdtemp(join(tmpdir(), 'nats-own-'))
  const [port, monitorPort] = (await freePorts(2)) as [number, number]
  await mkdir(join(dir, 'js'))
  const conf = join(dir, 'nats-server.conf')
  await writeFile(
    conf,
    [
      'server_name: modelbackfill-own',
      `listen: "${LOOPBACK}:${port}"`,
      `http: "${LOOPBACK}:${monitorPort}"`,
      `jetstream { store_dir: ${JSON.stringify(join(dir, 'js'))}, max_memory_store: 256MB, max_file_store: 2GB }`,
      ...(options.include ? [`include ${JSON.stringify(basename(options.include))}`] : []),
      '',
    ].join('\n'),
  )
  if (options.include) await copyFile(options.include, join(dir, basename(options.include)))
  for (const file of options.alongside ?? []) await copyFile(file, join(dir, basename(file)))
  const out: WriteStream = createWriteStream(join(dir, 'nats-server.log'), { flags: 'a' })
  let child: ChildProcess | undefined
  const monitorUrl = `http://${LOOPBACK}:${monitorPort}`
  const own: OwnNats = {
    url: `nats://${LOOPBACK}:${port}`,
    async start() {
      if (child && child.exitCode === null) throw new Error('nats-server is running')
      const c = spawn(natsServer, ['-c', conf], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, ...options.env },
      })
      c.stdout?.pipe(out, { end: false })
      c.stderr?.pipe(out, { end: false })
      child = c
      await waitFor(
        'own nats-server /healthz',
        async () => {
          if (c.exitCode !== null) throw new Error(`nats-server exited ${c.exitCode} (log: ${dir})`)
          return (await fetch(`${monitorUrl}/healthz`, { signal: AbortSignal.timeout(2000) })).status === 200
        },
        { timeoutMs: 20_000, intervalMs: 100 },
      )
    },
    async stop() {
      const c = child
      if (!c || c.exitCode !== null || c.signalCode !== null) return
      const exited = new Promise((resolve) => c.once('exit', resolve))
      c.kill('SIGTERM')
      const killer = setTimeout(() => c.kill('SIGKILL'), 5_000)
      await exited
      clearTimeout(killer)
    },
    async destroy() {
      await own.stop()
      out.end()
      await rm(dir, { recursive: true, force: true })
    },
  }
  await own.start()
  return own
}
