// Cold start and idle memory per function, as a scale-to-zero platform sees them: the image's entry point
// (`npm run build` → dist/bundle/main.js, what the Dockerfile runs) spawned as deployed (FUNCTION=<name>,
// NATS_PROVISION=false: it binds to the provisioned consumers) with one event for it already waiting on its
// durable consumer and nothing before it; cold start = spawn → that event acked (the consumer's ack floor passes
// it, read by polling the server every few ms, so it errs high by one poll). Also the CPU time (user + system) the
// process had used by then: on a loaded machine the wall time mostly measures waiting for a core, the CPU time
// what the start costs. Then the process idles and its RSS (/proc/<pid>/status VmRSS) is read. Every function's
// consumer must exist and nothing else may consume it.
//
// A backlog on the consumer is drained first by a run of the function that is not measured: the ack floor passes
// the new event only once everything before it is acked, so a backlog measured the backlog (admit read "—" in
// `npm run bench`: from step 2 on admit runs on the Knative path, and the admit requests and timers of hundreds of
// backfills piled up on its JetStream consumers, each a full reconcile with demand and cancel already stopped).
import { spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream'
import { STREAM_EVENTS, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST, STREAM_TIMERS } from '../../events/catalog.js'
import { encode, encodeApiServerEvent } from '../../events/codec.js'
import { RESYNC_REASONS } from '../../pkg/core/resync.js'
import { consumerName } from '../../pkg/jetstream/names.js'

export interface ColdStart {
  coldStartMs: number
  /** CPU time (user + system) the process used from spawn to its first event acked. */
  cpuMs: number
  rssMb: number
  /** Messages that were waiting on the function's consumers and were drained (not measured) before the event. */
  backlog: number
}

/** The image's entry point (dev/scripts/bundle.mjs). */
export const ENTRY = 'dist/bundle/main.js'

const CLK_TCK = 100
/** User + system CPU time of a process so far (/proc/<pid>/stat, in clock ticks of 10 ms). */
async function cpuMsOf(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  // Fields 14 and 15 (utime, stime) of proc(5), counted from after the command name (field 3 is index 0 here).
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK
}

async function backlogOf(jsm: JetStreamManager, durables: [string, string][]): Promise<number> {
  let n = 0
  for (const [stream, durable] of durables) {
    const info = await jsm.consumers.info(stream, durable).catch(() => null)
    if (info) n += info.num_pending + info.num_ack_pending
  }
  return n
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** One event each function handles (acks) on its own, with no object behind it: the cheapest honest first event. */
function firstEvent(fn: string, namespace: string): { stream: string; subject: string; payload: string } {
  const backfill = `cold-${fn}`
  switch (fn) {
    case 'demand':
      return {
        stream: STREAM_FOREGROUND,
        subject: 'flexinfer.events.foreground.request',
        payload: encode('ai.flexinfer.foreground.request', { namespace, model: `cold-${Date.now()}` }),
      }
    case 'cancel':
      return {
        stream: STREAM_EVENTS,
        subject: 'flexinfer.events.backfill.cancel',
        payload: encode('ai.flexinfer.backfill.cancel', {
          namespace,
          backfill,
          jobName: `${backfill}-1`,
          reason: 'ForegroundDemand',
          at: new Date().toISOString(),
        }),
      }
    case 'admit':
      return {
        stream: STREAM_EVENTS,
        subject: 'flexinfer.events.backfill.admit',
        payload: encode('ai.flexinfer.backfill.admit', { namespace, backfill }),
      }
    case 'lifecycle':
      return {
        stream: STREAM_EVENTS,
        subject: 'flexinfer.events.backfill.resync',
        payload: encode('ai.flexinfer.backfill.resync', { namespace, backfill, reason: RESYNC_REASONS[0] }),
      }
    case 'source':
      return {
        stream: STREAM_EVENTS,
        subject: 'flexinfer.events.k8s.modelbackfills',
        payload: encodeApiServerEvent(
          'delete',
          {
            apiVersion: 'ai.flexinfer/v1alpha2',
            kind: 'ModelBackfill',
            metadata: { name: backfill, namespace, uid: 'cold', resourceVersion: '1' },
          } as never,
          {
            source: 'bench',
            subject: `/apis/ai.flexinfer/v1alpha2/namespaces/${namespace}/modelbackfills/${backfill}`,
            id: `cold-${Date.now()}`,
          },
        ),
      }
    default:
      throw new Error(`no first event for ${fn}`)
  }
}

export async function measureColdStart(opts: {
  fn: string
  repoRoot: string
  natsUrl: string
  kubeconfigPath: string
  namespace: string
  js: JetStreamClient
  jsm: JetStreamManager
  /** Where the child's output goes (a file descriptor). */
  logFd: number
  idleMs?: number
  /** The entry point, relative to repoRoot; default ENTRY (before/after comparisons: dist/cmd/manager/main.js). */
  entry?: string
}): Promise<ColdStart> {
  const { fn, js, jsm } = opts
  const event = firstEvent(fn, opts.namespace)
  const durable = consumerName(fn, event.stream)
  const durables = FUNCTION_STREAMS.map((stream): [string, string] => [stream, consumerName(fn, stream)])
  const spawnFunction = () => {
    // BENCH_COLD_NODE: another Node binary (the image's Node 24, for its compile cache), else this one;
    // BENCH_COLD_NODE_FLAGS: Node flags on its command line (e.g. `--cpu-prof --cpu-prof-dir=<dir>`: where a start goes).
    const flags = (process.env.BENCH_COLD_NODE_FLAGS ?? '').split(' ').filter(Boolean)
    const child = spawn(
      process.env.BENCH_COLD_NODE || process.execPath,
      [...flags, join(opts.repoRoot, opts.entry ?? ENTRY)],
      {
        env: {
          ...process.env,
          NATS_URL: opts.natsUrl,
          KUBECONFIG: opts.kubeconfigPath,
          FUNCTION: fn,
          NATS_PROVISION: 'false',
          PORT: '0',
          LOG_LEVEL: 'warn',
        },
        stdio: ['ignore', opts.logFd, opts.logFd],
      },
    )
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
    return { child, exited }
  }
  const backlog = await backlogOf(jsm, durables)
  if (backlog > 0) {
    const drain = spawnFunction()
    try {
      const deadline = Date.now() + 120_000
      while (Date.now() < deadline && drain.child.exitCode === null && (await backlogOf(jsm, durables)) > 0)
        await sleep(100)
    } finally {
      if (drain.child.exitCode === null) drain.child.kill('SIGTERM')
      await drain.exited
    }
  }
  const ack = await js.publish(event.subject, event.payload)
  const t0 = performance.now()
  const { child, exited } = spawnFunction()
  try {
    let coldStartMs = Number.NaN
    let cpuMs = Number.NaN
    const deadline = Date.now() + 30_000
    while (Date.now() < deadline && child.exitCode === null) {
      const info = await jsm.consumers.info(event.stream, durable).catch(() => null)
      if (info && info.ack_floor.stream_seq >= ack.seq) {
        coldStartMs = Math.round(performance.now() - t0)
        cpuMs = await cpuMsOf(child.pid as number)
        break
      }
      await sleep(5)
    }
    await sleep(opts.idleMs ?? 3000)
    const status = await readFile(`/proc/${child.pid}/status`, 'utf8').catch(() => '')
    const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN)
    return { coldStartMs, cpuMs, rssMb: Math.round((rssKb / 1024) * 10) / 10, backlog }
  } finally {
    if (child.exitCode === null) child.kill('SIGTERM')
    await exited
  }
}

/** The streams a function may have durable consumers on. */
const FUNCTION_STREAMS = [STREAM_EVENTS, STREAM_TIMERS, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST]

/** The functions that scale to zero, and the preemption path (always on) for comparison. */
export const COLD_START_FUNCTIONS = ['demand', 'cancel', 'admit', 'lifecycle', 'source'] as const
