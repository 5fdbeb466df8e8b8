// `npm run bench:scale` (`--quick`: 100 backfills over 100 models, a smoke run whose numbers are not comparable):
// the fleet's scale curve. For each size (SCALE_SIZES, default 100,1000,10000 ModelBackfills over 1,000 Models
// on 1,000 Nodes — objects in the apiserver only, no kubelet) it grows the population (idleFor 24h: settled, each
// waiting on its timer), lets it settle and measures at rest: CPU and RSS of each function in a process of its
// own (compiled, as deployed: dev/chaos/fleet.ts), the apiserver's request rate (its own apiserver_request_total),
// stream and KV sizes (JetStream info) and lifecycle's resync sweeps (their `ms`, from its log). Then 1,000
// window backfills (one per model) whose windows end in the same second: admission lateness; then each of those
// attempts preempted, first a trickle one at a time, then the rest at once (the all-models burst); then they are
// deleted again. Results after each size (a killed run keeps what it measured): dev/bench/results/scale.json, the last
// line of stdout (one JSON object), dev/bench/scale.png and the table in dev/bench/results/scale.md. Logs:
// dev/bench/results/scale.log and dev/bench/results/scale-logs/ (one file per function process).
import { openSync, readdirSync, readFileSync, writeSync } from 'node:fs'
import { mkdir, rm, writeFile } from 'node:fs/promises'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { CoreV1Api, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node'
import { jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { connect } from '@nats-io/transport-node'
import { BUCKET_BACKFILLS, STREAM_EVENTS, STREAM_TIMERS } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { GROUP, VERSION } from '../../../pkg/core/api.js'
import { parseDuration } from '../../../pkg/core/duration.js'
import { backfillKey, jobName } from '../../../pkg/core/names.js'
import type { BackfillState } from '../../../pkg/core/state.js'
import { repoRoot } from '../../../test/env/binaries.js'
import { startEnvironment } from '../../../test/env/environment.js'
import { BackfillWorld } from '../../../test/integration/support/backfill-world.js'
import { buildFunctions, Fleet } from '../../chaos/fleet.js'
import { DeletionWatch } from '../deletion-watch.js'
import { formatProfile, latenessProfile } from '../lateness-profile.js'
import { percentile } from '../percentile.js'
import {
  apiserverRequestsVia,
  cpuSeconds,
  formatCpu,
  formatRequests,
  parseSweeps,
  phaseSpend,
  rssMb,
  verbDelta,
} from './measure.js'
import { markdownTable, plotSpec, type Results, renderPng, SCALE_FUNCTIONS } from './report.js'

const QUICK = process.argv.includes('--quick') || process.env.BENCH_QUICK === '1'
const SIZES = (process.env.SCALE_SIZES ?? (QUICK ? '100' : '100,1000,10000')).split(',').map(Number)
const MODELS = Number(process.env.SCALE_MODELS ?? (QUICK ? 100 : 1000))
const WINDOWS = Math.min(MODELS, Number(process.env.SCALE_WINDOWS ?? 1000))
const REST_S = Number(process.env.SCALE_REST_S ?? (QUICK ? 20 : 60))
const TRICKLE = Math.min(WINDOWS, Number(process.env.SCALE_TRICKLE ?? (QUICK ? 10 : 100)))
/** Objects created at once. */
const WIDTH = 32
/** The population's windows never end during a run: at rest it only waits on its timers. */
const POPULATION_IDLE_FOR = '24h'
/**
 * Long enough for the last foreground burst (WINDOWS events) to be handled before the windows end — and long, as
 * every window whose timer fires on a busy model re-arms and writes its status (a new idleSince), and each status
 * write is a `backfill.changed` event for lifecycle: with short windows and many backfills those events come faster
 * than lifecycle handles them, and the windows would end before their states are written (dev/bench/README.md).
 */
const WINDOW_IDLE_FOR = process.env.SCALE_WINDOW_IDLE_FOR ?? (QUICK ? '30s' : '2m')
/**
 * How often the window models get a foreground request while their backfills are created: any period under the
 * window keeps every window from ending early (run C sent 1,000 every 3 s); a third of it leaves timer slack.
 */
const BUSY_EVERY_MS = parseDuration(WINDOW_IDLE_FOR) / 3
const namespace = 'scale'

const RESULTS_DIR = join(repoRoot, 'dev/bench/results')
const LOG_DIR = join(RESULTS_DIR, 'scale-logs')
await rm(LOG_DIR, { recursive: true, force: true })
await mkdir(LOG_DIR, { recursive: true })
const logFd = openSync(join(RESULTS_DIR, 'scale.log'), 'w')
const log = (line: string) => writeSync(logFd, `[scale ${new Date().toISOString()}] ${line}\n`)
process.stderr.write(`[scale] sizes ${SIZES.join(', ')}; log: ${join(RESULTS_DIR, 'scale.log')}\n`)
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const load1m = () => Math.round((loadavg()[0] ?? 0) * 10) / 10
/** admit's `admission timings` lines (functions/admit) for the window backfills since `from` (epoch ms). */
const admissionLines = (from: number) =>
  readdirSync(LOG_DIR)
    .filter((f) => f.startsWith('admit.'))
    .flatMap((f) => readFileSync(join(LOG_DIR, f), 'utf8').split('\n'))
    .filter((line) => {
      if (!line.includes('"admission timings"')) return false
      try {
        const e = JSON.parse(line) as { time?: number; backfill?: string }
        return (e.time ?? 0) >= from && String(e.backfill).startsWith('w-')
      } catch {
        return false // a line cut by another writer
      }
    })
    .join('\n')

/** `count` tasks, at most `width` at once; a failed task is logged and counted, never stops the others. */
async function inParallel(count: number, width: number, task: (i: number) => Promise<unknown>) {
  let next = 0
  let failed = 0
  await Promise.all(
    Array.from({ length: Math.min(width, count) }, async () => {
      while (next < count) {
        const i = next++
        await task(i).catch((err) => {
          failed++
          if (failed <= 5) log(`task ${i} failed: ${String(err).slice(0, 300)}`)
        })
      }
    }),
  )
  return failed
}

/** Polls `check` every `everyMs` until it returns a value, or throws after `timeoutMs`. */
async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs: number, everyMs = 1000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await check().catch((err) => {
      log(`${what}: ${String(err).slice(0, 200)}`)
      return undefined
    })
    if (v !== undefined) return v
    if (Date.now() > deadline) throw new Error(`timed out (${timeoutMs / 1000} s) waiting for ${what}`)
    await sleep(everyMs)
  }
}

const results: Results = { quick: QUICK, scale_models: MODELS, scale_nodes: MODELS, scale_windows: WINDOWS }
const completed: number[] = []
async function writeResults() {
  results.scale_sizes_completed = completed.join(',')
  results.load_average_1m = Math.round((loadavg()[0] ?? 0) * 10) / 10
  results.date = new Date().toISOString()
  const name = QUICK ? 'scale-quick' : 'scale'
  await writeFile(join(RESULTS_DIR, `${name}.json`), `${JSON.stringify(results, null, 2)}\n`)
  await writeFile(join(RESULTS_DIR, `${name}.md`), `${markdownTable(results)}\n`)
  // The plot is redrawn after every phase; one it cannot draw must not end the run and lose what is left to measure.
  try {
    await writeFile(
      join(QUICK ? RESULTS_DIR : join(repoRoot, 'dev/bench'), `${name}.png`),
      await renderPng(plotSpec(results)),
    )
  } catch (err) {
    log(`plot not drawn: ${err instanceof Error ? err.message : String(err)}`)
  }
}

const buildDir = join(tmpdir(), `modelbackfill-scale-build-${process.pid}`)
const built = buildFunctions(buildDir)
built.catch(() => {})
const environment = await startEnvironment({ log: (l) => log(`env: ${l}`) })
const cleanup: (() => Promise<unknown>)[] = [() => rm(buildDir, { recursive: true, force: true })]
try {
  await built
  log('functions compiled')
  const kc = new KubeConfig()
  kc.loadFromFile(environment.kubeconfigPath)
  const core = kc.makeApiClient(CoreV1Api)
  const custom = kc.makeApiClient(CustomObjectsApi)
  await core.createNamespace({ body: { metadata: { name: namespace } } })
  await until(
    'default ServiceAccount',
    async () => core.readNamespacedServiceAccount({ name: 'default', namespace }).then(() => true),
    60_000,
  )
  const nc = await connect({ servers: environment.natsUrl, name: 'scale-bench' })
  cleanup.push(() => nc.close())
  const jsm = await jetstreamManager(nc)
  const js = jsm.jetstream()
  const states = await new Kvm(nc).open(BUCKET_BACKFILLS)
  const world = new BackfillWorld(kc, namespace, nc)

  // Function logs at info: lifecycle's `resync sweep` lines carry each sweep's duration (files, not the console).
  process.env.CHAOS_FUNCTION_LOG_LEVEL = 'info'
  const fleet = new Fleet({
    buildDir,
    natsUrl: environment.natsUrl,
    natsMonitorUrl: environment.natsMonitorUrl,
    jsm,
    kubeconfigPath: environment.kubeconfigPath,
    logDir: LOG_DIR,
    restartDelayMs: () => 1000,
    log,
  })
  cleanup.push(() => fleet.stop())
  await fleet.provision()
  await fleet.startAll(300_000)
  log(`functions running, each in a process of its own: ${SCALE_FUNCTIONS.join(', ')}`)

  const apiserverRequests = apiserverRequestsVia(environment.binaries.kubectl, environment.kubeconfigPath)
  /**
   * Where a phase's CPU went, machine-wide (our functions by pid, everything else by command name: kube-apiserver,
   * etcd, nats-server, the controller-manager, this benchmark's own `node`), and the apiserver's requests by verb in
   * it: `begin()` at its start, `end()` → logged and kept as `scale_<n>_<phase>_cpu_s_<process>` and
   * `…_<phase>_requests`.
   */
  const phaseProfile = (n: number, phase: string) => {
    const spend = phaseSpend(
      apiserverRequests,
      (pid, comm) => SCALE_FUNCTIONS.find((fn) => fleet.pid(fn) === pid) ?? comm,
    )
    return {
      begin: spend.begin,
      end() {
        const spent = spend.end()
        if (!spent) return
        for (const [label, v] of Object.entries(spent.cpu)) results[`scale_${n}_${phase}_cpu_s_${label}`] = v
        results[`scale_${n}_${phase}_wall_s`] = spent.wallS
        results[`scale_${n}_${phase}_requests`] = formatRequests(spent.requests)
        log(
          `size ${n}: ${phase}: ${spent.wallS.toFixed(1)} s wall, ${formatCpu(spent.cpu)}; apiserver requests ${formatRequests(spent.requests)}`,
        )
      },
    }
  }
  const publishForeground = (model: string) =>
    js.publish('flexinfer.events.foreground.request', encode('ai.flexinfer.foreground.request', { namespace, model }))
  /** Keys in the backfill-state bucket of `<namespace>.<prefix>…` (one stream info; NATS wildcards are whole tokens). */
  const stateKeys = async (prefix: string) => {
    const info = await jsm.streams.info(`KV_${BUCKET_BACKFILLS}`, {
      subjects_filter: `$KV.${BUCKET_BACKFILLS}.${namespace}.*`,
    })
    const start = `$KV.${BUCKET_BACKFILLS}.${namespace}.${prefix}`
    return Object.keys(info.state.subjects ?? {}).filter((s) => s.startsWith(start)).length
  }
  const stateOf = async (name: string) => {
    const e = await states.get(backfillKey(namespace, name))
    return e?.operation === 'PUT' ? e.json<BackfillState>() : null
  }
  /** The states of `names`, read WIDTH at a time. */
  const statesOf = async (names: string[]) => {
    const out: (BackfillState | null)[] = new Array(names.length).fill(null)
    await inParallel(names.length, WIDTH, async (i) => {
      out[i] = await stateOf(names[i] as string)
    })
    return out
  }
  /** Events and timers waiting for a function (unhandled or unacknowledged) on every durable consumer. */
  const backlog = async () => {
    let sum = 0
    for (const stream of [STREAM_EVENTS, STREAM_TIMERS]) {
      for (const c of await jsm.consumers.list(stream).next()) sum += c.num_pending + c.num_ack_pending
    }
    return sum
  }
  /**
   * Nothing written to the backfill states for `quietS` seconds (not the timer stream: the resync schedule fires
   * into it every sweep) and no consumer has a backlog: a quiet KV alone is not rest (on 2026-12-01 lifecycle
   * still had ~10,000 watch events queued at 1,000 backfills when the KV had been quiet for 15 s).
   */
  const settled = async (what: string, ready: () => Promise<boolean>, quietS: number, timeoutMs: number) => {
    let last = ''
    let quietSince = Date.now()
    await until(
      what,
      async () => {
        const seqs = String((await jsm.streams.info(`KV_${BUCKET_BACKFILLS}`)).state.last_seq)
        if (seqs !== last) {
          last = seqs
          quietSince = Date.now()
          return undefined
        }
        if (Date.now() - quietSince < quietS * 1000 || !(await ready())) return undefined
        const queued = await backlog()
        if (queued > 0) log(`${what}: ${queued} events and timers still queued for the functions`)
        return queued === 0 ? true : undefined
      },
      timeoutMs,
      2000,
    )
  }

  // The fixed world: a template, NODES Nodes, MODELS Models (Ready, each on its node).
  await world.template('scale-tpl')
  let failed = await inParallel(MODELS, WIDTH, (i) =>
    core.createNode({ body: { metadata: { name: `node-${i}`, labels: { 'kubernetes.io/hostname': `node-${i}` } } } }),
  )
  failed += await inParallel(MODELS, WIDTH, (i) => world.model(`m-${i}`, { node: `node-${i}` }))
  log(`${MODELS} nodes and models created (${failed} failed)`)

  // Job and pod watches for the preemption phases (dev/bench/deletion-watch.ts, as dev/bench/run.ts).
  const watch = await DeletionWatch.start(kc, namespace, log)
  cleanup.push(() => watch.stop())

  let population = 0
  for (const n of SIZES) {
    const k = (suffix: string) => `scale_${n}_${suffix}`
    // 1. Grow the population to n and let it settle (every backfill waiting on its 24 h window).
    const t0 = Date.now()
    log(`size ${n}: creating backfills ${population}..${n - 1}`)
    const from = population
    const createFailed = await inParallel(n - from, WIDTH, (i) =>
      world.backfill(`p-${from + i}`, {
        modelRef: `m-${(from + i) % MODELS}`,
        templateRef: 'scale-tpl',
        idleFor: POPULATION_IDLE_FOR,
      }),
    )
    population = n
    log(`size ${n}: created in ${((Date.now() - t0) / 1000).toFixed(0)} s (${createFailed} failed); settling`)
    await settled(`${n} backfill states`, async () => (await stateKeys('p-')) >= n - createFailed, 15, 60 * 60_000)
    results[k('backfills')] = n - createFailed
    results[k('create_settle_s')] = Math.round((Date.now() - t0) / 1000)
    log(`size ${n}: settled after ${results[k('create_settle_s')]} s`)

    // 2. At rest: no traffic, timers only.
    const pids = Object.fromEntries(SCALE_FUNCTIONS.map((fn) => [fn, fleet.pid(fn)]))
    const cpuBefore = Object.fromEntries(SCALE_FUNCTIONS.map((fn) => [fn, cpuSeconds(pids[fn] ?? -1)]))
    const requestsBefore = apiserverRequests()
    const restFrom = Date.now()
    await sleep(REST_S * 1000)
    results[k('load_at_rest')] = load1m()
    const requestsAfter = apiserverRequests()
    const restS = (Date.now() - restFrom) / 1000
    for (const fn of SCALE_FUNCTIONS) {
      const pid = pids[fn]
      const before = cpuBefore[fn]
      const after = pid && fleet.pid(fn) === pid ? cpuSeconds(pid) : undefined
      if (before !== undefined && after !== undefined)
        results[k(`cpu_pct_${fn}`)] = Math.round(((after - before) / restS) * 1000) / 10
      const rss = pid ? rssMb(pid) : undefined
      if (rss !== undefined) results[k(`rss_mb_${fn}`)] = rss
    }
    const byVerb = verbDelta(requestsBefore, requestsAfter)
    // The two /metrics scrapes of this benchmark are not at rest: left out.
    byVerb.GET = Math.max(0, (byVerb.GET ?? 0) - 1)
    const total = Object.values(byVerb).reduce((a, b) => a + b, 0)
    results[k('apiserver_rps_at_rest')] = Math.round((total / restS) * 100) / 100
    results[k('apiserver_at_rest_by_verb')] = Object.entries(byVerb)
      .filter(([, v]) => v > 0)
      .map(([verb, v]) => `${verb} ${v}`)
      .join(', ')
    for (const s of await jsm.streams.list().next()) {
      const key = s.config.name.toLowerCase().replace(/[^a-z0-9]+/g, '_')
      results[k(`stream_${key}_messages`)] = s.state.messages
      results[k(`stream_${key}_bytes`)] = s.state.bytes
    }
    const kvKey = `kv_${BUCKET_BACKFILLS}`.replace(/[^a-z0-9]+/g, '_')
    results[k('kv_backfills_messages')] = results[k(`stream_${kvKey}_messages`)] as number
    results[k('kv_backfills_bytes')] = results[k(`stream_${kvKey}_bytes`)] as number
    const timersKey = STREAM_TIMERS.toLowerCase()
    results[k('stream_timers_messages')] = results[k(`stream_${timersKey}_messages`)] as number
    results[k('stream_timers_bytes')] = results[k(`stream_${timersKey}_bytes`)] as number
    const sweeps = readdirSync(LOG_DIR)
      .filter((f) => f.startsWith('lifecycle.'))
      .flatMap((f) => parseSweeps(readFileSync(join(LOG_DIR, f), 'utf8')))
      .filter((s) => s.at >= restFrom && s.backfills >= n)
    results[k('sweeps')] = sweeps.length
    results[k('sweep_ms_p50')] = percentile(
      sweeps.map((s) => s.ms),
      50,
    )
    results[k('sweep_ms_max')] = sweeps.length ? Math.max(...sweeps.map((s) => s.ms)) : Number.NaN
    results[k('sweep_picked_max')] = sweeps.length ? Math.max(...sweeps.map((s) => s.picked)) : Number.NaN
    log(
      `size ${n}: at rest ${JSON.stringify(Object.fromEntries(Object.entries(results).filter(([key]) => key.startsWith(k('')))))}`,
    )
    await writeResults()

    // 3–5 may fail (a loaded machine, a deadline): the size keeps what it measured at rest, the run goes on.
    try {
      const windows = Math.min(WINDOWS, n)
      const trickle = Math.min(TRICKLE, windows)
      // 3. min(WINDOWS, n) window backfills, one per model, whose windows end in the same second: their models are kept
      // busy (a foreground request each, every BUSY_EVERY_MS) while they are created and settle, then one last request per
      // model at once starts every window together.
      const windowNames = Array.from({ length: windows }, (_, i) => `w-${i}`)
      let busy = true
      const keepBusy = (async () => {
        // Bounded: at most the 30 minutes the wait below allows.
        for (let round = 0; busy && round < (30 * 60_000) / BUSY_EVERY_MS + 1; round++) {
          await Promise.all(windowNames.map((_, i) => publishForeground(`m-${i}`).catch(() => {})))
          const nextAt = Date.now() + BUSY_EVERY_MS
          while (busy && Date.now() < nextAt) await sleep(250)
        }
      })()
      const windowsFrom = Date.now()
      const windowFailed = await inParallel(windows, WIDTH, (i) =>
        world.backfill(windowNames[i] as string, {
          modelRef: `m-${i}`,
          templateRef: 'scale-tpl',
          idleFor: WINDOW_IDLE_FOR,
        }),
      )
      // Not "quiet" here: a window's first timer fires and re-arms (the models stay busy) while others are created.
      await until(
        `${windows} window backfills waiting`,
        async () =>
          (await statesOf(windowNames)).filter((s) => s?.phase === 'WaitingForIdle').length >= windows - windowFailed
            ? true
            : undefined,
        30 * 60_000,
        3000,
      )
      results[k('windows_waiting_s')] = Math.round((Date.now() - windowsFrom) / 1000)
      busy = false
      await keepBusy
      await sleep(1000)
      results[k('load_at_windows')] = load1m()
      const burstFrom = Date.now()
      await Promise.all(windowNames.map((_, i) => publishForeground(`m-${i}`)))
      results[k('admission_windows')] = windows - windowFailed
      results[k('admission_window_spread_ms')] = Date.now() - burstFrom
      log(`size ${n}: ${windows} windows started within ${results[k('admission_window_spread_ms')]} ms`)
      const windowMs = parseDuration(WINDOW_IDLE_FOR)
      // From just before the windows end until the last is admitted: who has the CPU while admit works through them.
      const admissionProfile = phaseProfile(n, 'admission')
      const profileFrom = sleep(Math.max(0, windowMs - 1000 - (Date.now() - burstFrom))).then(() =>
        admissionProfile.begin(),
      )
      const lateness: number[] = []
      await until(
        'window backfills admitted',
        async () => {
          lateness.length = 0
          for (const s of await statesOf(windowNames)) {
            if (s?.startedAt && s.idleSince && s.attempts >= 1)
              lateness.push(Date.parse(s.startedAt) - (Date.parse(s.idleSince) + windowMs))
          }
          return lateness.length >= windows - windowFailed ? true : undefined
        },
        windowMs + 10 * 60_000,
        3000,
      ).catch((err) => log(String(err)))
      await profileFrom
      admissionProfile.end()
      results[k('admission_windows_admitted')] = lateness.length
      results[k('admission_lateness_ms_p50')] = percentile(lateness, 50)
      results[k('admission_lateness_ms_p99')] = percentile(lateness, 99)
      results[k('admission_lateness_ms_max')] = lateness.length ? Math.max(...lateness) : Number.NaN
      log(
        `size ${n}: lateness p50 ${results[k('admission_lateness_ms_p50')]} p99 ${results[k('admission_lateness_ms_p99')]} (${lateness.length})`,
      )
      // Where the lateness goes: admit's own step timings of these admissions (pkg/observability/step-timings.ts).
      const profile = latenessProfile(admissionLines(burstFrom))
      for (const row of profile) {
        results[k(`admission_step_${row.step}_ms_p50`)] = row.p50
        results[k(`admission_step_${row.step}_ms_p99`)] = row.p99
      }
      log(`size ${n}: admission timings of the windows (admit's log)\n${formatProfile(profile)}`)
      await writeResults()

      // 4. Preemption of those attempts: a trickle (one at a time), then every other model at once.
      const running = async (names: string[]) => (await statesOf(names)).filter((s) => s?.phase === 'Running').length
      await until(
        'window attempts Running',
        async () => ((await running(windowNames)) >= lateness.length ? true : undefined),
        10 * 60_000,
        3000,
      ).catch((err) => log(String(err)))
      const trickleMs: number[] = []
      const trickleJobMs: number[] = []
      for (let i = 0; i < trickle; i++) {
        const job = jobName(`w-${i}`, 1)
        const known = await watch.podsNow(job)
        const sentAt = Date.now()
        await publishForeground(`m-${i}`)
        await until(`preemption of ${job}`, async () => watch.goneAt(job, known), 15_000, 5).catch((err) =>
          log(String(err)),
        )
        const at = watch.goneAt(job, known)
        if (at !== undefined) trickleMs.push(at - sentAt)
        const jobAt = watch.jobDeletedAt.get(job)
        if (jobAt !== undefined) trickleJobMs.push(jobAt - sentAt)
        await sleep(100)
      }
      results[k('preemption_samples')] = trickleMs.length
      results[k('preemption_pod_ms_p50')] = percentile(trickleMs, 50)
      results[k('preemption_pod_ms_p99')] = percentile(trickleMs, 99)
      results[k('preemption_job_ms_p50')] = percentile(trickleJobMs, 50)
      results[k('preemption_job_ms_p99')] = percentile(trickleJobMs, 99)
      const burstIdx = Array.from({ length: windows - trickle }, (_, j) => trickle + j)
      const burstJobs = burstIdx.map((i) => jobName(`w-${i}`, 1))
      const burstPods = new Map<string, string[]>()
      for (const job of burstJobs) burstPods.set(job, watch.podsOf(job))
      const burstProfile = phaseProfile(n, 'burst')
      burstProfile.begin()
      const burstAt = Date.now()
      await Promise.all(burstIdx.map((i) => publishForeground(`m-${i}`)))
      const withAttempt = burstJobs.filter((j) => watch.podsOfJob.has(j))
      await until(
        'every burst Job and pod deleted',
        async () =>
          withAttempt.every((j) => watch.goneAt(j, burstPods.get(j) ?? []) !== undefined) ? true : undefined,
        10 * 60_000,
        50,
      ).catch((err) => log(String(err)))
      burstProfile.end()
      const burstMs = withAttempt.flatMap((j) => {
        const at = watch.goneAt(j, burstPods.get(j) ?? [])
        return at === undefined ? [] : [at - burstAt]
      })
      // The Job's DELETE (cancel) apart from its pods' (the garbage collector, CANCEL_DELETE_PODS off by default).
      const burstJobMs = withAttempt.flatMap((j) => {
        const at = watch.jobDeletedAt.get(j)
        return at === undefined ? [] : [at - burstAt]
      })
      results[k('burst_preemption_job_ms_p50')] = percentile(burstJobMs, 50)
      results[k('burst_preemption_job_ms_p99')] = percentile(burstJobMs, 99)
      results[k('load_at_burst')] = load1m()
      await writeResults()
      results[k('burst_preemptions')] = withAttempt.length
      results[k('burst_preemption_pod_ms_p50')] = percentile(burstMs, 50)
      results[k('burst_preemption_pod_ms_p99')] = percentile(burstMs, 99)
      results[k('burst_preemption_pods_deleted')] = burstMs.length
      log(
        `size ${n}: trickle p99 ${results[k('preemption_pod_ms_p99')]} ms; burst of ${withAttempt.length}: p99 ${results[k('burst_preemption_pod_ms_p99')]} ms`,
      )

      // 5. The window backfills go again (their finalizers released by lifecycle) before the next size.
      await inParallel(windows, WIDTH, (i) =>
        custom.deleteNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace,
          plural: 'modelbackfills',
          name: `w-${i}`,
        }),
      )
      await until(
        'window backfills gone',
        async () => {
          const list = (await custom.listNamespacedCustomObject({
            group: GROUP,
            version: VERSION,
            namespace,
            plural: 'modelbackfills',
          })) as {
            items: { metadata: { name: string } }[]
          }
          return list.items.some((b) => b.metadata.name.startsWith('w-')) ? undefined : true
        },
        15 * 60_000,
        5000,
      ).catch((err) => log(String(err)))
    } catch (err) {
      log(`size ${n}: windows / preemption failed: ${String(err).slice(0, 500)}`)
      results[k('error')] = String(err).slice(0, 200)
    }
    completed.push(n)
    await writeResults()
  }
  results.scale_crashes = fleet.crashes.length
} finally {
  for (const c of cleanup.reverse()) await c().catch(() => {})
  await environment.stop()
}
await writeResults()
process.stdout.write(`${JSON.stringify(results)}\n`)
// Client libraries may keep sockets half-open after close; the run is over.
process.exit(0)
