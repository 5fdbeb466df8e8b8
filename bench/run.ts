// `npm run bench`: measures the system against its goals on the real servers (its own environment, loopback
// only, every loop bounded). Prints progress, then one JSON object on the last line (also written to
// bench/results/latest.json). Goals: preemption p99 ≤ 30 ms with 100 models under 5,000 foreground events/s,
// admission lateness p99 ≤ 250 ms, ≥ 50,000 events/s ingested by one demand instance, 0 API-server requests
// per non-cancelling foreground request, ≤ 4 KV writes per model per second. Also measured, with no goal: admission
// on the knative overlay's path (timer → bridge → a Broker stand-in → admit served over HTTP).
import { spawn } from 'node:child_process'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { BatchV1Api, CoreV1Api, KubeConfig, makeInformer, type V1Job } from '@kubernetes/client-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { connect } from '@nats-io/transport-node'
import { parseDuration } from '../core/duration.js'
import { backfillKey, jobName } from '../core/names.js'
import type { BackfillState } from '../core/state.js'
import { BUCKET_BACKFILLS, BUCKET_MODEL_IDLE, STREAM_FOREGROUND } from '../events/catalog.js'
import { encode } from '../events/codec.js'
import { type Runner, startRunner } from '../runtime/runner.js'
import { repoRoot } from '../test/env/binaries.js'
import { startEnvironment } from '../test/env/environment.js'
import { BackfillWorld, waitUntil } from '../test/integration/support/backfill-world.js'

const MODELS = Number(process.env.BENCH_MODELS ?? 100)
const LOAD_RATE = Number(process.env.BENCH_RATE ?? 5000)
const INGEST_EVENTS = Number(process.env.BENCH_INGEST ?? 200_000)
// Long enough that creating the declarations (a burst of API writes) is over before their windows end: the
// lateness measured is the timer → admission path, not the set-up.
const IDLE_FOR = '15s'
/** How the knative path's Broker hop is made (bench/knative-path.ts): Knative's real Broker, or a stand-in. */
const KNATIVE_PATH = process.env.BENCH_KNATIVE ?? 'broker'
const log = (line: string) => process.stderr.write(`[bench] ${line}\n`)
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

function percentile(values: number[], p: number): number {
  if (!values.length) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const index = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)
  return Math.round((sorted[Math.max(0, index)] as number) * 10) / 10
}

const environment = await startEnvironment({ log: (l) => log(l) })
const results: Record<string, number | string> = { models: MODELS, load_events_per_s: LOAD_RATE }
const runners: Runner[] = []
/** Child processes and servers to stop however the run ends (each stop is safe to call twice). */
const cleanup: (() => Promise<void>)[] = []
try {
  const kc = new KubeConfig()
  kc.loadFromFile(environment.kubeconfigPath)
  const namespace = 'bench'
  const core = kc.makeApiClient(CoreV1Api)
  await core.createNamespace({ body: { metadata: { name: namespace } } })
  await waitUntil('default ServiceAccount', async () =>
    core.readNamespacedServiceAccount({ name: 'default', namespace }).then(
      () => true,
      () => undefined,
    ),
  )
  const nc = await connect({ servers: environment.natsUrl, name: 'bench' })
  const js = jetstream(nc)
  const jsm = await jetstreamManager(nc)
  const world = new BackfillWorld(kc, namespace, nc)

  // The rest (source, lifecycle; admit until step 2) in this process.
  runners.push(
    await startRunner({
      natsUrl: environment.natsUrl,
      kubeconfig: kc,
      watch: true,
      functions: ['source', 'lifecycle'],
    }),
  )
  const admitOnJetStream = await startRunner({ natsUrl: environment.natsUrl, kubeconfig: kc, functions: ['admit'] })
  runners.push(admitOnJetStream)
  // As deployed (one Deployment or Knative Service each): demand and cancel in processes of their own.
  const preemptionPath: (() => Promise<void>)[] = []
  for (const fn of ['demand', 'cancel']) {
    const child = spawn(process.execPath, ['--import', 'tsx', join(repoRoot, 'runtime/main.ts')], {
      env: {
        ...process.env,
        NATS_URL: environment.natsUrl,
        KUBECONFIG: environment.kubeconfigPath,
        FUNCTION: fn,
        PORT: '0',
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'inherit', 'inherit'],
    })
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
    const stop = async () => {
      if (child.exitCode === null) child.kill('SIGTERM')
      await exited
    }
    preemptionPath.push(stop)
    cleanup.push(stop)
  }
  // "Job DELETE accepted by the apiserver": the first watch event showing the Job's deletionTimestamp (or its
  // removal); the watch's own delivery delay (a few ms on loopback) is included, so this errs high.
  const deletedAt = new Map<string, number>()
  const jobs = makeInformer(kc, '/apis/batch/v1/namespaces/bench/jobs', () =>
    kc.makeApiClient(BatchV1Api).listNamespacedJob({ namespace }),
  )
  const seen = (job: V1Job) => {
    const name = job.metadata?.name
    if (name && (job.metadata?.deletionTimestamp || !deletedAt.has(name))) {
      if (job.metadata?.deletionTimestamp && !deletedAt.has(name)) deletedAt.set(name, Date.now())
    }
  }
  jobs.on('update', seen)
  jobs.on('delete', (job) => {
    const name = job.metadata?.name
    if (name && !deletedAt.has(name)) deletedAt.set(name, Date.now())
  })
  await jobs.start()

  /** bench/knative-path.ts in a process of its own; resolves once it is ready. */
  async function startKnativeAdmit() {
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(repoRoot, 'bench/knative-path.ts'),
        environment.natsUrl,
        environment.kubeconfigPath,
        // broker (default): through Knative Eventing's real Broker; stand-in: our own hops only.
        KNATIVE_PATH,
      ],
      { env: { ...process.env, LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'inherit'] },
    )
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
    let out = ''
    child.stdout.on('data', (d) => {
      out += d
    })
    await waitUntil(
      'the knative path ready',
      async () => {
        if (child.exitCode !== null) throw new Error(`bench/knative-path.ts exited ${child.exitCode}`)
        return out.includes('"ready":true') ? true : undefined
      },
      180_000, // the real Broker: Knative's components start and reconcile first
    )
    return {
      async stop() {
        if (child.exitCode === null) child.kill('SIGTERM')
        await exited
      },
    }
  }

  // 1. Admission lateness: MODELS quiet models, one backfill each, all admitted by their timers.
  log(`creating ${MODELS} models and backfills (idleFor ${IDLE_FOR})`)
  await world.template('bench-tpl')
  for (let i = 0; i < MODELS; i++) await world.model(`m-${i}`, { node: `node-${i}` })
  for (let i = 0; i < MODELS; i++)
    await world.backfill(`b-${i}`, { modelRef: `m-${i}`, templateRef: 'bench-tpl', idleFor: IDLE_FOR })
  // Polled gently (one KV handle, once a second): the benchmark must not load the process it measures.
  const states = await new Kvm(nc).open(BUCKET_BACKFILLS)
  const stateOf = async (i: number) => {
    const entry = await states.get(backfillKey(namespace, `b-${i}`))
    return entry?.operation === 'PUT' ? entry.json<BackfillState>() : null
  }
  const pollAll = async <T>(what: string, check: (s: BackfillState | null) => T | undefined): Promise<T[]> => {
    const deadline = Date.now() + 120_000
    for (;;) {
      const out: T[] = []
      for (let i = 0; i < MODELS; i++) {
        const value = check(await stateOf(i))
        if (value === undefined) break
        out.push(value)
      }
      if (out.length === MODELS) return out
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
      await sleep(1000)
    }
  }
  const lateness = await pollAll(`all ${MODELS} backfills admitted`, (s) =>
    s?.startedAt && s.idleSince && s.attempts >= 1
      ? Date.parse(s.startedAt) - (Date.parse(s.idleSince) + parseDuration(IDLE_FOR))
      : undefined,
  )
  results.admission_lateness_ms_p50 = percentile(lateness, 50)
  results.admission_lateness_ms_p99 = percentile(lateness, 99)
  log(`admission lateness p50 ${results.admission_lateness_ms_p50} ms, p99 ${results.admission_lateness_ms_p99} ms`)
  await pollAll('all Running', (s) => (s?.phase === 'Running' ? true : undefined))

  // From here on admit runs as under Knative (bench/knative-path.ts): served over HTTP, its timers and admit requests
  // pulled by the bridge and POSTed to a Broker stand-in that routes by type as the Triggers do. Knative's own
  // Broker and channel dispatch are not in the number (there is no Knative here): it is the cost of our hops.
  // Preemption stays on JetStream, as in that overlay.
  await admitOnJetStream.stop()
  runners.splice(runners.indexOf(admitOnJetStream), 1)
  const knativePath = await startKnativeAdmit()
  cleanup.push(() => knativePath.stop())

  /** A separate process publishing `rate` foreground events/s for MODELS other models, for `seconds`. */
  const startLoad = (rate: number, seconds: number) => {
    const load = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(repoRoot, 'bench/load.ts'),
        environment.natsUrl,
        namespace,
        'busy',
        String(MODELS),
        String(rate),
        String(seconds),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    let out = ''
    load.stdout.on('data', (d) => {
      out += d
    })
    return new Promise<{ sent: number; seconds: number }>((resolve) =>
      load.on('exit', () => resolve(JSON.parse(out.trim() || '{"sent":0,"seconds":1}'))),
    )
  }
  /** Each running attempt preempted in turn by one foreground request: published → its Job's DELETE seen. */
  const preemptAll = async (attempt: number) => {
    const samples: number[] = []
    for (let i = 0; i < MODELS; i++) {
      const job = jobName(`b-${i}`, attempt)
      const sentAt = Date.now()
      await js.publish(
        'flexinfer.events.foreground.request',
        encode('ai.flexinfer.foreground.request', { namespace, model: `m-${i}` }),
      )
      const done = await waitUntil(`delete of ${job}`, async () => deletedAt.get(job), 10_000).catch(() => undefined)
      if (done !== undefined) samples.push(done - sentAt)
      await sleep(40)
    }
    return samples
  }
  const loadSeconds = Math.ceil((MODELS * 80) / 1000) + 4

  // 2. Preemption under load: a separate process floods other models with LOAD_RATE foreground events/s while
  // each of the MODELS running attempts is preempted by one foreground request, one after another.
  log(`load: ${LOAD_RATE} foreground events/s on ${MODELS} other models for ${loadSeconds}s`)
  const idleStream = `KV_${BUCKET_MODEL_IDLE}`
  const loadDone = startLoad(LOAD_RATE, loadSeconds)
  await sleep(1500)
  const kvBefore = (await jsm.streams.info(idleStream)).state.last_seq
  const kvFrom = Date.now()
  const preemption = await preemptAll(1)
  const kvAfter = (await jsm.streams.info(idleStream)).state.last_seq
  const kvSeconds = (Date.now() - kvFrom) / 1000
  const loadResult = await loadDone
  results.preemption_samples = preemption.length
  results.preemption_ms_p50 = percentile(preemption, 50)
  results.preemption_ms_p99 = percentile(preemption, 99)
  results.load_events_sent = loadResult.sent
  results.load_events_per_s_achieved = Math.round(loadResult.sent / loadResult.seconds)
  // Writes to the idle bucket by the load (2×MODELS models were written: the flooded ones and the preempted ones).
  results.kv_writes_per_model_per_s = Math.round(((kvAfter - kvBefore) / MODELS / kvSeconds) * 100) / 100
  log(
    `preemption p50 ${results.preemption_ms_p50} ms, p99 ${results.preemption_ms_p99} ms (${preemption.length} samples)`,
  )
  // 2b. Admission on the knative overlay's path (switched over after step 1, below): every backfill's second
  // attempt, admitted after the window that followed its preemption.
  await pollAll('all Running again', (s) => (s?.phase === 'Running' && s.attempts >= 2 ? true : undefined))
  const bridged = await pollAll('second attempts admitted', (s) =>
    s?.startedAt && s.idleSince && s.attempts >= 2
      ? Date.parse(s.startedAt) - (Date.parse(s.idleSince) + parseDuration(IDLE_FOR))
      : undefined,
  )
  results.knative_path_admission_lateness_ms_p50 = percentile(bridged, 50)
  results.knative_path_admission_lateness_ms_p99 = percentile(bridged, 99)
  results.knative_path_broker = KNATIVE_PATH
  log(
    `knative path admission lateness p50 ${results.knative_path_admission_lateness_ms_p50} ms, p99 ${results.knative_path_admission_lateness_ms_p99} ms`,
  )
  await knativePath.stop()
  for (const stop of preemptionPath) await stop()
  await jobs.stop()
  for (const r of runners.splice(0)) await r.stop()

  // 3. Ingestion: one demand instance alone drains a backlog of foreground events for models with no attempt.
  log(`ingest: publishing ${INGEST_EVENTS} foreground events for 1000 models`)
  // A fresh consumer (demand's starts from new messages): what the loads above left unconsumed is not the backlog.
  await jsm.consumers.delete(STREAM_FOREGROUND, 'demand-foreground').catch(() => {})
  const demandOnly = await startRunner({ natsUrl: environment.natsUrl, kubeconfig: kc, functions: ['demand'] })
  await demandOnly.stop() // the durable consumer exists now; the backlog accumulates while nothing consumes it
  for (let sent = 0; sent < INGEST_EVENTS; ) {
    const batch = []
    for (let i = 0; i < 2000 && sent < INGEST_EVENTS; i++, sent++) {
      batch.push(
        js.publish(
          'flexinfer.events.foreground.request',
          encode('ai.flexinfer.foreground.request', { namespace, model: `ingest-${sent % 1000}` }),
        ),
      )
    }
    await Promise.all(batch)
  }
  const ingest = await startRunner({ natsUrl: environment.natsUrl, kubeconfig: kc, functions: ['demand'] })
  runners.push(ingest)
  const t0 = performance.now()
  await waitUntil(
    'backlog drained',
    async () => {
      const info = await jsm.consumers.info(STREAM_FOREGROUND, 'demand-foreground')
      return info.num_pending === 0 && info.num_ack_pending === 0 ? true : undefined
    },
    300_000,
  )
  const drainMs = performance.now() - t0
  const ingestRequests = ingest.deps.kube.requests
  results.ingest_events_per_s = Math.round(INGEST_EVENTS / (drainMs / 1000))
  results.apiserver_requests_per_fg_request =
    (ingestRequests.read + ingestRequests.list + ingestRequests.write) / INGEST_EVENTS
  log(
    `ingest ${results.ingest_events_per_s} events/s; ${results.apiserver_requests_per_fg_request} API requests per event`,
  )
  for (const r of runners.splice(0)) await r.stop()
  await nc.close()
} finally {
  for (const stop of cleanup) await stop().catch(() => {})
  for (const r of runners) await r.stop().catch(() => {})
  await environment.stop()
}

const goals = {
  preemption_ms_p99: (v: number) => v <= 30,
  admission_lateness_ms_p99: (v: number) => v <= 250,
  ingest_events_per_s: (v: number) => v >= 50_000,
  apiserver_requests_per_fg_request: (v: number) => v === 0,
  kv_writes_per_model_per_s: (v: number) => v <= 4,
}
results.goals_met = Object.entries(goals)
  .filter(([k, ok]) => ok(results[k] as number))
  .map(([k]) => k)
  .join(',')
await mkdir(join(repoRoot, 'bench/results'), { recursive: true })
await writeFile(join(repoRoot, 'bench/results/latest.json'), `${JSON.stringify(results, null, 2)}\n`)
process.stdout.write(`${JSON.stringify(results)}\n`)
// Client libraries may keep sockets half-open after close; the run is over.
process.exit(0)
