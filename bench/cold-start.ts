// Cold start and idle memory per function, as a scale-to-zero platform sees them: the compiled image's entry point
// (`npm run build` → dist/runtime/main.js, what the Dockerfile runs) spawned with FUNCTION=<name>, one event for it
// already waiting on its durable consumer; cold start = spawn → that event acked (the consumer's ack floor passes
// it, read by polling the server every few ms, so it errs high by one poll). Then the process idles and its RSS
// (/proc/<pid>/status VmRSS) is read. Every function's consumer must exist and nothing else may consume it.
import { spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream'
import { RESYNC_REASONS } from '../core/resync.js'
import { STREAM_EVENTS, STREAM_FOREGROUND } from '../events/catalog.js'
import { encode, encodeApiServerEvent } from '../events/codec.js'
import { consumerName } from '../runtime/function.js'

export interface ColdStart {
  coldStartMs: number
  rssMb: number
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
}): Promise<ColdStart> {
  const { fn, js, jsm } = opts
  const event = firstEvent(fn, opts.namespace)
  const durable = consumerName(fn, event.stream)
  const ack = await js.publish(event.subject, event.payload)
  const t0 = performance.now()
  const child = spawn(process.execPath, [join(opts.repoRoot, 'dist/runtime/main.js')], {
    env: {
      ...process.env,
      NATS_URL: opts.natsUrl,
      KUBECONFIG: opts.kubeconfigPath,
      FUNCTION: fn,
      PORT: '0',
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', opts.logFd, opts.logFd],
  })
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
  try {
    let coldStartMs = Number.NaN
    const deadline = Date.now() + 30_000
    while (Date.now() < deadline && child.exitCode === null) {
      const info = await jsm.consumers.info(event.stream, durable).catch(() => null)
      if (info && info.ack_floor.stream_seq >= ack.seq) {
        coldStartMs = Math.round(performance.now() - t0)
        break
      }
      await sleep(5)
    }
    await sleep(opts.idleMs ?? 3000)
    const status = await readFile(`/proc/${child.pid}/status`, 'utf8').catch(() => '')
    const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN)
    return { coldStartMs, rssMb: Math.round((rssKb / 1024) * 10) / 10 }
  } finally {
    if (child.exitCode === null) child.kill('SIGTERM')
    await exited
  }
}

/** The functions that scale to zero, and the preemption path (always on) for comparison. */
export const COLD_START_FUNCTIONS = ['demand', 'cancel', 'admit', 'lifecycle', 'source'] as const
