// `npm run bench` (`npm run bench:quick`: a short variant, numbers not comparable): measures the system against its
// goals on the real servers (its own environment, loopback only, every loop bounded). Logs go to
// dev/bench/results/bench.log; one JSON object on the last line of stdout (also dev/bench/results/latest.json). Goals:
// preemption to the pods p50 ≤ 10 / p99 ≤ 30 ms under 5,000 foreground events/s, a burst of 500 preemptions all
// pods deleted p99 ≤ 1 s, admission lateness p99 ≤ 50 ms, ≥ 100,000 events/s ingested by one demand instance, 0
// API-server requests per non-cancelling foreground request, ≤ 4 KV writes per model per second, cold start ≤ 500 ms
// and RSS ≤ 80 MB per function. Also measured, with no goal: admission on the knative overlay's path, and
// preemption through the FlexInfer reference controller's signal (Model.status.lastActiveTime PATCH) side by side with the NATS path.
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { existsSync, openSync, writeSync } from 'node:fs'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { CoreV1Api, CustomObjectsApi, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { connect } from '@nats-io/transport-node'
import { pino } from 'pino'
import { type Runner, startRunner } from '../../cmd/manager/runner.js'
import { BUCKET_BACKFILLS, BUCKET_MODEL_IDLE, STREAM_FOREGROUND } from '../../events/catalog.js'
import { encode } from '../../events/codec.js'
import { GROUP, VERSION } from '../../pkg/core/api.js'
import { parseDuration } from '../../pkg/core/duration.js'
import { backfillKey, jobName } from '../../pkg/core/names.js'
import type { BackfillState } from '../../pkg/core/state.js'
import { createLogger } from '../../pkg/observability/log.js'
import { repoRoot } from '../../test/env/binaries.js'
import { startEnvironment } from '../../test/env/environment.js'
import { inParallel } from '../../test/env/exec.js'
import { BackfillWorld, waitUntil } from '../../test/integration/support/backfill-world.js'
import { ENTRY as COLD_START_ENTRY, COLD_START_FUNCTIONS, measureColdStart } from './cold-start.js'
import { DeletionWatch } from './deletion-watch.js'
import { RemoteDeletionWatch } from './deletion-watch-process.js'
import { admissionLines, formatProfile, latenessProfile } from './lateness-profile.js'
import { percentile } from './percentile.js'
import { BENCH_LINE, formatHops, preemptionProfile } from './preemption-profile.js'
import { apiserverRequestsVia, formatCpu, formatRequests, phaseSpend } from './scale/measure.js'

const QUICK = process.argv.includes('--quick') || process.env.BENCH_QUICK === '1'
/**
 * --node (BENCH_NODE=1; root, the machine's containerd): also preemption to the container on the real node, the
 * node test's measurement (test/integration/node/node.test.ts): foreground request → the Job's container received
 * SIGTERM, and → it exited. Run after everything else, in a process of its own (one node per machine).
 */
const NODE = process.argv.includes('--node') || process.env.BENCH_NODE === '1'
/** `npm run bench:lateness` (BENCH_ONLY=lateness): only step 1, the admission lateness, with admit's step profile. */
const LATENESS_ONLY = process.env.BENCH_ONLY === 'lateness'
/**
 * `npm run bench:preemption` (BENCH_ONLY=preemption): steps 1 and 2 only (the backfills admitted, then each preempted
 * under the load), with the per-hop profile (dev/bench/preemption-profile.ts). BENCH_RATE=0: no load.
 */
const PREEMPTION_ONLY = process.env.BENCH_ONLY === 'preemption'
/**
 * BENCH_ONLY=hot (`npm run bench:ab`, dev/bench/ab.ts): the hot-path steps only — 1, 2, the burst (2d) and the ingest (3),
 * admit on JetStream throughout; neither the knative path (2b), the status path (2c) nor the cold start (4:
 * dev/bench/ab.ts runs dev/bench/cold-start-run.ts for it).
 */
const HOT_ONLY = process.env.BENCH_ONLY === 'hot'
const ONLY = LATENESS_ONLY ? 'lateness' : PREEMPTION_ONLY ? 'preemption' : HOT_ONLY ? 'hot' : undefined
const MODELS = Number(process.env.BENCH_MODELS ?? (QUICK ? 20 : 100))
const LOAD_RATE = Number(process.env.BENCH_RATE ?? (QUICK ? 2000 : 5000))
const INGEST_EVENTS = Number(process.env.BENCH_INGEST ?? (QUICK ? 30_000 : 200_000))
/** Running attempts preempted at once by the burst (one foreground request per model, published together). */
const BURST = Number(process.env.BENCH_BURST ?? (QUICK ? 50 : 500))
// Long enough that creating the declarations (a burst of API writes) is over before their windows end: the
// lateness measured is the timer → admission path, not the set-up.
const IDLE_FOR = '15s'
const LOG_PATH = join(repoRoot, 'dev/bench/results/bench.log')
await mkdir(join(repoRoot, 'dev/bench/results'), { recursive: true })
/** Everything but the result goes to the log file: the bench's progress, the servers', the functions'. */
const logFd = openSync(LOG_PATH, 'w')
const log = (line: string) => writeSync(logFd, `[bench ${new Date().toISOString()}] ${line}\n`)
process.stderr.write(`[bench] ${QUICK ? 'quick run; ' : ''}log: ${LOG_PATH}\n`)
const runnerLog = createLogger('bench-runners', pino.destination({ fd: logFd, sync: false }))
/**
 * How the knative path's Broker hop is made (dev/bench/knative-path.ts): Knative's real Broker, or a stand-in; `none`
 * (BENCH_ONLY=preemption only): admit stays on JetStream, no Knative processes at all.
 */
const KNATIVE_PATH = process.env.BENCH_KNATIVE ?? 'broker'
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const environment = await startEnvironment({ log: (l) => log(l) })
log(
  `environment up; load average ${(await import('node:os'))
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')}`,
)
const results: Record<string, number | string | boolean> = {
  quick: QUICK,
  models: MODELS,
  load_events_per_s: LOAD_RATE,
}
const runners: Runner[] = []
/** Child processes and servers to stop however the run ends (each stop is safe to call twice). */
const cleanup: (() => Promise<void>)[] = []
// biome-ignore lint/suspicious/noConfusingLabels: BENCH_ONLY=lateness leaves after step 1, =preemption after step 2, =hot before step 4 (`break run`)
run: try {
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
      logger: runnerLog,
    }),
  )
  const admitOnJetStream = await startRunner({
    natsUrl: environment.natsUrl,
    kubeconfig: kc,
    functions: ['admit'],
    logger: runnerLog,
  })
  runners.push(admitOnJetStream)
  // As deployed (one Deployment or Knative Service each): demand and cancel in processes of their own.
  const preemptionPath: (() => Promise<void>)[] = []
  /**
   * The benchmark's processes by pid, for where a phase's CPU went: this one (source, lifecycle, and admit until
   * step 2), demand, cancel, admit on the knative path, the load generator.
   */
  const named = new Map<number, string>([[process.pid, 'bench']])
  /** apiserver_request_total by verb (its own /metrics; every client). */
  const apiserverRequests = apiserverRequestsVia(environment.binaries.kubectl, environment.kubeconfigPath)
  const phase = (name: string) => {
    const spend = phaseSpend(apiserverRequests, (pid, comm) => named.get(pid) ?? comm)
    return {
      begin: spend.begin,
      /** → `<name>_wall_s`, `<name>_cpu_s_<process>`, `<name>_apiserver_requests`, and a log line. */
      end() {
        const spent = spend.end()
        if (!spent) return
        results[`${name}_wall_s`] = spent.wallS
        for (const [label, v] of Object.entries(spent.cpu)) results[`${name}_cpu_s_${label}`] = v
        results[`${name}_apiserver_requests`] = formatRequests(spent.requests)
        log(
          `${name}: ${spent.wallS} s wall, ${formatCpu(spent.cpu)}; apiserver requests ${formatRequests(spent.requests)}`,
        )
      },
    }
  }
  for (const fn of ['demand', 'cancel']) {
    // BENCH_NODE_FLAGS_DEMAND / _CANCEL: Node and V8 flags for that function's process only (GC flags, say; many
    // are refused in NODE_OPTIONS).
    const flags = (process.env[`BENCH_NODE_FLAGS_${fn.toUpperCase()}`] ?? '').split(' ').filter(Boolean)
    const child = spawn(process.execPath, [...flags, '--import', 'tsx', join(repoRoot, 'cmd/manager/main.ts')], {
      env: {
        ...process.env,
        NATS_URL: environment.natsUrl,
        KUBECONFIG: environment.kubeconfigPath,
        FUNCTION: fn,
        PORT: '0',
        // cancel's lines carry each preemption's timings, demand's debug line (one per cancel it publishes) its
        // hops (the log is a file; dev/bench/preemption-profile.ts).
        LOG_LEVEL: fn === 'cancel' ? 'info' : 'debug',
      },
      stdio: ['ignore', logFd, logFd],
    })
    if (child.pid) named.set(child.pid, fn)
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
    const stop = async () => {
      if (child.exitCode === null) child.kill('SIGTERM')
      await exited
    }
    preemptionPath.push(stop)
    cleanup.push(stop)
  }
  // "Job DELETE accepted by the apiserver" and "preemption to the pod", on watches (dev/bench/deletion-watch.ts).
  // In a process of its own (default; BENCH_WATCH=inline: in this one, as before 2026-12-01 evening).
  const watch =
    process.env.BENCH_WATCH === 'inline'
      ? await DeletionWatch.start(kc, namespace)
      : await RemoteDeletionWatch.start(repoRoot, environment.kubeconfigPath, namespace, logFd)
  cleanup.push(() => watch.stop())
  const deletedAt = watch.jobDeletedAt
  const podsNow = (job: string) => watch.podsNow(job)
  const allDeletedAt = (names: string[]) => watch.podsDeletedAt(names)
  /** Write requests the apiserver has served so far (all clients: its own /metrics, apiserver_request_total). */
  const apiserverWrites = () => {
    const byVerb = apiserverRequests()
    return ['POST', 'PUT', 'PATCH', 'DELETE', 'DELETECOLLECTION', 'APPLY'].reduce((sum, v) => sum + (byVerb[v] ?? 0), 0)
  }
  const custom = kc.makeApiClient(CustomObjectsApi)
  const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch)

  /** dev/bench/knative-path.ts in a process of its own; resolves once it is ready. */
  async function startKnativeAdmit() {
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(repoRoot, 'dev/bench/knative-path.ts'),
        environment.natsUrl,
        environment.kubeconfigPath,
        // broker (default): through Knative Eventing's real Broker; stand-in: our own hops only.
        KNATIVE_PATH,
      ],
      { env: { ...process.env, LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', logFd] },
    )
    if (child.pid) named.set(child.pid, 'admit')
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
    let out = ''
    child.stdout?.on('data', (d) => {
      out += d
    })
    await waitUntil(
      'the knative path ready',
      async () => {
        if (child.exitCode !== null) throw new Error(`dev/bench/knative-path.ts exited ${child.exitCode}`)
        return out.includes('"ready":true') ? true : undefined
      },
      180_000, // the real Broker: Knative's components start and reconcile first
    )
    return {
      // Bounded: its graceful stop once hung for minutes after Knative's processes were gone (load ~23).
      async stop() {
        if (child.exitCode === null) child.kill('SIGTERM')
        await Promise.race([exited, sleep(15_000)])
        if (child.exitCode === null && child.signalCode === null) {
          log('dev/bench/knative-path.ts did not stop within 15 s: killed')
          child.kill('SIGKILL')
        }
        await exited
      },
    }
  }

  // 1. Admission lateness: MODELS quiet models, one backfill each, all admitted by their timers.
  // How late this process's event loop runs (admit, source and lifecycle share it): part of every step's time.
  const loopDelay = (await import('node:perf_hooks')).monitorEventLoopDelay({ resolution: 5 })
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
  loopDelay.enable()
  const lateness = await pollAll(`all ${MODELS} backfills admitted`, (s) =>
    s?.startedAt && s.idleSince && s.attempts >= 1
      ? Date.parse(s.startedAt) - (Date.parse(s.idleSince) + parseDuration(IDLE_FOR))
      : undefined,
  )
  results.admission_lateness_ms_p50 = percentile(lateness, 50)
  results.admission_lateness_ms_p99 = percentile(lateness, 99)
  loopDelay.disable()
  results.admission_event_loop_delay_ms_p99 = Math.round(loopDelay.percentile(99) / 1e5) / 10
  results.admission_event_loop_delay_ms_max = Math.round(loopDelay.max / 1e5) / 10
  log(`admission lateness p50 ${results.admission_lateness_ms_p50} ms, p99 ${results.admission_lateness_ms_p99} ms`)
  if (LATENESS_ONLY) {
    await new Promise((r) => runnerLog.flush(r))
    const { readFile } = await import('node:fs/promises')
    // admit logs an admission's line once its bookkeeping (Event, status) is done, in a lane after startedAt.
    let text = await readFile(LOG_PATH, 'utf8')
    for (let i = 0; i < 30 && admissionLines(text) < MODELS; i++) {
      await sleep(1000)
      await new Promise((r) => runnerLog.flush(r))
      text = await readFile(LOG_PATH, 'utf8')
    }
    const profile = latenessProfile(text)
    log(`admission profile (ms):\n${formatProfile(profile)}`)
    for (const r of profile) {
      results[`admission_step_ms_${r.step}_p50`] = r.p50
      results[`admission_step_ms_${r.step}_p99`] = r.p99
    }
    await nc.close()
    break run
  }
  await pollAll('all Running', (s) => (s?.phase === 'Running' ? true : undefined))

  // From here on admit runs as under Knative (dev/bench/knative-path.ts): served over HTTP, its timers and admit requests
  // pulled by the bridge and POSTed to a Broker stand-in that routes by type as the Triggers do. Knative's own
  // Broker and channel dispatch are not in the number (there is no Knative here): it is the cost of our hops.
  // Preemption stays on JetStream, as in that overlay.
  const noKnative = (PREEMPTION_ONLY && KNATIVE_PATH === 'none') || HOT_ONLY
  if (!noKnative) {
    await admitOnJetStream.stop()
    runners.splice(runners.indexOf(admitOnJetStream), 1)
  }
  const knativePath = noKnative ? { stop: async () => {} } : await startKnativeAdmit()
  cleanup.push(() => knativePath.stop())

  /** A separate process publishing `rate` foreground events/s for MODELS other models, for `seconds`. */
  const startLoad = (rate: number, seconds: number) => {
    if (rate <= 0) return Promise.resolve({ sent: 0, seconds })
    const load = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(repoRoot, 'dev/bench/load.ts'),
        environment.natsUrl,
        namespace,
        'busy',
        String(MODELS),
        String(rate),
        String(seconds),
      ],
      { stdio: ['ignore', 'pipe', logFd] },
    )
    if (load.pid) named.set(load.pid, 'load')
    let out = ''
    load.stdout?.on('data', (d) => {
      out += d
    })
    return new Promise<{ sent: number; seconds: number }>((resolve) =>
      load.on('exit', () => resolve(JSON.parse(out.trim() || '{"sent":0,"seconds":1}'))),
    )
  }
  /**
   * Each running attempt preempted in turn, one after another: by a foreground request on NATS (`nats`), or as the
   * reference learns of demand, by a PATCH of the Model's status.lastActiveTime (`status`: the watch, source,
   * lifecycle, then cancel). Measured from the publish (PATCH sent) to the Job's DELETE seen and to every pod of the
   * attempt deleted.
   */
  const preemptAll = async (attempt: number, via: 'nats' | 'status') => {
    const jobMs: number[] = []
    const podMs: number[] = []
    for (let i = 0; i < MODELS; i++) {
      const job = jobName(`b-${i}`, attempt)
      const known = await podsNow(job)
      const sentAt = Date.now()
      let ackedAt: number | undefined
      if (via === 'nats') {
        await js.publish(
          'flexinfer.events.foreground.request',
          encode('ai.flexinfer.foreground.request', { namespace, model: `m-${i}` }),
        )
        ackedAt = Date.now()
      } else {
        await custom.patchNamespacedCustomObjectStatus(
          {
            group: GROUP,
            version: VERSION,
            namespace,
            plural: 'models',
            name: `m-${i}`,
            body: { status: { lastActiveTime: new Date(sentAt).toISOString() } },
          },
          mergePatch,
        )
      }
      await waitUntil(
        `preemption of ${job}`,
        async () => (deletedAt.has(job) && (!known.length || allDeletedAt(known)) ? true : undefined),
        10_000,
      ).catch(() => log(`${via}: ${job} not deleted within 10 s`))
      const jobAt = deletedAt.get(job)
      const podAt = allDeletedAt(known)
      if (jobAt !== undefined) jobMs.push(jobAt - sentAt)
      if (podAt !== undefined) podMs.push(podAt - sentAt)
      // The hops of the NATS path are joined with demand's and cancel's lines by the Job's name.
      if (via === 'nats') {
        const t = { sent: sentAt, acked: ackedAt, jobSeen: jobAt, podsSeen: podAt }
        writeSync(logFd, `${JSON.stringify({ msg: BENCH_LINE, job, pods: known.length, t })}\n`)
      }
      await sleep(40)
    }
    return { jobMs, podMs }
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
  const writesBefore = apiserverWrites()
  const preemptionSpend = phase('preemption')
  preemptionSpend.begin()
  const nats = await preemptAll(1, 'nats')
  preemptionSpend.end()
  const writesNats = apiserverWrites() - writesBefore
  const preemption = nats.jobMs
  const kvAfter = (await jsm.streams.info(idleStream)).state.last_seq
  const kvSeconds = (Date.now() - kvFrom) / 1000
  const loadResult = await loadDone
  results.preemption_samples = preemption.length
  results.preemption_ms_p50 = percentile(preemption, 50)
  results.preemption_ms_p99 = percentile(preemption, 99)
  results.preemption_job_ms_p50 = percentile(nats.jobMs, 50)
  results.preemption_job_ms_p99 = percentile(nats.jobMs, 99)
  results.preemption_pod_ms_p50 = percentile(nats.podMs, 50)
  results.preemption_pod_ms_p99 = percentile(nats.podMs, 99)
  results.preemption_pod_samples = nats.podMs.length
  // The whole cascade counted (our functions, the Job controller, the GC), per preempting request.
  results.apiserver_writes_per_fg_request_nats_path = Math.round((writesNats / MODELS) * 10) / 10
  results.load_events_sent = loadResult.sent
  results.load_events_per_s_achieved = Math.round(loadResult.sent / loadResult.seconds)
  // Writes to the idle bucket by the load (2×MODELS models were written: the flooded ones and the preempted ones).
  results.kv_writes_per_model_per_s = Math.round(((kvAfter - kvBefore) / MODELS / kvSeconds) * 100) / 100
  log(
    `preemption: Job p50 ${results.preemption_job_ms_p50} / p99 ${results.preemption_job_ms_p99} ms, pods p50 ${results.preemption_pod_ms_p50} / p99 ${results.preemption_pod_ms_p99} ms (${preemption.length} samples)`,
  )
  {
    // Where each preemption's milliseconds went (the functions' lines are in the log by now: they come first).
    await new Promise((r) => runnerLog.flush(r))
    const { readFile } = await import('node:fs/promises')
    const { rows, vias } = preemptionProfile(await readFile(LOG_PATH, 'utf8'))
    log(`preemption hops (ms; demand's cancel via ${JSON.stringify(vias)}):\n${formatHops(rows)}`)
    for (const r of rows) {
      results[`preemption_hop_ms_${r.hop}_p50`] = r.p50
      results[`preemption_hop_ms_${r.hop}_p99`] = r.p99
    }
    for (const [via, n] of Object.entries(vias)) results[`preemption_demand_cancel_via_${via}`] = n
  }
  if (PREEMPTION_ONLY) {
    results.preemption_knative = KNATIVE_PATH
    results.preemption_cancel_delete_pods = process.env.CANCEL_DELETE_PODS !== 'false'
    results.preemption_watch = process.env.BENCH_WATCH === 'inline' ? 'inline' : 'process'
    await knativePath.stop()
    await nc.close()
    break run
  }
  if (!HOT_ONLY) {
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

    // 2c. The reference's signal, side by side under the same load: each second attempt preempted by a PATCH of its
    // Model's status.lastActiveTime (what the FlexInfer reference controller's gateway writes), through the watch → source → lifecycle →
    // cancel. The apiserver writes counted include the PATCH itself: one per foreground request, cancelling or not.
    log(`status path: ${MODELS} preemptions by Model.status.lastActiveTime under ${LOAD_RATE} events/s`)
    const statusLoad = startLoad(LOAD_RATE, loadSeconds)
    await sleep(1500)
    const statusWritesBefore = apiserverWrites()
    const statusPath = await preemptAll(2, 'status')
    const statusWrites = apiserverWrites() - statusWritesBefore
    await statusLoad
    results.status_path_preemption_job_ms_p50 = percentile(statusPath.jobMs, 50)
    results.status_path_preemption_job_ms_p99 = percentile(statusPath.jobMs, 99)
    results.status_path_preemption_pod_ms_p50 = percentile(statusPath.podMs, 50)
    results.status_path_preemption_pod_ms_p99 = percentile(statusPath.podMs, 99)
    results.status_path_to_nats_path_p99_ratio =
      Math.round(
        ((results.status_path_preemption_pod_ms_p99 as number) / (results.preemption_pod_ms_p99 as number)) * 10,
      ) / 10
    results.apiserver_writes_per_fg_request_status_path = Math.round((statusWrites / MODELS) * 10) / 10
    log(
      `status path: pods p50 ${results.status_path_preemption_pod_ms_p50} / p99 ${results.status_path_preemption_pod_ms_p99} ms; ${results.apiserver_writes_per_fg_request_status_path} apiserver writes per request (NATS path ${results.apiserver_writes_per_fg_request_nats_path})`,
    )
  }

  // 2d. The burst: BURST more backfills on models of their own, all Running, then one foreground request per
  // model published at once (a traffic ramp, a gateway failover). Every Job DELETEd and every pod deleted.
  log(`burst: creating ${BURST} models and backfills`)
  await inParallel(BURST, 8, (i) => world.model(`burst-${i}`, { node: `burst-node-${i}` }))
  await inParallel(BURST, 8, (i) =>
    world.backfill(`burst-${i}`, { modelRef: `burst-${i}`, templateRef: 'bench-tpl', idleFor: '5s' }),
  )
  const burstJobs = Array.from({ length: BURST }, (_, i) => jobName(`burst-${i}`, 1))
  await waitUntil(
    `all ${BURST} burst backfills Running`,
    async () => {
      for (let i = 0; i < BURST; i++) {
        const entry = await states.get(backfillKey(namespace, `burst-${i}`))
        if (entry?.operation !== 'PUT' || entry.json<BackfillState>().phase !== 'Running') return undefined
      }
      return true
    },
    300_000,
  ).catch((err) => log(String(err)))
  const burstPods = new Map<string, string[]>()
  for (const job of burstJobs) burstPods.set(job, await podsNow(job))
  await sleep(2000)
  log(`burst: ${BURST} foreground requests at once`)
  const burstSpend = phase('burst')
  burstSpend.begin()
  const burstAt = Date.now()
  await Promise.all(
    Array.from({ length: BURST }, (_, i) =>
      js.publish(
        'flexinfer.events.foreground.request',
        encode('ai.flexinfer.foreground.request', { namespace, model: `burst-${i}` }),
      ),
    ),
  )
  await waitUntil(
    'every burst Job and pod deleted',
    async () =>
      burstJobs.every((j) => deletedAt.has(j) && allDeletedAt(burstPods.get(j) ?? []) !== undefined) ? true : undefined,
    60_000,
  ).catch((err) => log(String(err)))
  burstSpend.end()
  const burstJobMs = burstJobs.flatMap((j) => (deletedAt.has(j) ? [(deletedAt.get(j) as number) - burstAt] : []))
  const burstPodMs = burstJobs.flatMap((j) => {
    const at = allDeletedAt(burstPods.get(j) ?? [])
    return at === undefined ? [] : [at - burstAt]
  })
  results.burst_preemptions = BURST
  results.burst_preemption_job_ms_p50 = percentile(burstJobMs, 50)
  results.burst_preemption_job_ms_p99 = percentile(burstJobMs, 99)
  results.burst_preemption_pod_ms_p50 = percentile(burstPodMs, 50)
  results.burst_preemption_pod_ms_p99 = percentile(burstPodMs, 99)
  results.burst_preemption_pod_samples = burstPodMs.length
  log(
    `burst of ${BURST}: Jobs p50 ${results.burst_preemption_job_ms_p50} / p99 ${results.burst_preemption_job_ms_p99} ms, pods p50 ${results.burst_preemption_pod_ms_p50} / p99 ${results.burst_preemption_pod_ms_p99} ms (${burstPodMs.length} with pods)`,
  )

  await knativePath.stop()
  for (const stop of preemptionPath) await stop()
  await watch.stop()
  for (const r of runners.splice(0)) await r.stop()

  // 3. Ingestion: one demand instance alone drains a backlog of foreground events for models with no attempt.
  log(`ingest: publishing ${INGEST_EVENTS} foreground events for 1000 models`)
  // A fresh consumer (demand's starts from new messages): what the loads above left unconsumed is not the backlog.
  await jsm.consumers.delete(STREAM_FOREGROUND, 'demand-foreground').catch(() => {})
  const demandOnly = await startRunner({
    natsUrl: environment.natsUrl,
    kubeconfig: kc,
    functions: ['demand'],
    logger: runnerLog,
  })
  await demandOnly.stop() // the durable consumer exists now; the backlog accumulates while nothing consumes it
  // In batches of 500 acknowledged publishes, each retried on a timeout (a loaded machine answers slowly).
  const publishOnce = async (payload: string) => {
    for (let attempt = 0; ; attempt++) {
      try {
        return await js.publish('flexinfer.events.foreground.request', payload)
      } catch (err) {
        if (attempt >= 3) throw err
      }
    }
  }
  for (let sent = 0; sent < INGEST_EVENTS; ) {
    const batch = []
    for (let i = 0; i < 500 && sent < INGEST_EVENTS; i++, sent++) {
      batch.push(publishOnce(encode('ai.flexinfer.foreground.request', { namespace, model: `ingest-${sent % 1000}` })))
    }
    await Promise.all(batch)
  }
  const ingest = await startRunner({
    natsUrl: environment.natsUrl,
    kubeconfig: kc,
    functions: ['demand'],
    logger: runnerLog,
  })
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

  if (HOT_ONLY) {
    await nc.close()
    break run
  }
  // 4. Cold start and idle RSS of each function, compiled as the image runs it; nothing else consumes meanwhile.
  if (!QUICK || !existsSync(join(repoRoot, COLD_START_ENTRY))) {
    log('npm run build (the compiled functions)')
    execFileSync('npm', ['run', 'build'], { cwd: repoRoot, stdio: ['ignore', logFd, logFd] })
  }
  for (const fn of COLD_START_FUNCTIONS) {
    const m = await measureColdStart({
      fn,
      repoRoot,
      natsUrl: environment.natsUrl,
      kubeconfigPath: environment.kubeconfigPath,
      namespace,
      js,
      jsm,
      logFd,
    })
    results[`cold_start_ms_${fn}`] = m.coldStartMs
    results[`cold_start_cpu_ms_${fn}`] = m.cpuMs
    results[`rss_mb_${fn}`] = m.rssMb
    log(
      `${fn}: cold start ${m.coldStartMs} ms (CPU ${m.cpuMs} ms; backlog drained first: ${m.backlog}), RSS at idle ${m.rssMb} MB`,
    )
  }
  await nc.close()
} finally {
  for (const stop of cleanup) await stop().catch(() => {})
  for (const r of runners) await r.stop().catch(() => {})
  await environment.stop()
}

if (NODE && !ONLY) Object.assign(results, nodePreemption(QUICK ? 3 : 10))

/** The node test's preemption keys (its `[node] {...}` line), run `count` times; a failed run names its output. */
function nodePreemption(count: number): Record<string, unknown> {
  log(`preemption to the container on the real node, ${count}×`)
  const r = spawnSync('npx', ['vitest', 'run', 'test/integration/node/node.test.ts', '-t', 'SIGTERM'], {
    cwd: repoRoot,
    env: { ...process.env, MBF_NODE_PREEMPTIONS: String(count), NO_COLOR: '1' },
    encoding: 'utf8',
    timeout: 15 * 60_000,
  })
  writeSync(logFd, `${r.stdout}\n${r.stderr}\n`)
  const mark = '[node] {"preemptions"'
  const at = `${r.stdout}`.indexOf(mark)
  if (r.status !== 0 || at < 0) throw new Error(`the node preemption run failed (exit ${r.status}); see ${LOG_PATH}`)
  const line = (r.stdout.slice(at + '[node] '.length).split('\n')[0] ?? '').trim()
  const m = JSON.parse(line) as Record<string, unknown>
  const keys = ['sigterm', 'exit'].flatMap((k) => [`preemption_${k}_ms_p50`, `preemption_${k}_ms_p99`])
  return { ...Object.fromEntries(keys.map((k) => [k, m[k]])), preemption_node_samples: m.preemptions }
}

const goals: Record<string, (v: number) => boolean> = {
  preemption_pod_ms_p50: (v) => v <= 10,
  preemption_pod_ms_p99: (v) => v <= 30,
  burst_preemption_pod_ms_p99: (v) => v <= 1000,
  admission_lateness_ms_p99: (v) => v <= 50,
  ingest_events_per_s: (v) => v >= 100_000,
  apiserver_requests_per_fg_request: (v) => v === 0,
  kv_writes_per_model_per_s: (v) => v <= 4,
  ...Object.fromEntries(
    COLD_START_FUNCTIONS.flatMap((fn) => [
      [`cold_start_ms_${fn}`, (v: number) => v <= 500],
      [`rss_mb_${fn}`, (v: number) => v <= 80],
    ]),
  ),
}
results.load_average_1m = Math.round(((await import('node:os')).loadavg()[0] ?? 0) * 10) / 10
results.date = new Date().toISOString()
for (const k of Object.keys(goals)) if (ONLY && !(k in results)) delete goals[k]
results.goals_met = Object.entries(goals)
  .filter(([k, ok]) => ok(results[k] as number))
  .map(([k]) => k)
  .join(',')
results.goals_missed = Object.entries(goals)
  .filter(([k, ok]) => !ok(results[k] as number))
  .map(([k]) => k)
  .join(',')
await writeFile(
  join(repoRoot, `dev/bench/results/${ONLY ?? (QUICK ? 'quick' : 'latest')}.json`),
  `${JSON.stringify(results, null, 2)}\n`,
)
process.stdout.write(`${JSON.stringify(results)}\n`)
// Client libraries may keep sockets half-open after close; the run is over.
process.exit(0)
