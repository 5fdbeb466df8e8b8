// The server side of the gateway clients' tests, whatever their language: a nats-server of its own running
// deploy/nats/auth.conf with fresh NKeys (provisioned as the provision user), the gateway's seed file, a recorder of every
// foreground request stored on a per-model subject, and a small loopback HTTP control that the Python and Go test
// suites drive: POST /down and /up stop and start the server (same port and store), POST /reset forgets what was
// recorded, GET /events returns it. The clients' own suites read its address from FLEXINFER_TEST_* variables.
import { spawn } from 'node:child_process'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { jetstream } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { provision } from '../../../cmd/manager/provision.js'
import { STREAM_FOREGROUND_LAST } from '../../../events/catalog.js'
import { decode } from '../../../events/codec.js'
import { natsServerOptions } from '../../../pkg/jetstream/connect.js'
import { LOOPBACK } from '../../env/net.js'
import { makeNatsNkeys } from '../support/deploy.js'
import { type OwnNats, startOwnNats } from '../transport/own-nats.js'

export interface RecordedEvent {
  subject: string
  /** The event as stored (parsed JSON). */
  event: Record<string, unknown>
  /** Why the functions' decoder refuses it; absent when it accepts it. */
  rejected?: string
}

export interface ClientHarness {
  /** FLEXINFER_TEST_NATS_URL, FLEXINFER_TEST_NKEY_SEED_FILE, FLEXINFER_TEST_CONTROL_URL. */
  env: Record<string, string>
  gatewayUrl: string
  gatewaySeedFile: string
  nats: OwnNats
  events(): RecordedEvent[]
  reset(): void
  stop(): Promise<void>
}

/** Bounded: a test records a few hundred events; beyond this the oldest are forgotten. */
const MAX_RECORDED = 10_000

export async function startClientHarness(natsServer: string, dir: string): Promise<ClientHarness> {
  const nkeys = await makeNatsNkeys(dir)
  const nats = await startOwnNats(natsServer, {
    include: join(process.cwd(), 'deploy/nats/auth.conf'),
    alongside: [join(process.cwd(), 'deploy/nats/gates.conf')],
    env: nkeys.serverEnv,
  })
  const hostPort = nats.url.replace(/^nats:\/\//, '')
  const urlOf = (user: 'provision' | 'demand') =>
    `nats://${user}@${hostPort}?nkey_seed_file=${encodeURIComponent(nkeys.seedFile(user))}`
  await provision({ natsUrl: urlOf('provision'), consumers: ['demand'] })

  const recorded: RecordedEvent[] = []
  let running = true
  const demand: NatsConnection = await connect({
    ...natsServerOptions(urlOf('demand')),
    name: 'clients-harness-recorder',
    maxReconnectAttempts: -1,
    reconnectTimeWait: 200,
  })
  // demand's own consumer of the per-model stream: every request stored there, in order, across restarts (fetch
  // again after an error, while the server is down).
  const recorder = (async () => {
    const consumer = await jetstream(demand).consumers.get(STREAM_FOREGROUND_LAST, 'demand-foreground_last')
    while (running) {
      try {
        const batch = await consumer.fetch({ max_messages: 100, expires: 1000 })
        for await (const m of batch) {
          const result = decode(m.data)
          recorded.push({
            subject: m.subject,
            event: m.json<Record<string, unknown>>(),
            ...(result.ok ? {} : { rejected: result.reason }),
          })
          if (recorded.length > MAX_RECORDED) recorded.shift()
          m.ack()
        }
      } catch {
        if (running) await new Promise((r) => setTimeout(r, 200))
      }
    }
  })()

  const control: Server = createServer((req, res) => {
    const reply = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' })
      res.end(JSON.stringify(body))
    }
    const route = `${req.method} ${req.url}`
    const run = async () => {
      if (route === 'GET /events') return reply(200, recorded)
      if (route === 'POST /reset') {
        recorded.length = 0
        return reply(200, {})
      }
      if (route === 'POST /down') {
        await nats.stop()
        return reply(200, {})
      }
      if (route === 'POST /up') {
        await nats.start()
        return reply(200, {})
      }
      reply(404, { error: `no ${route}` })
    }
    run().catch((err: Error) => reply(500, { error: err.message }))
  })
  await new Promise<void>((resolve) => control.listen(0, LOOPBACK, resolve))
  const controlUrl = `http://${LOOPBACK}:${(control.address() as AddressInfo).port}`
  const gatewayUrl = `nats://gateway@${hostPort}`
  const gatewaySeedFile = nkeys.seedFile('gateway')
  return {
    env: {
      FLEXINFER_TEST_NATS_URL: gatewayUrl,
      FLEXINFER_TEST_NKEY_SEED_FILE: gatewaySeedFile,
      FLEXINFER_TEST_CONTROL_URL: controlUrl,
    },
    gatewayUrl,
    gatewaySeedFile,
    nats,
    events: () => [...recorded],
    reset: () => {
      recorded.length = 0
    },
    async stop() {
      running = false
      control.close()
      await demand.close().catch(() => {})
      await recorder.catch(() => {})
      await nats.destroy()
    },
  }
}

/** Runs a client's own test suite (pytest, go test) against the harness; bounded by `timeoutMs`. */
export function runSuite(
  command: string,
  args: string[],
  opts: { cwd: string; env: Record<string, string>; timeoutMs: number },
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, {
      cwd: opts.cwd,
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    const keep = (b: Buffer) => {
      // The tail is what matters (failures, the summary): keep at most 1 MiB.
      output = (output + b.toString()).slice(-1_048_576)
    }
    child.stdout.on('data', keep)
    child.stderr.on('data', keep)
    const timer = setTimeout(() => {
      output += `\n[harness] ${command} killed after ${opts.timeoutMs} ms\n`
      child.kill('SIGKILL')
    }, opts.timeoutMs)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ code, output })
    })
  })
}
