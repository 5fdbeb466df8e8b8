// Runs one command in a network namespace of its own (started as `unshare -n node netns.mjs -- cmd args…`), where
// the only interface is its own loopback. Knative's components bind fixed ports (health probes on :8080, the
// InMemoryChannel dispatcher on :8080, …) on every interface; each in its own namespace, they neither collide with
// each other nor with anything else on the machine, and expose nothing beyond loopback. What crosses the boundary
// goes through Unix sockets (filesystem paths, which every network namespace shares), as the spec in MBF_NETNS
// says:
//   outbound [{port, socket}]: 127.0.0.1:<port> in here is piped to <socket> (the harness pipes that on to the
//     same port on the host's loopback: the kube-apiserver, the cluster-address proxy);
//   inbound  [{port, socket}]: <socket> (created here) is piped to 127.0.0.1:<port> in here (the harness exposes it
//     on a free host port: broker ingress, filter, channel dispatcher).
// The command's exit is this process's exit; SIGTERM/SIGINT are passed on. Plain Node, no dependencies: it must
// start fast and run without the TypeScript loader.
import { execFileSync, spawn } from 'node:child_process'
import net from 'node:net'

const spec = JSON.parse(process.env.MBF_NETNS ?? '{}')
const sep = process.argv.indexOf('--')
const [command, ...args] = sep >= 0 ? process.argv.slice(sep + 1) : []
if (!command) {
  process.stderr.write('usage: MBF_NETNS=<json> unshare -n node netns.mjs -- <command> [args…]\n')
  process.exit(2)
}

execFileSync('ip', ['link', 'set', 'lo', 'up'])

/** Pipes every accepted connection to a fresh connection made by `connect`; either side closing closes both. */
function pipeServer(connect) {
  return net.createServer((inbound) => {
    const outbound = connect()
    inbound.pipe(outbound).pipe(inbound)
    const close = () => {
      inbound.destroy()
      outbound.destroy()
    }
    inbound.on('error', close)
    outbound.on('error', close)
    inbound.on('close', close)
    outbound.on('close', close)
  })
}

const listening = []
for (const { port, socket } of spec.outbound ?? []) {
  const server = pipeServer(() => net.connect(socket))
  listening.push(new Promise((resolve, reject) => server.once('error', reject).listen(port, '127.0.0.1', resolve)))
}
for (const { port, socket } of spec.inbound ?? []) {
  const server = pipeServer(() => net.connect(port, '127.0.0.1'))
  listening.push(new Promise((resolve, reject) => server.once('error', reject).listen(socket, resolve)))
}
await Promise.all(listening)

const env = { ...process.env }
delete env.MBF_NETNS
const child = spawn(command, args, { stdio: 'inherit', env })
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => child.kill(signal))
child.on('error', (err) => {
  process.stderr.write(`netns: cannot start ${command}: ${err.message}\n`)
  process.exit(127)
})
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 128 : 1)))
