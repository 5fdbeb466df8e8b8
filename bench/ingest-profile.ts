// Profiling aid (not part of `npm run bench`): one demand instance draining a backlog of foreground events, on a
// nats-server of its own, profiled while it drains (not while the backlog is published):
// `node --import tsx bench/ingest-profile.ts [events] [profile.cpuprofile]` (`DEMAND_ACK_POLICY=all`: batched acks).
// Besides the rate it prints what the machine's load changes least: CPU µs per event of this process and of
// nats-server, and the JetStream API requests and idle writes per event (a subscription on $JS.API.> and $KV.>).
import { spawn } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { Session } from 'node:inspector/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import { STREAM_FOREGROUND } from '../events/catalog.js'
import { encode } from '../events/codec.js'
import { startRunner } from '../runtime/runner.js'
import { ensureBinaries } from '../test/env/binaries.js'
import { freePorts, LOOPBACK } from '../test/env/net.js'

const EVENTS = Number(process.argv[2] ?? 200_000)
const PROFILE = process.argv[3]
const dir = await mkdtemp(join(tmpdir(), 'ingest-prof-'))
const [port] = (await freePorts(1)) as [number]
const server = spawn(ensureBinaries().natsServer, ['-js', '-sd', dir, '-a', LOOPBACK, '-p', String(port)], {
  stdio: 'ignore',
})
const url = `nats://${LOOPBACK}:${port}`
/** CPU time (user + system) of a process so far, in µs (/proc, clock ticks of 10 ms). */
const cpuOf = async (pid: number) => {
  const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]?.split(' ') ?? []
  return (Number(fields[11]) + Number(fields[12])) * 10_000
}
try {
  await new Promise((r) => setTimeout(r, 500))
  const kc = new KubeConfig()
  kc.loadFromClusterAndUser({ name: 'none', server: 'https://127.0.0.1:1', skipTLSVerify: false }, { name: 'none' })
  const first = await startRunner({ natsUrl: url, kubeconfig: kc, functions: ['demand'] })
  await first.stop()
  const nc = await connect({ servers: url, noAsyncTraces: true })
  const js = jetstream(nc)
  const jsm = await jetstreamManager(nc)
  for (let sent = 0; sent < EVENTS; ) {
    const batch = []
    for (let i = 0; i < 2000 && sent < EVENTS; i++, sent++)
      batch.push(
        js.publish(
          'flexinfer.events.foreground.request',
          encode('ai.flexinfer.foreground.request', { namespace: 'prof', model: `m-${sent % 1000}` }),
        ),
      )
    await Promise.all(batch)
  }
  // What the server is asked while demand drains: JetStream API requests by kind, and idle writes.
  const requests = new Map<string, number>()
  const sniff = await connect({ servers: url, noAsyncTraces: true })
  sniff.subscribe('$JS.API.>', {
    callback: (_e, m) => {
      const kind = m.subject.split('.').slice(2, 4).join('.')
      requests.set(kind, (requests.get(kind) ?? 0) + 1)
    },
  })
  sniff.subscribe('$KV.>', {
    callback: () => {
      requests.set('KV write', (requests.get('KV write') ?? 0) + 1)
    },
  })
  await sniff.flush()
  const session = new Session()
  if (PROFILE) {
    session.connect()
    await session.post('Profiler.enable')
    await session.post('Profiler.start')
  }
  const runner = await startRunner({ natsUrl: url, kubeconfig: kc, functions: ['demand'] })
  const cpu0 = process.cpuUsage()
  const server0 = await cpuOf(server.pid as number)
  const t0 = performance.now()
  for (;;) {
    const info = await jsm.consumers.info(STREAM_FOREGROUND, 'demand-foreground')
    if (info.num_pending === 0 && info.num_ack_pending === 0) break
    await new Promise((r) => setTimeout(r, 50))
  }
  const ms = performance.now() - t0
  const cpu = process.cpuUsage(cpu0)
  const serverCpu = (await cpuOf(server.pid as number)) - server0
  await sniff.flush()
  const perEvent = (n: number) => Math.round((n / EVENTS) * 10_000) / 10_000
  if (PROFILE) {
    const { profile } = await session.post('Profiler.stop')
    await writeFile(PROFILE, JSON.stringify(profile))
  }
  process.stdout.write(
    `${JSON.stringify({
      events: EVENTS,
      ackPolicy: process.env.DEMAND_ACK_POLICY === 'all' ? 'all' : 'explicit',
      ms: Math.round(ms),
      perS: Math.round(EVENTS / (ms / 1000)),
      // CPU time of this process per event: steadier than the rate on a shared machine.
      cpuUsPerEvent: Math.round(((cpu.user + cpu.system) / EVENTS) * 100) / 100,
      serverCpuUsPerEvent: Math.round((serverCpu / EVENTS) * 100) / 100,
      // CONSUMER.INFO is this script's own polling.
      requestsPerEvent: Object.fromEntries(
        [...requests].filter(([k]) => k !== 'CONSUMER.INFO').map(([k, n]) => [k, perEvent(n)]),
      ),
      loadAverage: (await import('node:os')).loadavg().map((l) => Math.round(l * 10) / 10),
    })}\n`,
  )
  await runner.stop()
  await sniff.close()
  await nc.close()
} finally {
  server.kill('SIGTERM')
  await rm(dir, { recursive: true, force: true })
}
process.exit(0)
