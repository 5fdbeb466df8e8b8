// Replays a request trace against a local environment: one Model (Ready, on a node of its own) and one ModelBackfill
// per model of the trace in a fresh namespace, every function running in this process, and the trace's requests
// published as a gateway publishes them, `speed` times faster than recorded. Judged by the chaos oracle
// (dev/chaos/oracle.ts: its own watch on Jobs, the log of what was published) plus a watch on the namespace's pods —
// never by the functions' own state.
import { randomBytes } from 'node:crypto'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { CoreV1Api, KubeConfig, makeInformer, type V1Pod } from '@kubernetes/client-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { connect } from '@nats-io/transport-node'
import { pino } from 'pino'
import { type Runner, startRunner } from '../../cmd/manager/runner.js'
import { STREAM_FOREGROUND_LAST, subjectFor } from '../../events/catalog.js'
import { encode } from '../../events/codec.js'
import { BackfillWorld, waitUntil } from '../../test/integration/support/backfill-world.js'
import { short } from '../chaos/config.js'
import { Oracle } from '../chaos/oracle.js'
import { type DeclaredBackfill, emptyWorkload, type ForegroundRequest } from '../chaos/workload.js'
import { renderPng, timelineSpec } from './figure.js'
import type { Workload } from './goodput.js'
import { computeReport, type ReplayReport, renderReport, type SentRequest, type WatchedJob } from './report.js'
import type { Trace } from './trace.js'

export const TEMPLATE = 'replay-tpl'

export interface ReplayOptions {
  trace: Trace
  /** Time compression: 60 plays an hour of trace in a minute. */
  speed: number
  /** idleFor in trace time; the ModelBackfills get idleFor / speed (at least 1 s). */
  idleForTraceMs: number
  kubeconfigPath: string
  natsUrl: string
  /** Where report.json, report.md and timeline.png go. */
  outDir: string
  /** Watching goes on this long after the last request (default: two wall-clock windows + 3 s). */
  tailMs?: number
  /** Keep the namespace afterwards (default: deleted). */
  keep?: boolean
  log?: (line: string) => void
  /** Label for the report header (the trace file). */
  source?: string
  /** The workload as items, in trace time: adds the goodput section (resumable against restart-from-scratch). */
  workload?: Workload
}

export interface ReplayResult {
  report: ReplayReport
  namespace: string
  files: { json: string; markdown: string; png: string }
  idleForMs: number
}

/** A workload's durations times `factor` (trace time to wall time). */
const scaleWorkload = (w: Workload, factor: number): Workload => ({
  itemMs: w.itemMs * factor,
  itemsPerRun: w.itemsPerRun,
  attemptStartMs: (w.attemptStartMs ?? 0) * factor,
})

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)))

/** A watch on the namespace's pods: when each Job's pods were deleted (the end of a preemption's exposure). */
async function watchPods(kc: KubeConfig, namespace: string) {
  const core = kc.makeApiClient(CoreV1Api)
  const pods = new Map<string, { job: string; goneAt?: number }>()
  const informer = makeInformer<V1Pod>(kc, `/api/v1/namespaces/${namespace}/pods`, () =>
    core.listNamespacedPod({ namespace }),
  )
  const seen = (pod: V1Pod) => {
    const uid = pod.metadata?.uid
    const job = pod.metadata?.ownerReferences?.find((o) => o.kind === 'Job')?.name ?? pod.metadata?.labels?.['job-name']
    if (uid && job && !pods.has(uid) && pods.size < 100_000) pods.set(uid, { job })
  }
  informer.on('add', seen)
  informer.on('update', seen)
  informer.on('delete', (pod) => {
    seen(pod)
    const entry = pod.metadata?.uid ? pods.get(pod.metadata.uid) : undefined
    if (entry && entry.goneAt === undefined) entry.goneAt = Date.now()
  })
  let stopped = false
  informer.on('error', () => {
    if (!stopped) setTimeout(() => !stopped && informer.start().catch(() => {}), 1000)
  })
  await informer.start()
  return {
    pods,
    stop: async () => {
      stopped = true
      await informer.stop()
    },
  }
}

export async function runReplay(o: ReplayOptions): Promise<ReplayResult> {
  const log = o.log ?? ((line: string) => console.log(line))
  const kc = new KubeConfig()
  kc.loadFromFile(o.kubeconfigPath)
  const nc = await connect({ servers: o.natsUrl, name: 'model-backfill replay' })
  const js = jetstream(nc, { timeout: 5_000 })
  const jsm = await jetstreamManager(nc)
  const namespace = `replay-${randomBytes(3).toString('hex')}`
  const idleForMs = Math.max(1000, Math.round(o.idleForTraceMs / o.speed))
  const idleForText =
    `idleFor ${(o.idleForTraceMs / 1000).toFixed(0)} s of trace = ${idleForMs} ms` +
    // The 1 s floor lengthens idleFor in trace time: the harvestable time and the goodput are of the longer one.
    (idleForMs * o.speed > o.idleForTraceMs ? ` (the 1 s floor: ${(idleForMs * o.speed) / 1000} s of trace)` : '')
  const core = kc.makeApiClient(CoreV1Api)
  let runner: Runner | undefined
  let oracle: Oracle | undefined
  let pods: Awaited<ReturnType<typeof watchPods>> | undefined
  try {
    await core.createNamespace({
      body: { metadata: { name: namespace, labels: { 'app.kubernetes.io/managed-by': 'modelbackfill-replay' } } },
    })
    await waitUntil(`ServiceAccount default in ${namespace}`, async () =>
      (await core.readNamespacedServiceAccount({ name: 'default', namespace }).catch(() => undefined))
        ? true
        : undefined,
    )
    const workload = emptyWorkload()
    const declared: DeclaredBackfill[] = o.trace.models.map((model, i) => ({
      namespace,
      name: `bf-${model}`.slice(0, 253),
      model,
      node: `replay-${namespace}-node-${i}`,
      idleForMs,
      hostile: false,
    }))
    workload.backfills.push(...declared)
    for (const b of declared) workload.nodeOf.set(`${namespace}/${b.model}`, b.node)
    oracle = new Oracle(kc, workload, { ...short, windowToleranceMs: 250, cancelBoundMs: 10_000 }, log)
    await oracle.start()
    pods = await watchPods(kc, namespace)
    runner = await startRunner({
      natsUrl: o.natsUrl,
      kubeconfig: kc,
      watch: true,
      namespaces: [namespace],
      instance: `replay${randomBytes(3).toString('hex')}`,
      // The functions' own logs: warnings and errors only, the report is what this run is for.
      logger: pino({ name: 'model-backfill', level: process.env.LOG_LEVEL ?? 'warn' }),
    })
    const world = new BackfillWorld(kc, namespace, nc)
    await world.template(TEMPLATE)
    for (const b of declared) {
      await world.model(b.model, { node: b.node })
      await world.backfill(b.name, {
        modelRef: b.model,
        templateRef: TEMPLATE,
        idleFor: `${idleForMs}ms`,
        maxRunDuration: '24h',
      })
    }
    // Decided at least once (with a short idleFor some are already running by the time the last is declared).
    for (const b of declared) {
      await waitUntil(
        `${b.name} to have a status`,
        async () => ((await world.getBackfill(b.name))?.status?.phase ? true : undefined),
        60_000,
      )
    }
    world.close()
    log(
      `replay: ${o.trace.requests.length} requests over ${o.trace.models.length} models in namespace ${namespace}; ` +
        `${(o.trace.durationMs / 1000).toFixed(0)} s of trace at ${o.speed}x ≈ ${(o.trace.durationMs / o.speed / 1000).toFixed(1)} s; ` +
        idleForText,
    )

    const from = Date.now()
    const sent: (SentRequest & { seq: number })[] = []
    let failed = 0
    let nextProgress = from + 10_000
    let maxSlipMs = 0
    for (const r of o.trace.requests) {
      const due = from + r.at / o.speed
      await sleep(due - Date.now())
      const data = { namespace, model: r.model, workloadClass: 'foreground' as const }
      const sentAt = Date.now()
      // Late sends (a loaded machine) stretch the replay; the report judges the times actually sent, and says so.
      maxSlipMs = Math.max(maxSlipMs, sentAt - due)
      try {
        const ack = await js.publish(
          subjectFor('ai.flexinfer.foreground.request', data),
          encode('ai.flexinfer.foreground.request', data, { time: new Date(sentAt).toISOString(), source: 'replay' }),
        )
        sent.push({ model: r.model, sentAt, ackAt: Date.now(), seq: ack.seq })
      } catch {
        failed++ // not stored by NATS: not a request the system could have seen
      }
      if (Date.now() >= nextProgress) {
        log(`replay: ${sent.length}/${o.trace.requests.length} requests sent`)
        nextProgress = Date.now() + 10_000
      }
    }
    await sleep(o.tailMs ?? 2 * idleForMs + 3_000)
    const to = Date.now()

    const requests: ForegroundRequest[] = sent.map((r) => ({
      model: `${namespace}/${r.model}`,
      sentAt: r.sentAt,
      ackAt: r.ackAt,
      seq: r.seq,
      background: false,
    }))
    const verdict = await oracle.evaluate(requests, to, async (seq) => {
      const stored = await jsm.streams.getMessage(STREAM_FOREGROUND_LAST, { seq }).catch(() => null)
      return stored ? stored.time.getTime() : undefined
    })
    const modelOf = new Map(declared.map((b) => [`${namespace}/${b.name}`, b.model]))
    const podsByJob = new Map<string, { goneAt?: number }[]>()
    for (const p of pods.pods.values()) podsByJob.set(p.job, [...(podsByJob.get(p.job) ?? []), p])
    const jobs: WatchedJob[] = []
    for (const j of oracle.jobs.values()) {
      const model = j.owner ? modelOf.get(j.owner) : undefined
      if (!model) continue
      const own = podsByJob.get(j.name) ?? []
      const allGone = own.length > 0 && own.every((p) => p.goneAt !== undefined)
      jobs.push({
        name: j.name,
        model,
        addedAt: j.addedAt,
        endAt: j.endAt,
        podsGoneAt: allGone ? Math.max(...own.map((p) => p.goneAt as number)) : undefined,
        pods: own.length,
      })
    }
    const report = computeReport({
      requests: sent,
      jobs,
      models: o.trace.models,
      insideWindow: verdict.inWindow,
      from,
      to,
      idleForMs,
      goodput: o.workload ? { workload: o.workload, speed: o.speed } : undefined,
    })
    await mkdir(o.outDir, { recursive: true })
    const files = {
      json: join(o.outDir, 'report.json'),
      markdown: join(o.outDir, 'report.md'),
      png: join(o.outDir, 'timeline.png'),
    }
    const png = await renderPng(
      timelineSpec({
        models: o.trace.models,
        requests: sent,
        jobs,
        from,
        to,
        idleForMs,
        // The figure's axis is wall time: the items are drawn at their wall-clock length.
        workload: o.workload ? scaleWorkload(o.workload, 1 / o.speed) : undefined,
        title: `Replay of ${o.source ?? 'a trace'} at ${o.speed}x (idleFor ${idleForMs} ms)`,
      }),
    )
    await writeFile(files.png, png)
    const header = {
      trace: `${o.source ?? '(in memory)'}: ${o.trace.requests.length} requests, ${o.trace.models.length} models, ${(o.trace.durationMs / 1000).toFixed(0)} s${o.trace.skipped ? `, ${o.trace.skipped} unreadable rows skipped` : ''}`,
      speed: `${o.speed}x; ${idleForText}`,
      'requests not stored by NATS': String(failed),
      'latest send behind the trace schedule': `${Math.round(maxSlipMs)} ms (the report uses the times actually sent)`,
      'lost cancels (oracle)': String(verdict.lost.length),
    }
    await writeFile(files.json, `${JSON.stringify({ header, namespace, ...report, lost: verdict.lost }, null, 2)}\n`)
    await writeFile(files.markdown, renderReport(report, header, 'timeline.png'))
    return { report, namespace, files, idleForMs }
  } finally {
    const step = async (what: string, p: Promise<unknown> | undefined) => {
      const t = Date.now()
      await p?.catch(() => {})
      if (process.env.REPLAY_DEBUG) log(`replay: ${what} took ${Date.now() - t} ms`)
    }
    await step('stopping the functions', runner?.stop())
    await step('stopping the oracle', oracle?.stop())
    await step('stopping the pod watch', pods?.stop())
    if (!o.keep) await step('deleting the namespace', core.deleteNamespace({ name: namespace }))
    await step('closing NATS', nc.close())
  }
}
