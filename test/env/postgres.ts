// A real PostgreSQL server for the tests, started like etcd: initdb into the environment's own directory, postgres
// on a free loopback port, its own process group watched by the reaper (./supervisor.ts), gone with the environment.
// The binaries are Debian's (`postgresql` package: /usr/lib/postgresql/<major>/bin; .ci/run installs it). PostgreSQL
// refuses to run as root: as root, initdb and postgres run as the package's `postgres` user (setpriv, which execs
// rather than forks, so the server stays the leader of its process group), and the environment's directory is
// made traversable for it (0711: others may pass through, not list).
import { randomBytes } from 'node:crypto'
import { existsSync, readdirSync } from 'node:fs'
import { chmod, chown, mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { runOk, waitFor } from './exec.js'
import { freePorts, LOOPBACK } from './net.js'
import { type Reaper, type ServerProcess, startServer, whileRunning } from './supervisor.js'

export interface PostgresInfo {
  /** postgres://user:password@127.0.0.1:port/database */
  url: string
  /** The same as the node's pods reach it (a relay on the bridge address), with a node. */
  nodeUrl?: string
  host: string
  port: number
  user: string
  password: string
  database: string
  dataDir: string
  binDir: string
  version: string
}

const SERVICE_USER = 'postgres'

/** The newest /usr/lib/postgresql/<major>/bin with initdb and postgres, or undefined. */
export function postgresBinDir(root = '/usr/lib/postgresql'): string | undefined {
  let majors: string[]
  try {
    majors = readdirSync(root).filter((d) => /^\d+$/.test(d))
  } catch {
    return undefined
  }
  for (const major of majors.sort((a, b) => Number(b) - Number(a))) {
    const bin = join(root, major, 'bin')
    if (existsSync(join(bin, 'initdb')) && existsSync(join(bin, 'postgres'))) return bin
  }
  return undefined
}

async function serviceIds(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined
  const [uid, gid] = await Promise.all([
    runOk('id', ['-u', SERVICE_USER]).then((r) => Number(r.stdout.trim())),
    runOk('id', ['-g', SERVICE_USER]).then((r) => Number(r.stdout.trim())),
  ]).catch(() => {
    throw new Error(`running as root, PostgreSQL needs the "${SERVICE_USER}" user of Debian's postgresql package`)
  })
  return { uid, gid }
}

export async function startPostgres(opts: {
  /** The environment's directory: the data goes to <dir>/postgres, the log to <dir>/logs/postgres.log. */
  dir: string
  reaper: Reaper
  /** The environment's start (it records the command for restarts); default: startServer with the reaper. */
  start?: (name: string, command: string, args: string[]) => ServerProcess
}): Promise<{ info: PostgresInfo; process: ServerProcess }> {
  const binDir = postgresBinDir()
  if (!binDir)
    throw new Error('no PostgreSQL server in /usr/lib/postgresql/*/bin: install the Debian package postgresql')
  const ids = await serviceIds()
  const dataDir = join(opts.dir, 'postgres')
  const logs = join(opts.dir, 'logs')
  await mkdir(dataDir, { recursive: true, mode: 0o700 })
  await mkdir(logs, { recursive: true })
  const as = (command: string, args: string[]): [string, string[]] =>
    ids
      ? ['setpriv', [`--reuid=${ids.uid}`, `--regid=${ids.gid}`, '--clear-groups', command, ...args]]
      : [command, args]
  const user = 'modelbackfill'
  const password = randomBytes(12).toString('hex')
  const pwfile = join(opts.dir, 'postgres.pw')
  await writeFile(pwfile, `${password}\n`, { mode: 0o600 })
  if (ids) {
    await chmod(opts.dir, 0o711)
    await Promise.all([chown(dataDir, ids.uid, ids.gid), chown(pwfile, ids.uid, ids.gid)])
  }
  await runOk(
    ...as(join(binDir, 'initdb'), [
      `--pgdata=${dataDir}`,
      `--username=${user}`,
      `--pwfile=${pwfile}`,
      '--auth-local=trust',
      '--auth-host=scram-sha-256',
      '--encoding=UTF8',
      '--no-sync', // throwaway data, as etcd's --unsafe-no-fsync
    ]),
    { timeoutMs: 120_000 },
  )
  const [port] = (await freePorts(1)) as [number]
  const [command, args] = as(join(binDir, 'postgres'), [
    '-D',
    dataDir,
    '-h',
    LOOPBACK,
    '-p',
    String(port),
    '-k',
    dataDir,
    '-c',
    'fsync=off',
    '-c',
    'synchronous_commit=off',
    '-c',
    'full_page_writes=off',
    '-c',
    'max_connections=50',
  ])
  const proc = opts.start
    ? opts.start('postgres', command, args)
    : startServer(opts.reaper, 'postgres', command, args, { cwd: opts.dir, logPath: join(logs, 'postgres.log') })
  await whileRunning(
    proc,
    waitFor(
      'postgres accepting connections',
      async () => {
        await runOk(join(binDir, 'pg_isready'), ['-h', LOOPBACK, '-p', String(port), '-U', user, '-d', 'postgres'])
        return true
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    ),
  )
  const version = (await runOk(join(binDir, 'postgres'), ['--version'])).stdout.trim()
  const database = 'postgres'
  return {
    info: {
      url: `postgres://${user}:${password}@${LOOPBACK}:${port}/${database}`,
      host: LOOPBACK,
      port,
      user,
      password,
      database,
      dataDir,
      binDir,
      version,
    },
    process: proc,
  }
}
