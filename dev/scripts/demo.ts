// `npm run demo`: one command on a fresh machine. Starts the local environment (.testenv, as `npm run env:up`) unless
// it is already up, applies a sample Model, CronJob template and ModelBackfill, runs every function in-process, and
// plays a short scripted day of gateway traffic while printing the ModelBackfill's phase changes live:
//   quiet → attempt 1 runs; burst of foreground requests → preempted; quiet → attempt 2 runs; a gaming session
//   on the node → preempted, then Blocked/GamingIntent; session over → attempt 3 runs; its Job succeeds →
//   Succeeded, the repeat scheduled (repeatAfter 1m).
// With the test environment's engine built (and not --no-engine), the model is real: llama-server serves it, each
// attempt's workload runs as a local process through its gate, and the timeline shows the engine's own numbers —
// background tokens/s, the foreground request's time to first token, background yielding (dev/scripts/demo-engine.ts).
// Then a summary (attempts, preemptions and their latency from the trigger to the Job's deletion, useful seconds
// from the KV state counters). Interactive: the functions keep running (the repeat fires a minute later) until
// Ctrl-C, and the environment stays up. CI (`CI=true` or `--ci`): stops what it started and exits 0.
import { existsSync } from 'node:fs'
import { rm } from 'node:fs/promises'
import { join, relative } from 'node:path'
import { createForegroundEmitter } from '@flexinfer/gateway-emitter'
import { BatchV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, type V1Job, Watch } from '@kubernetes/client-node'
import { Kvm } from '@nats-io/kv'
import { connect } from '@nats-io/transport-node'
import { pino } from 'pino'
import { type Runner, startRunner } from '../../cmd/manager/runner.js'
import { BUCKET_BACKFILLS } from '../../events/catalog.js'
import { GROUP, type ModelBackfill, type ModelBackfillStatus, VERSION } from '../../pkg/core/api.js'
import { backfillKey, LABEL_BACKFILL } from '../../pkg/core/names.js'
import type { BackfillState, Counters } from '../../pkg/core/state.js'
import { createLogger } from '../../pkg/observability/log.js'
import { repoRoot } from '../../test/env/binaries.js'
import { belongsTo, readEnvironmentInfo, startEnvironment, stopEnvironment } from '../../test/env/environment.js'
import { type DemoEngine, startDemoEngine } from './demo-engine.js'

export interface DemoEnvironment {
  kubeconfigPath: string
  natsUrl: string
  natsMonitorUrl: string
  /** Shown to the user: the script to source for kubectl and nats. */
  envShPath?: string
  logsDir?: string
}

export interface DemoOptions {
  /** Stop everything after the summary (CI). Default: keep the functions running until Ctrl-C. */
  ci?: boolean
  /** An environment to use (tests); default: .testenv, started when it is not up. */
  environment?: DemoEnvironment
  /** Default: `demo` (or `demo-2`, … when an earlier run's namespace exists). */
  namespace?: string
  print?: (line: string) => void
  /** Port for /metrics; default 9464 (any free one when taken), 0 in CI. */
  metricsPort?: number
  /** Serve the real model when the engine is built, each attempt's workload through its gate. Default false. */
  engine?: boolean
}

export interface Preemption {
  reason: 'foreground' | 'gaming'
  attempt: number
  job: string
  /** From the trigger (first foreground request, GamingSession created) to the Job's deletion. */
  latencyMs: number
}

export interface DemoSummary {
  namespace: string
  backfill: string
  attempts: number
  /** Distinct Phase/Reason steps the ModelBackfill went through, in order. */
  phases: string[]
  preemptions: Preemption[]
  counters: Counters
  finalPhase: string
  /** With the real engine: background tokens the gates counted, and the foreground requests' TTFTs. */
  engine?: { completed: number; discarded: number; ttftMs: number[] }
  nextRunTime?: string
  durationMs: number
}

export interface DemoRun {
  summary: DemoSummary
  runner: Runner
  metricsUrl?: string
  /** Stops the watches and the functions (not the environment). */
  stop(): Promise<void>
}

const BACKFILL = 'nightly-eval'
const MODEL = 'llama-3-8b'
const TEMPLATE = 'eval-template'
const IDLE_FOR_S = 3

const crd = (namespace: string, plural: string) => ({ group: GROUP, version: VERSION, namespace, plural })
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
const codeOf = (err: unknown) => (err as { code?: number }).code

async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(100)
  }
}

export async function runDemo(opts: DemoOptions = {}): Promise<DemoRun> {
  const print = opts.print ?? ((line: string) => console.log(line))
  const environment = opts.environment
  if (!environment) throw new Error('runDemo needs an environment (main() provides .testenv)')
  const kc = new KubeConfig()
  kc.loadFromFile(environment.kubeconfigPath)
  const core = kc.makeApiClient(CoreV1Api)
  const batch = kc.makeApiClient(BatchV1Api)
  const custom = kc.makeApiClient(CustomObjectsApi)

  const namespace = opts.namespace ?? (await freeNamespace(core))
  if (!opts.namespace) await core.createNamespace({ body: { metadata: { name: namespace } } })
  await until('the default ServiceAccount', async () => {
    try {
      return await core.readNamespacedServiceAccount({ name: 'default', namespace })
    } catch {
      return undefined
    }
  })
  const node = `gpu-node-${namespace}`

  const logFile = environment.logsDir ? join(environment.logsDir, `demo-${namespace}.log`) : undefined
  const logger = logFile ? createLogger('model-backfill', pino.destination({ dest: logFile, sync: false })) : undefined
  if (logger) logger.level = process.env.LOG_LEVEL ?? 'info'
  const quiet = logger ?? createLogger('model-backfill')
  if (!logger) quiet.level = process.env.LOG_LEVEL ?? 'warn'
  const runner = await startMetricsRunner(
    environment.natsUrl,
    kc,
    quiet,
    opts.metricsPort ?? (opts.ci ? 0 : 9464),
    namespace,
  )
  const nc = await connect({ servers: environment.natsUrl, name: 'model-backfill demo' })
  const emitter = createForegroundEmitter(nc, { source: 'demo-gateway' })

  const started = Date.now()
  const at = (t = Date.now()) => `+${((t - started) / 1000).toFixed(1)}s`.padStart(7)
  const story = (text: string) => print(`\n${at()}  ── ${text}`)
  let engine: DemoEngine | undefined
  if (opts.engine)
    engine = await startDemoEngine({ natsUrl: environment.natsUrl, namespace, model: MODEL, log: quiet, print, at })

  // Live timeline: every status change of the ModelBackfill, and when each attempt's Job goes.
  let status: ModelBackfillStatus | undefined
  const phases: string[] = []
  const jobDeleted = new Map<string, number>()
  const aborts: AbortController[] = []
  let watching = true
  const watchBackfill = async () => {
    aborts.push(
      await new Watch(kc).watch(
        `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/modelbackfills`,
        { fieldSelector: `metadata.name=${BACKFILL}` },
        (type, obj: ModelBackfill) => {
          if ((type !== 'ADDED' && type !== 'MODIFIED') || !obj.status?.phase) return
          const s = obj.status
          const step = `${s.phase}/${s.reason}`
          const before = status
          status = s
          if (before && `${before.phase}/${before.reason}` === step && before.attempts === s.attempts) return
          if (phases.at(-1) !== step) phases.push(step)
          const attempt = s.attempts ? `attempt ${s.attempts}` : ''
          print(
            `${at()}  ${(s.phase ?? '').padEnd(15)} ${(s.reason ?? '').padEnd(17)} ${attempt.padEnd(10)} ${s.message ?? ''}`,
          )
        },
        () => {
          if (watching) setTimeout(() => watchBackfill().catch(() => {}), 200)
        },
      ),
    )
  }
  const watchJobs = async () => {
    aborts.push(
      await new Watch(kc).watch(
        `/apis/batch/v1/namespaces/${namespace}/jobs`,
        { labelSelector: LABEL_BACKFILL },
        (type, job: V1Job) => {
          const name = job.metadata?.name
          if (!name || jobDeleted.has(name)) return
          if (type !== 'DELETED' && !job.metadata?.deletionTimestamp) return
          jobDeleted.set(name, Date.now())
          print(`${at()}  ${'Job deleted'.padEnd(33)} ${name}`)
        },
        () => {
          if (watching) setTimeout(() => watchJobs().catch(() => {}), 200)
        },
      ),
    )
  }
  await watchBackfill()
  await watchJobs()

  const reach = (phase: string, reason?: string, attempts?: number, timeoutMs = 30_000) =>
    until(
      `${BACKFILL} to reach ${phase}${reason ? `/${reason}` : ''}${attempts ? ` (attempt ${attempts})` : ''}`,
      async () =>
        status?.phase === phase && (!reason || status.reason === reason) && (!attempts || status.attempts === attempts)
          ? status
          : undefined,
      timeoutMs,
    )
  const preemptions: Preemption[] = []
  const preempted = async (reason: Preemption['reason'], since: number, attempt: number, job: string) => {
    const deletedAt = await until(`Job ${job} to be deleted`, async () => jobDeleted.get(job), 20_000)
    const latencyMs = deletedAt - since
    preemptions.push({ reason, attempt, job, latencyMs })
    const trigger = reason === 'gaming' ? 'the GamingSession appeared' : 'the first foreground request'
    print(`${' '.repeat(9)}↳ Job deleted ${latencyMs} ms after ${trigger}`)
  }

  try {
    print(`Namespace ${namespace}: Model ${MODEL} (Ready on ${node}), CronJob ${TEMPLATE}, ModelBackfill ${BACKFILL}`)
    print(`(idleFor ${IDLE_FOR_S}s, repeatAfter 1m). Timeline of ${BACKFILL}'s status:`)
    await applySamples(custom, batch, namespace, node)

    story(`quiet: nobody is using ${MODEL}; after ${IDLE_FOR_S}s idle the backfill starts`)
    const first = await reach('Running', 'JobRunning', 1)
    await engine?.startAttempt(first.jobName as string)
    await sleep(engine ? 5000 : 3000)

    story('burst: the gateway serves a burst of foreground requests')
    const burstAt = Date.now()
    const served: Promise<void>[] = []
    for (let i = 0; i < 10; i++) {
      await emitter.emit({ namespace, model: MODEL })
      // The gateway serves some of them on the real engine.
      if (engine && i % 5 === 0) served.push(engine.foreground())
      await sleep(100)
    }
    await preempted('foreground', burstAt, 1, first.jobName as string)
    await Promise.all(served)
    await engine?.stopAttempt()

    story(`quiet again: a fresh ${IDLE_FOR_S}s window after the last request, then attempt 2`)
    const second = await reach('Running', 'JobRunning', 2)
    await engine?.startAttempt(second.jobName as string)
    await sleep(2000)

    story(`a gaming session starts on ${node}`)
    const sessionAt = Date.now()
    await custom.createNamespacedCustomObject({
      ...crd(namespace, 'gamingsessions'),
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: 'GamingSession',
        metadata: { name: 'evening-game' },
        spec: { nodeName: node, mode: 'gaming' },
      },
    })
    await preempted('gaming', sessionAt, 2, second.jobName as string)
    await engine?.stopAttempt()
    await reach('Blocked', 'GamingIntent')
    await sleep(1500)

    story('the gaming session ends')
    await custom.deleteNamespacedCustomObject({ ...crd(namespace, 'gamingsessions'), name: 'evening-game' })
    const third = await reach('Running', 'JobRunning', 3)
    await engine?.startAttempt(third.jobName as string)
    await sleep(3000)
    await engine?.stopAttempt()

    story(`attempt 3's eval finishes (its pod Succeeded)`)
    await finishJob(core, namespace, third.jobName as string)
    const done = await until('Succeeded', async () => (status?.phase === 'Succeeded' ? status : undefined))
    if (done.reason !== 'RepeatScheduled') await reach('Succeeded', 'RepeatScheduled', undefined, 10_000)
    await sleep(300)

    const kv = await new Kvm(nc).open(BUCKET_BACKFILLS)
    const entry = await kv.get(backfillKey(namespace, BACKFILL))
    const state = entry?.json<BackfillState>()
    const summary: DemoSummary = {
      namespace,
      backfill: BACKFILL,
      attempts: status?.attempts ?? 0,
      phases: [...phases],
      preemptions,
      counters: state?.counters ?? { starts: 0, success: 0, failed: 0, preemptions: {}, usefulSeconds: 0 },
      finalPhase: `${status?.phase}/${status?.reason}`,
      engine: engine?.totals(),
      nextRunTime: status?.nextRunTime,
      durationMs: Date.now() - started,
    }
    printSummary(print, summary)
    const stop = async () => {
      watching = false
      for (const a of aborts) a.abort()
      await emitter.close()
      await nc.close()
      await runner.stop()
      await engine?.stop()
      await logger?.flush()
    }
    return { summary, runner, metricsUrl: runner.httpUrl && `${runner.httpUrl}/metrics`, stop }
  } catch (err) {
    watching = false
    for (const a of aborts) a.abort()
    await emitter.close().catch(() => {})
    await nc.close().catch(() => {})
    await runner.stop().catch(() => {})
    await engine?.stop().catch(() => {})
    throw err
  }
}

function printSummary(print: (line: string) => void, s: DemoSummary) {
  const c = s.counters
  print(`\nSummary — ModelBackfill ${s.namespace}/${s.backfill}, ${(s.durationMs / 1000).toFixed(1)}s of scripted day`)
  print(`  attempts        ${s.attempts} Jobs created (${c.success} succeeded, ${c.failed} failed)`)
  print(`  preemptions     ${s.preemptions.length}`)
  for (const p of s.preemptions)
    print(`    ${p.reason.padEnd(11)} attempt ${p.attempt}: Job deleted ${p.latencyMs} ms after the trigger`)
  print(`  useful seconds  ${c.usefulSeconds.toFixed(1)} (running time only, from the KV state counters)`)
  print(`  final phase     ${s.finalPhase}${s.nextRunTime ? `, next run at ${s.nextRunTime}` : ''}`)
  print(`  phases          ${s.phases.join(' → ')}`)
  if (s.engine) {
    const ttft = s.engine.ttftMs.map((t) => `${t.toFixed(0)} ms`).join(', ')
    print(`  engine          foreground first token ${ttft || '—'}; background tokens completed ${s.engine.completed},`)
    print(`                  thrown away at preemption ${s.engine.discarded} (the gates' counts)`)
  }
}

async function freeNamespace(core: CoreV1Api): Promise<string> {
  for (let i = 1; ; i++) {
    const name = i === 1 ? 'demo' : `demo-${i}`
    try {
      await core.readNamespace({ name })
    } catch (err) {
      if (codeOf(err) === 404) return name
      throw err
    }
  }
}

async function startMetricsRunner(
  natsUrl: string,
  kubeconfig: KubeConfig,
  logger: ReturnType<typeof createLogger>,
  port: number,
  namespace: string,
): Promise<Runner> {
  // The demo manages its own namespace only: other systems (tests, another demo) may share the cluster.
  const options = { natsUrl, kubeconfig, watch: true, logger, namespaces: [namespace], instance: namespace }
  try {
    return await startRunner({ ...options, httpPort: port })
  } catch (err) {
    if (port === 0 || (err as { code?: string }).code !== 'EADDRINUSE') throw err
    return startRunner({ ...options, httpPort: 0 })
  }
}

async function applySamples(custom: CustomObjectsApi, batch: BatchV1Api, namespace: string, node: string) {
  await custom.createNamespacedCustomObject({
    ...crd(namespace, 'models'),
    body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'Model', metadata: { name: MODEL }, spec: {} },
  })
  // FlexInfer owns the Model's status; here the demo plays it, through the status subresource.
  const model = (await custom.getNamespacedCustomObject({ ...crd(namespace, 'models'), name: MODEL })) as object
  await custom.replaceNamespacedCustomObjectStatus({
    ...crd(namespace, 'models'),
    name: MODEL,
    body: { ...model, status: { phase: 'Ready', gpu: { node } } },
  })
  await batch.createNamespacedCronJob({
    namespace,
    body: {
      metadata: { name: TEMPLATE },
      spec: {
        schedule: '0 3 * * *',
        suspend: true,
        jobTemplate: {
          spec: {
            backoffLimit: 0,
            template: {
              spec: {
                restartPolicy: 'Never',
                containers: [{ name: 'eval', image: 'busybox', command: ['sh', '-c', 'echo running evals'] }],
              },
            },
          },
        },
      },
    },
  })
  await custom.createNamespacedCustomObject({
    ...crd(namespace, 'modelbackfills'),
    body: {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'ModelBackfill',
      metadata: { name: BACKFILL },
      spec: {
        modelRef: MODEL,
        templateRef: TEMPLATE,
        idleFor: `${IDLE_FOR_S}s`,
        maxRunDuration: '10m',
        repeatAfter: '1m',
        env: { EVAL_SUITE: 'mmlu' },
      },
    },
  })
}

/** There is no kubelet here: the demo plays it, marking the Job's pod Succeeded; the Job controller does the rest. */
async function finishJob(core: CoreV1Api, namespace: string, job: string) {
  const pods = await until(`pods of Job ${job}`, async () => {
    const list = await core.listNamespacedPod({ namespace, labelSelector: `job-name=${job}` })
    return list.items.length ? list.items : undefined
  })
  for (const pod of pods) {
    const now = new Date()
    await core.replaceNamespacedPodStatus({
      namespace,
      name: pod.metadata?.name as string,
      body: {
        ...pod,
        status: {
          ...pod.status,
          phase: 'Succeeded',
          containerStatuses: [
            {
              name: 'eval',
              image: 'busybox',
              imageID: '',
              ready: false,
              restartCount: 0,
              state: { terminated: { exitCode: 0, startedAt: now, finishedAt: now } },
            },
          ],
        },
      },
    })
  }
}

/** .testenv: reused when every server is alive, else (re)started detached, as `npm run env:up` does. */
async function localEnvironment(print: (line: string) => void) {
  const dir = join(repoRoot, '.testenv')
  const existing = await readEnvironmentInfo(dir)
  if (existing?.processes.every((p) => belongsTo(p.pid, existing.dir))) {
    print(`Using the local environment already up in ${relative(process.cwd(), dir) || dir}.`)
    return { info: existing, started: false }
  }
  if (existing) await stopEnvironment(existing)
  if (existsSync(dir)) await rm(dir, { recursive: true, force: true })
  print('Starting the local environment (etcd, kube-apiserver, kube-controller-manager, nats-server)…')
  const info = await startEnvironment({ dir, detached: true, log: (line) => print(`  ${line}`) })
  return { info, started: true }
}

async function main() {
  const ci = process.argv.includes('--ci') || process.env.CI === 'true' || process.env.CI === '1'
  const print = (line: string) => console.log(line)
  const { info, started } = await localEnvironment(print)
  const environment: DemoEnvironment = { ...info, logsDir: join(info.dir, 'logs') }
  let run: DemoRun | undefined
  try {
    run = await runDemo({ ci, environment, print, engine: !process.argv.includes('--no-engine') })
  } finally {
    if (ci || !run) {
      await run?.stop()
      if (ci && started) await stopEnvironment(info)
    }
  }
  if (ci) return
  const rel = (p: string) => relative(process.cwd(), p) || p
  const { namespace, backfill, nextRunTime } = run.summary
  print(`
The functions keep running (the backfill repeats at ${nextRunTime ?? 'its next run time'}); the environment stays up.
Try, in another terminal:
  . ${rel(info.envShPath)}
  kubectl -n ${namespace} get mbf -w
  kubectl -n ${namespace} describe mbf ${backfill}
  nats kv get ${BUCKET_BACKFILLS} ${backfillKey(namespace, backfill)}
  curl -s ${run.metricsUrl} | grep flexinfer_model_backfill
Function logs: ${rel(join(info.dir, 'logs', `demo-${namespace}.log`))}
Ctrl-C stops the functions; \`npm run env:down\` stops the environment.`)
  const current = run
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve)
    process.once('SIGTERM', resolve)
  })
  await current.stop()
}

if (process.argv[1] && import.meta.url === `file://${process.argv[1]}`) {
  main()
    .then(() => process.exit(0))
    .catch((err) => {
      console.error(err instanceof Error ? (err.stack ?? err.message) : err)
      process.exit(1)
    })
}
