// Server loss on a 3-server JetStream cluster (issue 9): the chaos harness's fleet, workload and oracle on an
// environment whose NATS is a cluster with every stream and bucket at three replicas. With traffic running
// (backfills admitting, running and being preempted by foreground bursts), the server that leads each target in
// turn — the claims bucket, the backfill-state bucket, the events stream, the timers stream — is killed with
// SIGKILL and restarted later. The oracle (which trusts no function state) counts Jobs created inside an idle
// window, second live attempts per model/node, lost cancels (a Job still live 10 s after a request, or 10 s after
// new leaders were elected for the killed target and for whatever of the preemption path the server led, when the
// request fell in the election) and backfills not settled at the end (a WaitingForIdle backfill whose window ended
// long ago has lost its timer). The preemption latency (request PubAck → its Job no longer live) is reported overall and for
// requests sent during a failover (kill until the restarted server has caught up, plus `afterMs`).
import {
  BUCKET_BACKFILLS,
  BUCKET_CLAIMS,
  STREAM_EVENTS,
  STREAM_FOREGROUND,
  STREAM_FOREGROUND_LAST,
  STREAM_TIMERS,
} from '../../events/catalog.js'
import { consumerName } from '../../pkg/jetstream/names.js'
import { awaitReplicas } from '../../pkg/jetstream/streams.js'
import type { RestartableServer } from '../../test/env/environment.js'
import { sleep } from '../../test/env/exec.js'
import { streamLeader, waitForStreamLeader } from '../../test/env/nats.js'
import { type ChaosConfig, rng, short } from './config.js'
import { FUNCTIONS } from './fleet.js'
import { type Counts, Oracle } from './oracle.js'
import { awaitCancelDeadlines, awaitSettled, countsOf, linesAbout, sayEvidence, verdictOf, withRig } from './setup.js'
import { declareWorkload, emptyWorkload, startTraffic } from './workload.js'

export const FAILOVER_TARGETS = [`KV_${BUCKET_CLAIMS}`, `KV_${BUCKET_BACKFILLS}`, STREAM_EVENTS, STREAM_TIMERS] as const

/**
 * What a foreground request's cancel passes through: the request streams and demand's consumers on them, the claims
 * bucket (demand's fresh claim read), the events stream (demand publishes the cancel) and cancel's consumer on it.
 * Whichever of them the killed server led is leaderless until its election ends (4-9 s on nats-server).
 */
const PREEMPTION_PATH: { stream: string; consumer?: string }[] = [
  { stream: STREAM_FOREGROUND, consumer: consumerName('demand', STREAM_FOREGROUND) },
  { stream: STREAM_FOREGROUND_LAST, consumer: consumerName('demand', STREAM_FOREGROUND_LAST) },
  { stream: STREAM_FOREGROUND },
  { stream: STREAM_FOREGROUND_LAST },
  { stream: `KV_${BUCKET_CLAIMS}` },
  { stream: STREAM_EVENTS },
  { stream: STREAM_EVENTS, consumer: consumerName('cancel', STREAM_EVENTS) },
]

export interface FailoverConfig extends ChaosConfig {
  /** Streams (a bucket: KV_<bucket>) whose leader is killed, in this order. */
  targets: readonly string[]
  /** How long a killed server stays down. */
  downMs: number
  /** Traffic between the restart of one server (caught up) and the next kill. */
  gapMs: number
  /** A request counts as "during the failover" from the kill until the server is back and current, plus this. */
  afterMs: number
}

/** `npm run failover`: every target in turn. */
export const fullFailover: FailoverConfig = {
  ...short,
  seed: 9,
  models: 8,
  nodes: 6,
  warmupMs: 15_000,
  targets: FAILOVER_TARGETS,
  downMs: 15_000,
  gapMs: 15_000,
  afterMs: 5_000,
  trafficTailMs: 15_000,
}

/** The variant in `npm test`: one leader (the claims bucket's), shorter everything. */
export const shortFailover: FailoverConfig = {
  ...fullFailover,
  models: 6,
  nodes: 4,
  warmupMs: 8_000,
  targets: [`KV_${BUCKET_CLAIMS}`],
  downMs: 6_000,
  gapMs: 0,
  trafficTailMs: 8_000,
}

export interface Percentiles {
  n: number
  p50_ms: number | null
  p99_ms: number | null
  max_ms: number | null
}

export interface FailoverResult extends Counts {
  ok: boolean
  seed: number
  duration_s: number
  replicas: number
  kills: {
    target: string
    server: string
    new_leader: string
    leader_elected_ms: number
    /** Until every stream and consumer of the preemption path the killed server led had a leader again. */
    preemption_path_elected_ms: number
    back_current_ms: number
  }[]
  /** Backfills left WaitingForIdle long after their window ended with nothing else on their model/node. */
  timers_lost: number
  foreground_requests: number
  foreground_requests_refused: number
  jobs_created: number
  /** Not an invariant: Jobs a request raced (stored while the POST was in flight) that were deleted promptly. */
  jobs_raced_and_deleted: number
  /** Workload Jobs whose creation the oracle timed by the apiserver's audit log (all of them, when it works). */
  jobs_timed_by_audit: number
  /** The oracle's watch: how late it saw a Job created, at most (what timing by the watch alone would be off by). */
  watch_lag_ms_max: number
  preemption_latency: Percentiles
  preemption_latency_during_failover: Percentiles
  settled_after_last_fault_s: number | null
  evidence: Record<string, unknown[]>
  logs?: string
}

export function percentiles(values: number[]): Percentiles {
  const sorted = [...values].sort((a, b) => a - b)
  const at = (q: number) =>
    sorted.length ? (sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] as number) : null
  return { n: sorted.length, p50_ms: at(0.5), p99_ms: at(0.99), max_ms: sorted.at(-1) ?? null }
}

export async function runFailover(
  config: FailoverConfig,
  opts: { log?: (line: string) => void; keepLogs?: boolean; evidence?: number } = {},
): Promise<FailoverResult> {
  const random = rng(config.seed)
  return withRig(
    {
      name: 'failover',
      seed: config.seed,
      natsCluster: true,
      log: opts.log ?? ((line: string) => process.stderr.write(`[failover] ${line}\n`)),
      keepLogs: opts.keepLogs,
      restartDelayMs: () => random.between(config.restartDelayMinMs, config.restartDelayMaxMs),
      fleet: (env) => ({
        natsMonitorUrls: env.natsServers.map((s) => s.monitorUrl),
        env: { NATS_REPLICAS: String(env.natsServers.length) },
        // A short run with few models: debug lines (demand's claim read after each idle write) are a few thousand,
        // and a lost cancel in CI, whose log directory is gone, can only be explained by what the result prints.
        logLevel: 'debug',
      }),
    },
    async ({ say, started, logDir, env, kc, nc, jsm, fleet, defer }) => {
      const replicas = env.natsServers.length
      say(`functions running (${FUNCTIONS.join(', ')}); streams and buckets at ${replicas} replicas`)

      const workload = emptyWorkload()
      const oracle = new Oracle(kc, workload, config, say)
      await oracle.start()
      defer(() => oracle.stop())
      await declareWorkload(kc, nc, config, random, say, workload)
      const traffic = startTraffic(nc, workload, config, random)
      defer(() => traffic.stop())
      say(`warm-up ${config.warmupMs / 1000} s`)
      await sleep(config.warmupMs)

      const kills: FailoverResult['kills'] = []
      const failoverWindows: { from: number; to: number }[] = []
      for (const [i, target] of config.targets.entries()) {
        if (i > 0) await sleep(config.gapMs)
        const server = await waitForStreamLeader(env.natsServers, target)
        const ledByServer = []
        for (const step of PREEMPTION_PATH) {
          if ((await streamLeader(env.natsServers, step.stream, step.consumer)) === server) ledByServer.push(step)
        }
        const from = Date.now()
        await env.stopServer(server as RestartableServer, 'SIGKILL')
        say(`killed ${server} (kill -9), leader of ${target}`)
        const live = env.natsServers.filter((s) => s.name !== server)
        const pathElected = Promise.all(
          ledByServer.map((step) =>
            waitForStreamLeader(live, step.stream, { consumer: step.consumer, not: server, timeoutMs: 60_000 }),
          ),
        ).then(() => Date.now() - from)
        const newLeader = await waitForStreamLeader(live, target, { not: server, timeoutMs: 60_000 })
        const elected = Date.now() - from
        say(`${target}: new leader ${newLeader} after ${elected} ms`)
        const pathElectedMs = await pathElected
        const path = ledByServer.map((s) => s.consumer ?? s.stream).join(', ') || 'nothing'
        say(`preemption path led by ${server}: ${path}; every one led again after ${pathElectedMs} ms`)
        await sleep(Math.max(0, from + config.downMs - Date.now()))
        await env.startServer(server as RestartableServer)
        // Back and current: every target stream has all its replicas caught up again.
        for (const stream of config.targets) await awaitReplicas(jsm, stream, replicas, 60_000)
        const back = Date.now() - from
        say(`${server} restarted and current after ${(back / 1000).toFixed(1)} s`)
        kills.push({
          target,
          server,
          new_leader: newLeader,
          leader_elected_ms: elected,
          preemption_path_elected_ms: pathElectedMs,
          back_current_ms: back,
        })
        // The target, and whatever of the preemption path the server led, was unavailable from the kill until its
        // new leader: like a NATS restart, the oracle extends the cancel deadline over that (not over the whole time
        // the server was down); the latency is reported as is.
        oracle.fault({
          kind: 'nats-leader-kill',
          fn: server,
          start: from,
          end: from + Math.max(elected, pathElectedMs),
        })
        failoverWindows.push({ from, to: Date.now() + config.afterMs })
      }

      await sleep(config.trafficTailMs)
      await traffic.stop()
      const lastFaultEnd = Math.max(...oracle.faults.map((f) => f.end), Date.now())
      say(`traffic stopped; waiting up to ${config.settleWithinMs / 1000} s for every backfill to settle`)
      const { problems, settledAt } = await awaitSettled(oracle, traffic.requests, lastFaultEnd, config.settleWithinMs)
      await awaitCancelDeadlines(traffic.requests, config.cancelBoundMs)

      const verdict = await verdictOf(oracle, jsm, traffic.requests, env.auditLogPath)
      const preemptions = oracle.preemptions(traffic.requests)
      const during = (t: number) => failoverWindows.some((w) => t >= w.from && t <= w.to)
      const latencies = preemptions.flatMap((p) => (p.latencyMs === undefined ? [] : [p.latencyMs]))
      const latenciesDuring = preemptions.flatMap((p) =>
        p.latencyMs === undefined || !during(p.ackAt) ? [] : [p.latencyMs],
      )
      const timersLost = Object.values(problems).filter((p) => p.startsWith('WaitingForIdle')).length
      const crashes = fleet.crashes.filter((c) => !c.duringStartup)
      const counts = countsOf(verdict, problems, crashes.length, 0)
      const ok = Object.values(counts).every((n) => n === 0)
      const limit = opts.evidence ?? 20
      const result: FailoverResult = {
        ...counts,
        ok,
        seed: config.seed,
        duration_s: Math.round((Date.now() - started) / 1000),
        replicas,
        kills,
        timers_lost: timersLost,
        foreground_requests: traffic.requests.length,
        foreground_requests_refused: traffic.failed(),
        jobs_created: [...oracle.jobs.values()].filter((j) => j.owner).length,
        jobs_raced_and_deleted: verdict.raced.length,
        jobs_timed_by_audit: verdict.timedByAudit,
        watch_lag_ms_max: verdict.watchLagMsMax,
        preemption_latency: percentiles(latencies),
        preemption_latency_during_failover: percentiles(latenciesDuring),
        settled_after_last_fault_s: settledAt ? Math.round((settledAt - lastFaultEnd) / 100) / 10 : null,
        evidence: {
          jobs_created_in_idle_window: verdict.inWindow.slice(0, limit),
          jobs_raced_and_deleted: verdict.raced.slice(0, limit),
          two_live_attempts_same_model_or_node: verdict.twoLive.slice(0, limit),
          lost_cancels: verdict.lost.slice(0, limit),
          lost_cancels_log_lines: await linesAbout(
            logDir,
            verdict.lost
              .slice(0, 3)
              .flatMap((l) => [String(l.job).split('/')[1] ?? '', String(l.model).replace('/', '.')]),
          ),
          backfills_not_settled: Object.entries(problems)
            .slice(0, limit)
            .map(([k, v]) => `${k}: ${v}`),
          processes_crashed: crashes.slice(0, limit).map((c) => ({ ...c, logTail: c.logTail.split('\n').slice(-6) })),
          // Where to look in the function logs when the latency during a failover is high.
          slowest_preemptions: preemptions
            .filter((p) => p.latencyMs !== undefined)
            .sort((a, b) => (b.latencyMs ?? 0) - (a.latencyMs ?? 0))
            .slice(0, 5)
            .map((p) => ({ ...p, ackAt: new Date(p.ackAt).toISOString() })),
        },
      }
      sayEvidence(say, result.evidence)
      return result
    },
  )
}
