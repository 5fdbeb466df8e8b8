// A gateway's NATS connection: NKey (or JWT .creds) login, the `_INBOX_<user>` reply inbox nats/auth.conf allows
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
 * of your own (nats/auth.conf accepts no password).
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
  let user: string | undefined
  let pass: string | undefined
  let seed = credentials.nkeySeedFile
  let creds = credentials.credsFile
  const list = servers.split(',').map((entry) => {
    let s = entry.trim()
    const query = s.indexOf('?')
    if (query >= 0) {
      const params = new URLSearchParams(s.slice(query + 1))
      seed ??= params.get('nkey_seed_file') ?? undefined
      creds ??= params.get('creds_file') ?? undefined
      s = s.slice(0, query)
    }
    const m = /^([a-z]+:\/\/)?([^:@/]+)(?::([^@/]*))?@(.+)$/i.exec(s)
    if (!m) return s
    user = decodeURIComponent(m[2] as string)
    pass = m[3] === undefined ? undefined : decodeURIComponent(m[3])
    return `${m[1] ?? ''}${m[4]}`
  })
  // A missing or placeholder seed is a configuration error: named here, at start, not at the first request.
  if (!seed && !creds) {
    creds = env.NATS_CREDS_FILE || undefined
    seed = creds ? undefined : env.NATS_NKEY_SEED_FILE || undefined
  }
  const credsFile = creds
  const seedFile = seed
  let auth: Partial<ConnectionOptions> = user === undefined ? {} : { user, pass }
  if (credsFile) auth = { authenticator: credsAuthenticator(() => new Uint8Array(readFileSync(credsFile))) }
  else if (seedFile) {
    readSeed(seedFile)
    auth = { authenticator: nkeyAuthenticator(() => readSeed(seedFile)) }
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

/** The seed, trimmed; a file that holds no user seed (a placeholder left in a Secret) is named in the error. */
function readSeed(file: string): Uint8Array {
  const seed = readFileSync(file, 'utf8').trim()
  if (!/^SU[A-Z2-7]{56}$/.test(seed)) throw new Error(`NKey seed file ${file} holds no user seed (SU…, 58 characters)`)
  return new TextEncoder().encode(seed)
}
