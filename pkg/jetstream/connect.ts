// Connecting to NATS: the servers and credentials from NATS_URL and a mounted Secret's files, and a first connection
// that waits for NATS while it is down or restarting.
import { readFileSync } from 'node:fs'
import { type Authenticator, connect, credsAuthenticator, nkeyAuthenticator } from '@nats-io/transport-node'
import { parseNatsServers } from '../../clients/ts/src/connection.js'
import { describeError, type Logger } from '../observability/log.js'

/** The credential files of a mounted Secret, by the variables that name them (cmd/manager/config.ts reads them). */
export interface NatsCredentialFiles {
  NATS_CREDS_FILE?: string
  NATS_NKEY_SEED_FILE?: string
}

/** How a process connects (TopologyOptions, topology.ts, carries these too). */
export interface ConnectOptions {
  /** How long the first connection waits for NATS (NATS_CONNECT_WAIT_MS); default 120 s. */
  connectWaitMs?: number
  /** When set (TopologyOptions.waitMs), the first connection waits this long instead of `connectWaitMs`. */
  waitMs?: number
  /** The credential files of a mounted Secret (NATS_CREDS_FILE, NATS_NKEY_SEED_FILE); see natsServerOptions. */
  credentials?: NatsCredentialFiles
  log?: Logger
}

/**
 * Socket errors of a dial that say NATS is not there yet, waited out like a refusal: a server (or a proxy in front of
 * it) still starting accepts and resets, a Service's name does not resolve before it exists.
 */
const DIAL_UNAVAILABLE = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
])

/** How long a process waits for NATS at start before it gives up (NATS_CONNECT_WAIT_MS). */
export const DEFAULT_CONNECT_WAIT_MS = 120_000

/**
 * The first connection, waiting for NATS while it is down or restarting (every 500 ms, a 5 s dial deadline each,
 * up to `waitMs`): a function started during an outage is connected as soon as NATS is back, instead of exiting and
 * waiting out a restart (in a cluster, the pod's crash-loop back-off) while the cancels it serves wait for it. A
 * refused credential fails at once: it will not get better by waiting. Later disconnects reconnect forever
 * (maxReconnectAttempts -1).
 */
export async function connectWaiting(servers: string, name: string, topology: ConnectOptions = {}) {
  const waitMs = topology.waitMs ?? topology.connectWaitMs ?? DEFAULT_CONNECT_WAIT_MS
  const deadline = Date.now() + waitMs
  // noAsyncTraces: no Error (and its stack capture) built per request, a cost the hot paths would pay per event.
  const options = {
    ...natsServerOptions(servers, topology.credentials),
    name,
    maxReconnectAttempts: -1,
    noAsyncTraces: true,
  }
  for (let attempt = 1; ; attempt++) {
    try {
      return await connect({ ...options, timeout: 5_000 })
    } catch (err) {
      const unavailable =
        err instanceof Error &&
        (/ConnectionError|TimeoutError/.test(err.name) ||
          DIAL_UNAVAILABLE.has((err as NodeJS.ErrnoException).code ?? ''))
      if (!unavailable || /authori[sz]ation|authentication/i.test(String(err))) throw err
      const why = `${err.name}: ${describeError(err)}`
      if (Date.now() + 500 > deadline) {
        throw new Error(`NATS at ${servers} not reachable within ${Math.round(waitMs / 1000)} s: ${why}`)
      }
      if (attempt === 1 || attempt % 20 === 0) {
        topology.log?.warn({ servers, attempt, error: why }, 'NATS not reachable yet; waiting for it')
      }
      await new Promise((r) => setTimeout(r, 500))
    }
  }
}

/**
 * Connection options from `NATS_URL` and the credential files of a mounted Secret (deploy/nats/README.md):
 * - `NATS_CREDS_FILE` (a JWT `.creds` file) or `NATS_NKEY_SEED_FILE` (an NKey seed, `SU…`): the deployed form. The
 *   file is read at every (re)connect, so a rotated Secret is picked up without a restart. A URL may carry them
 *   instead as `?creds_file=` / `?nkey_seed_file=` (several identities in one process: tests).
 * - `nats://user:password@host:4222`: passwords in the URL, for a local nats-server only (development).
 * The user in the URL (`nats://demand@host:4222`) names the reply inbox prefix, `_INBOX_<user>`, the only one
 * deploy/nats/auth.conf lets that user subscribe to (no user can read another's replies). Never logged.
 */
export function natsServerOptions(
  servers: string,
  env: NatsCredentialFiles = {},
): {
  servers: string[]
  user?: string
  pass?: string
  inboxPrefix?: string
  authenticator?: Authenticator
} {
  const {
    servers: list,
    user,
    pass,
    credsFile: creds,
    seedFile: seed,
  } = parseNatsServers(servers, {
    NATS_CREDS_FILE: env.NATS_CREDS_FILE,
    NATS_NKEY_SEED_FILE: env.NATS_NKEY_SEED_FILE,
  })
  const inbox = user === undefined ? {} : { inboxPrefix: `_INBOX_${user}` }
  if (creds) return { servers: list, ...inbox, authenticator: credsAuthenticator(() => readCredential(creds)) }
  if (seed) {
    readNkeySeed(seed) // a missing, unreadable or placeholder seed stops the process here, with the file named
    return { servers: list, ...inbox, authenticator: nkeyAuthenticator(() => readNkeySeed(seed)) }
  }
  return { servers: list, ...(user === undefined ? {} : { user, pass }), ...inbox }
}

// The URL list is read by the gateway client's parser (clients/ts/src/connection.ts, compiled in from source: the
// controller takes no runtime dependency on the published package); what it does with the credentials is its own.
function readCredential(file: string): Uint8Array {
  const bytes = readFileSync(file)
  if (bytes.length === 0) throw new Error(`NATS credentials file ${file} is empty`)
  return new Uint8Array(bytes)
}

/** The seed, trimmed; a value that is not a user seed (a placeholder left in the Secret) is refused by name. */
function readNkeySeed(file: string): Uint8Array {
  const seed = readFileSync(file, 'utf8').trim()
  if (!/^SU[A-Z2-7]{56}$/.test(seed))
    throw new Error(
      `NKey seed file ${file} holds no user seed (SU…, 58 characters): make every identity with \`npm run gen:secrets\``,
    )
  return new TextEncoder().encode(seed)
}
