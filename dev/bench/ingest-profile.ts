// Profiling aid (not part of `npm run bench`): one demand instance draining a backlog of foreground events, on a
// nats-server of its own, profiled while it drains (not while the backlog is published):
// `node --import tsx dev/bench/ingest-profile.ts [events] [profile.cpuprofile]` (`DEMAND_ACK_POLICY=all`: batched acks;
// `INGEST_PROFILE=heap`: a sampling heap profile instead, `.heapprofile`).
// `INGEST_MODE=decode`: decoding alone, without NATS (decode() against the schema path).
// `INGEST_MODE=bare`: the floor instead of demand — a bare pull consumer with the adapter's pull options acking each
// message (AckAll: one ack per 256, with DEMAND_ACK_POLICY=all); `bare-decode`: the same plus decode() per message.
// Besides the rate it prints what the machine's load changes least: CPU µs per event of this process and of
// nats-server, and the JetStream API requests and idle writes per event (a subscription on $JS.API.> and $KV.>).
import { spawn } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { Session } from 'node:inspector/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import {
  AckPolicy,
  DeliverPolicy,
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import { startRunner } from '../../cmd/manager/runner.js'
import { STREAM_FOREGROUND } from '../../events/catalog.js'
import { decode, encode } from '../../events/codec.js'
import { PULL_EXPIRES_MS, PULL_HEARTBEAT_MS } from '../../pkg/transport/jetstream-adapter.js'
import { ensureBinaries } from '../../test/env/binaries.js'
import { freePorts, LOOPBACK } from '../../test/env/net.js'

const EVENTS = Number(process.argv[2] ?? 200_000)
const MODE = process.env.INGEST_MODE ?? 'demand'
const ACK_ALL = process.env.DEMAND_ACK_POLICY === 'all'
const PROFILE = process.argv[3]
/** INGEST_PROFILE=heap: the profile file is a sampling heap profile (where the drain allocates), not a CPU one. */
const HEAP = process.env.INGEST_PROFILE === 'heap'
if (MODE === 'decode') {
  await decodeOnly()
  process.exit(0)
}
const dir = await mkdtemp(join(tmpdir(), 'ingest-prof-'))
const [port] = (await freePorts(1)) as [number]
const server = spawn(ensureBinaries().natsServer, ['-js', '-sd', dir, '-a', LOOPBACK, '-p', String(port)], {
  stdio: 'ignore',
})
const url = `nats://${LOOPBACK}:${port}`
/** CPU time (user + system) of a process so far, in µs (/proc, clock ticks of 10 ms). */
const BARE = 'ingest-floor'
/** The floor: what any consumer of this backlog pays in this process (nats.js, the acks), nothing of demand's. */
async function startBare(js: JetStreamClient, jsm: JetStreamManager, decoding: boolean) {
  await jsm.consumers.add(STREAM_FOREGROUND, {
    durable_name: BARE,
    ack_policy: ACK_ALL ? AckPolicy.All : AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    max_ack_pending: 65_536,
  })
  const consumer = await js.consumers.get(STREAM_FOREGROUND, BARE)
  const messages = await consumer.consume({
    max_messages: 4096,
    expires: PULL_EXPIRES_MS,
    idle_heartbeat: PULL_HEARTBEAT_MS,
    bind: true,
  })
  let bad = 0
  let n = 0
  const done = (async () => {
    for await (const msg of messages) {
      if (decoding && !decode(msg.data).ok) bad++
      if (!ACK_ALL || (n + 1) % 256 === 0 || messages.getPending() === 0) msg.ack()
      n++
    }
  })()
  return {
    handled: () => n,
    async close() {
      await messages.close()
      await done
      if (bad) throw new Error(`${bad} events did not decode`)
    },
  }
}
/**
 * `INGEST_MODE=decode`: no NATS, one process, the CPU floor of decoding alone — decode() (with the foreground fast
 * path) against the zod schema path on the same bytes, in alternating rounds so the machine's load hits both alike.
 */
async function decodeOnly() {
  const { validateBySchema } = await import('../../events/codec.js')
  const bytes = Array.from({ length: 1000 }, (_, i) =>
    Buffer.from(encode('ai.flexinfer.foreground.request', { namespace: 'prof', model: `m-${i}` })),
  )
  const schemaPath = (b: Buffer) => validateBySchema(JSON.parse(b.toString('utf8')))
  const rounds = Math.max(1, Math.round(EVENTS / bytes.length / 10))
  const us = { decode: [] as number[], schema: [] as number[] }
  for (let r = 0; r < 10; r++)
    for (const [name, fn] of [
      ['decode', decode],
      ['schema', schemaPath],
    ] as const) {
      const t0 = process.cpuUsage()
      for (let k = 0; k < rounds; k++) for (const b of bytes) if (!fn(b).ok) throw new Error('did not decode')
      const t = process.cpuUsage(t0)
      us[name].push((t.user + t.system) / (rounds * bytes.length))
    }
  const median = (xs: number[]) => Math.round(([...xs].sort((a, b) => a - b)[xs.length >> 1] ?? 0) * 100) / 100
  process.stdout.write(
    `${JSON.stringify({ mode: MODE, cpuUsPerDecode: median(us.decode), cpuUsPerSchemaDecode: median(us.schema) })}\n`,
  )
}
/** Counts the connection's socket writes (nats.js flushes its outbound buffer once per microtask checkpoint). */
function countWrites(conn: unknown) {
  const counter = { n: 0 }
  const transport = (conn as { protocol: { transport: { send(frame: Uint8Array): unknown } } }).protocol.transport
  const send = transport.send.bind(transport)
  transport.send = (frame) => {
    counter.n++
    return send(frame)
  }
  return counter
}
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
    if (HEAP)
      await session.post('HeapProfiler.startSampling', {
        samplingInterval: 4096,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: true,
      })
    else {
      await session.post('Profiler.enable')
      await session.post('Profiler.start')
    }
  }
  const server0 = await cpuOf(server.pid as number)
  const bare = MODE === 'demand' ? undefined : await startBare(js, jsm, MODE === 'bare-decode')
  const runner = bare ? undefined : await startRunner({ natsUrl: url, kubeconfig: kc, functions: ['demand'] })
  // Consuming began inside the start above: count only what is handled from here, with no await in between.
  const handledSoFar = () => bare?.handled() ?? runner?.functions[0]?.stats.handled ?? 0
  const writes = countWrites(runner ? runner.deps.bus.nc : nc)
  const handled0 = handledSoFar()
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  for (;;) {
    const info = await jsm.consumers.info(STREAM_FOREGROUND, bare ? BARE : 'demand-foreground')
    if (info.num_pending === 0 && info.num_ack_pending === 0) break
    await new Promise((r) => setTimeout(r, 50))
  }
  const ms = performance.now() - t0
  const cpu = process.cpuUsage(cpu0)
  const handled = handledSoFar() - handled0
  const serverCpu = (await cpuOf(server.pid as number)) - server0
  await sniff.flush()
  const perEvent = (n: number) => Math.round((n / EVENTS) * 10_000) / 10_000
  if (PROFILE) {
    const { profile } = HEAP ? await session.post('HeapProfiler.stopSampling') : await session.post('Profiler.stop')
    await writeFile(PROFILE, JSON.stringify(profile))
  }
  process.stdout.write(
    `${JSON.stringify({
      events: EVENTS,
      mode: MODE,
      ackPolicy: ACK_ALL ? 'all' : 'explicit',
      ms: Math.round(ms),
      measured: handled,
      perS: Math.round(handled / (ms / 1000)),
      // CPU time of this process per event: steadier than the rate on a shared machine.
      cpuUsPerEvent: Math.round(((cpu.user + cpu.system) / handled) * 100) / 100,
      // Socket writes of the consuming connection (acks, idle writes, claim reads): each is a syscall.
      writesPerEvent: Math.round((writes.n / handled) * 1000) / 1000,
      serverCpuUsPerEvent: Math.round((serverCpu / EVENTS) * 100) / 100,
      // CONSUMER.INFO is this script's own polling.
      requestsPerEvent: Object.fromEntries(
        [...requests].filter(([k]) => k !== 'CONSUMER.INFO').map(([k, n]) => [k, perEvent(n)]),
      ),
      loadAverage: (await import('node:os')).loadavg().map((l) => Math.round(l * 10) / 10),
    })}\n`,
  )
  await runner?.stop()
  await bare?.close()
  await sniff.close()
  await nc.close()
} finally {
  // Its store is removed once it has exited: while it shuts down it still writes there (rm then failed, ENOTEMPTY).
  const exited = new Promise((r) => server.once('exit', r))
  server.kill('SIGTERM')
  await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))])
  await rm(dir, { recursive: true, force: true })
}
process.exit(0)
