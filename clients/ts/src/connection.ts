// A gateway's NATS connection: NKey (or JWT .creds) login, the `_INBOX_<user>` reply inbox deploy/nats/auth.conf allows
// it, reconnect forever.
import { readFileSync } from 'node:fs'
import { type ConnectionOptions, credsAuthenticator, nkeyAuthenticator } from '@nats-io/transport-node'

export interface Credentials {
  /** An NKey user seed file (`SU…`), read at every (re)connect so a rotated Secret is picked up. */
  nkeySeedFile?: string
  /** A JWT `.creds` file (operator/JWT deployments), read at every (re)connect. */
  credsFile?: string
}

/**
 * Connection options for a gateway: `servers` is `nats://gateway@host:4222` (comma-separated for a cluster) — the
 * user names the reply inbox prefix `_INBOX_gateway`, the only one the gateway user may receive JetStream acks on.
 * The credential is `credentials`, else `?nkey_seed_file=` / `?creds_file=` on the URL, else the environment
 * (`NATS_NKEY_SEED_FILE`, `NATS_CREDS_FILE`). `nats://user:password@host` still works against a development server
 * of your own (deploy/nats/auth.conf accepts no password).
 *
 * Reconnects forever (nats.js gives up after 10 attempts by default, ~20 s: every later request would be lost),
 * 1 s between attempts plus up to 1 s of jitter (a fleet of gateways does not reconnect in lockstep), keeps trying
 * when NATS is down at start, and notices a dead server within ~10 s even when TCP is not reset (a partition).
 */
export function gatewayConnectionOptions(
  servers: string,
  credentials: Credentials = {},
  name = 'flexinfer-gateway',
  env: NodeJS.ProcessEnv = process.env,
): ConnectionOptions {
  const given = credentials.nkeySeedFile || credentials.credsFile
  const { servers: list, user, pass, seedFile, credsFile } = parseNatsServers(servers, given ? {} : env)
  const creds = given ? credentials.credsFile : credsFile
  const seed = given ? credentials.nkeySeedFile : seedFile
  let auth: Partial<ConnectionOptions> = user === undefined ? {} : { user, pass }
  if (creds) auth = { authenticator: credsAuthenticator(() => readCredentialsFile(creds)) }
  else if (seed) {
    // A missing or placeholder seed is a configuration error: named here, at start, not at the first request.
    readNkeySeed(seed)
    auth = { authenticator: nkeyAuthenticator(() => readNkeySeed(seed)) }
  }
  return {
    servers: list,
    ...auth,
    ...(user === undefined ? {} : { inboxPrefix: `_INBOX_${user}` }),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 1000,
    reconnectJitter: 1000,
    waitOnFirstConnect: true,
    pingInterval: 5000,
    maxPingOut: 2,
    noAsyncTraces: true,
  }
}

export interface NatsServers {
  servers: string[]
  /** The user in the URL: names the reply inbox prefix `_INBOX_<user>`. */
  user?: string
  /** A password in the URL (a development server of your own only). */
  pass?: string
  seedFile?: string
  credsFile?: string
}

/**
 * The servers of a NATS URL list with the user, password and credential files taken out: `?nkey_seed_file=` and
 * `?creds_file=` on a URL, else the environment's NATS_CREDS_FILE, else NATS_NKEY_SEED_FILE.
 */
export function parseNatsServers(servers: string, env: NodeJS.ProcessEnv = process.env): NatsServers {
  let user: string | undefined
  let pass: string | undefined
  const files: { creds?: string; seed?: string } = {}
  const list = servers.split(',').map((entry) => {
    let s = entry.trim()
    const query = s.indexOf('?')
    if (query >= 0) {
      const params = new URLSearchParams(s.slice(query + 1))
      files.creds = params.get('creds_file') ?? files.creds
      files.seed = params.get('nkey_seed_file') ?? files.seed
      s = s.slice(0, query)
    }
    const m = /^([a-z]+:\/\/)?([^:@/]+)(?::([^@/]*))?@(.+)$/i.exec(s)
    if (!m) return s
    user = decodeURIComponent(m[2] as string)
    pass = m[3] === undefined ? undefined : decodeURIComponent(m[3])
    return `${m[1] ?? ''}${m[4]}`
  })
  const credsFile = files.creds ?? (files.seed ? undefined : env.NATS_CREDS_FILE || undefined)
  const seedFile = files.seed ?? (credsFile ? undefined : env.NATS_NKEY_SEED_FILE || undefined)
  return { servers: list, user, pass, seedFile, credsFile }
}

/** A JWT `.creds` file's bytes; an empty file is named. */
export function readCredentialsFile(file: string): Uint8Array {
  const bytes = readFileSync(file)
  if (bytes.length === 0) throw new Error(`NATS credentials file ${file} is empty`)
  return new Uint8Array(bytes)
}

/** The seed, trimmed; a file that holds no user seed (a placeholder left in a Secret) is named. */
export function readNkeySeed(file: string): Uint8Array {
  const seed = readFileSync(file, 'utf8').trim()
  if (!/^SU[A-Z2-7]{56}$/.test(seed))
    throw new Error(
      `NKey seed file ${file} holds no user seed (SU…, 58 characters): generate one with \`nsc\` or \`nk -gen user\``,
    )
  return new TextEncoder().encode(seed)
}
