// What every chaos-style run (dev/chaos/chaos.ts, dev/chaos/failover.ts) stands on, and how it ends: a log directory, its own
// environment (one nats-server or a cluster), the workload's namespaces with their default ServiceAccounts, the
// harness's own NATS connection, the functions compiled and running as a Fleet — and, however the run ends, every
// step undone in reverse, the environment stopped, the logs kept only as evidence of a failed run or when asked.
import { randomBytes } from 'node:crypto'
import { mkdir, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node'
import { type JetStreamManager, jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { STREAM_FOREGROUND } from '../../events/catalog.js'
import { type Environment, startEnvironment } from '../../test/env/environment.js'
import { sleep, waitFor } from '../../test/env/exec.js'
import { readJobAudit } from './audit.js'
import { buildFunctions, Fleet, type FleetOptions } from './fleet.js'
import type { Counts, Oracle } from './oracle.js'
import { type ForegroundRequest, NAMESPACES } from './workload.js'

export interface Rig {
  /** A progress line, stamped with the wall-clock time and the seconds since the run started. */
  say: (line: string) => void
  started: number
  logDir: string
  env: Environment
  kc: KubeConfig
  nc: NatsConnection
  jsm: JetStreamManager
  fleet: Fleet
  /** A step to run when the run ends, however it ends; the steps run in reverse order, before the environment stops. */
  defer: (step: () => Promise<unknown>) => void
}

export interface RigOptions {
  /** Names the log directory and the harness's NATS connection. */
  name: string
  seed: number
  /** NATS as a 3-server JetStream cluster. */
  natsCluster?: boolean
  log: (line: string) => void
  /** Keep the function logs even when the run is ok. */
  keepLogs?: boolean
  restartDelayMs: () => number
  /** More for the Fleet, given the environment (e.g. every server's monitoring URL and NATS_REPLICAS). */
  fleet?: (env: Environment) => Partial<FleetOptions>
}

/**
 * Sets the rig up, provisions and starts every function (each in a process of its own), runs `body` on it and
 * tears everything down. A result that is not ok (or `keepLogs`) names the kept log directory.
 */
export async function withRig<R extends { ok: boolean; logs?: string }>(
  opts: RigOptions,
  body: (rig: Rig) => Promise<R>,
): Promise<R> {
  const started = Date.now()
  const say = (line: string) =>
    opts.log(
      `${new Date().toISOString().slice(11, 23)} ${((Date.now() - started) / 1000).toFixed(0).padStart(4)}s ${line}`,
    )
  const logDir = join(tmpdir(), `modelbackfill-${opts.name}-${randomBytes(4).toString('hex')}`)
  await mkdir(logDir, { recursive: true })
  say(`seed ${opts.seed}; function logs in ${logDir}`)
  const buildDir = `${logDir}-build`
  const cleanup: (() => Promise<unknown>)[] = [() => rm(buildDir, { recursive: true, force: true })]
  let environment: Environment | undefined
  // Logs stay as evidence of a failed (or aborted) run, or when asked for.
  let keepLogs = true
  try {
    // Compiling the functions overlaps the environment's start.
    const built = buildFunctions(buildDir).then(() => say('functions compiled'))
    built.catch(() => {})
    environment = await startEnvironment({
      natsCluster: opts.natsCluster,
      auditJobs: true,
      log: (l) => say(`env: ${l}`),
    })
    const env = environment
    await built
    const kc = new KubeConfig()
    kc.loadFromFile(env.kubeconfigPath)
    const core = kc.makeApiClient(CoreV1Api)
    for (const name of NAMESPACES) await core.createNamespace({ body: { metadata: { name } } })
    await waitFor('default ServiceAccounts', async () => {
      for (const namespace of NAMESPACES) await core.readNamespacedServiceAccount({ name: 'default', namespace })
      return true
    })
    // The harness's own connection knows every server of a cluster, like the functions'.
    const nc = await connect({ servers: env.natsUrl.split(','), name: opts.name, maxReconnectAttempts: -1 })
    cleanup.push(() => nc.close())
    const jsm = await jetstreamManager(nc)

    const fleet = new Fleet({
      buildDir,
      natsUrl: env.natsUrl,
      natsMonitorUrl: env.natsMonitorUrl,
      jsm,
      kubeconfigPath: env.kubeconfigPath,
      logDir,
      restartDelayMs: opts.restartDelayMs,
      log: say,
      ...opts.fleet?.(env),
    })
    cleanup.push(() => fleet.stop())
    await fleet.provision()
    await fleet.startAll()

    const result = await body({ say, started, logDir, env, kc, nc, jsm, fleet, defer: (step) => cleanup.push(step) })
    keepLogs = !result.ok || Boolean(opts.keepLogs) || process.env.CHAOS_KEEP_LOGS === '1'
    if (keepLogs) result.logs = logDir
    return result
  } finally {
    for (const step of cleanup.reverse()) await step().catch(() => {})
    await environment?.stop().catch(() => {})
    if (!keepLogs) await rm(logDir, { recursive: true, force: true }).catch(() => {})
  }
}

/**
 * The oracle's verdict now, each request judged by its JetStream store time, read back by its seq from
 * FLEXINFER_FOREGROUND — the stream the foreground subject is stored in (a seq of another stream is another message).
 */
export async function verdictOf(
  oracle: Oracle,
  jsm: JetStreamManager,
  requests: ForegroundRequest[],
  auditLogPath?: string,
) {
  const audit = await readJobAudit(auditLogPath)
  return oracle.evaluate(
    requests,
    Date.now(),
    async (seq) => {
      const stored = await jsm.streams.getMessage(STREAM_FOREGROUND, { seq })
      return stored ? Date.parse(stored.timestamp) : undefined
    },
    audit,
  )
}

/** The invariant counts: every one must be 0. */
export function countsOf(
  verdict: Awaited<ReturnType<typeof verdictOf>>,
  problems: Record<string, string>,
  crashes: number,
  rssOverLimit: number,
): Counts {
  return {
    jobs_created_in_idle_window: verdict.inWindow.length,
    two_live_attempts_same_model_or_node: verdict.twoLive.length,
    foreign_jobs_deleted: verdict.foreignDeleted.length,
    lost_cancels: verdict.lost.length,
    jobs_running_while_blind: verdict.blind.length,
    backfills_not_settled: Object.keys(problems).length,
    processes_crashed: crashes,
    rss_over_limit: rssOverLimit,
  }
}

/** Polls the oracle every 2 s until every backfill has settled, or `withinMs` after the last fault. */
export async function awaitSettled(
  oracle: Pick<Oracle, 'settledProblems'>,
  requests: ForegroundRequest[],
  lastFaultEnd: number,
  withinMs: number,
): Promise<{ problems: Record<string, string>; settledAt: number | null }> {
  for (;;) {
    const problems = await oracle.settledProblems(requests, Date.now()).catch((err) => ({
      '*': `cannot list ModelBackfills: ${(err as Error).message}`,
    }))
    if (Object.keys(problems).length === 0) return { problems, settledAt: Date.now() }
    if (Date.now() > lastFaultEnd + withinMs) return { problems, settledAt: null }
    await sleep(2_000)
  }
}

/** Waits until every request's cancel deadline has passed, so the verdict can count a lost cancel. */
export async function awaitCancelDeadlines(requests: ForegroundRequest[], cancelBoundMs: number): Promise<void> {
  const lastAck = Math.max(0, ...requests.map((r) => r.ackAt))
  await sleep(Math.max(0, lastAck + cancelBoundMs + 500 - Date.now()))
}

/** The first items of each invariant's evidence, one progress line each. */
/**
 * The function log lines (every process, every restart) that mention any of `needles` — a Job's name, a model's
 * key — oldest first, at most `max`: a failing run in CI has its log directory removed with the machine.
 */
export async function linesAbout(logDir: string, needles: string[], max = 80): Promise<string[]> {
  const wanted = needles.filter((n) => n.length > 0)
  if (!wanted.length) return []
  const found: { time: number; line: string }[] = []
  for (const file of (await readdir(logDir).catch(() => [])).filter((f) => f.endsWith('.log'))) {
    const text = await readFile(join(logDir, file), 'utf8').catch(() => '')
    for (const line of text.split('\n')) {
      if (!wanted.some((n) => line.includes(n))) continue
      const time = Number(/"time":(\d+)/.exec(line)?.[1] ?? 0)
      found.push({ time, line: `${file}: ${line.length > 600 ? `${line.slice(0, 600)}…` : line}` })
    }
  }
  found.sort((a, b) => a.time - b.time)
  return found.slice(-max).map((f) => f.line)
}

export function sayEvidence(say: (line: string) => void, evidence: Record<string, unknown[]>): void {
  for (const [name, items] of Object.entries(evidence)) {
    if (items.length) say(`${name}: ${JSON.stringify(items.slice(0, 3))}${items.length > 3 ? ' …' : ''}`)
  }
}
