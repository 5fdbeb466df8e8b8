import { connect } from 'node:net'
import { waitFor } from './exec.js'
import { LOOPBACK } from './net.js'
import { type ServerProcess, whileRunning } from './supervisor.js'

// A plain TCP relay from an address the node's pods can reach (the bridge address) to a server bound to loopback,
// which a pod's packets cannot reach: the server itself stays on loopback, so nothing of it listens on the machine's
// other interfaces. Every connection is closed with either side, and at most 256 are relayed at once. It runs as a
// process of its own (`node -e`), started and reaped like the servers it fronts.
const FORWARDER = `
const net = require('node:net')
const [listenHost, port, target] = process.argv.slice(1)
const server = net.createServer((client) => {
  const upstream = net.connect({ host: target, port: Number(port) })
  const close = () => { client.destroy(); upstream.destroy() }
  client.on('error', close); upstream.on('error', close); client.on('close', close); upstream.on('close', close)
  client.pipe(upstream); upstream.pipe(client)
})
server.maxConnections = 256
server.listen(Number(port), listenHost, () => console.log('forwarding ' + listenHost + ':' + port + ' to ' + target))
`

/** The command line of a relay from `listenHost:port` to `target:port` (the same port on both sides). */
export function forwarderCommand(listenHost: string, port: number, target: string): [string, string[]] {
  return [process.execPath, ['-e', FORWARDER, listenHost, String(port), target]]
}

type Start = (name: string, command: string, args: string[]) => ServerProcess

/**
 * A relay from the node's bridge address to a loopback server's port (the same port), started as `name` and up once a
 * connection through it is accepted: how the node's pods reach a server of the environment (NATS, PostgreSQL).
 */
export async function relayToNode(start: Start, name: string, hostIp: string, port: number): Promise<string> {
  const p = start(name, ...forwarderCommand(hostIp, port, LOOPBACK))
  await whileRunning(
    p,
    waitFor(
      `${name} on ${hostIp}:${port}`,
      () =>
        new Promise<boolean>((resolve) => {
          const socket = connect({ host: hostIp, port }, () => {
            socket.destroy()
            resolve(true)
          })
          socket.on('error', () => resolve(false))
        }),
      { timeoutMs: 30_000, intervalMs: 100 },
    ),
  )
  return `${hostIp}:${port}`
}
