// One chaos run: its own environment (etcd, kube-apiserver, kube-controller-manager, nats-server), the functions
// as separate processes, the workload and its traffic, the faults on a schedule, then the oracle's verdict.
// Everything is bounded in time; every process and server is stopped however the run ends.
import { sleep, waitFor } from '../../test/env/exec.js'
import { type ChaosConfig, rng } from './config.js'
import { createForeignJobs, publishHostile, removeQuota, setQuota } from './faults.js'
import { type Crash, FUNCTIONS, type FunctionName } from './fleet.js'
import { type Counts, type FaultWindow, Oracle } from './oracle.js'
import { awaitCancelDeadlines, awaitSettled, countsOf, sayEvidence, verdictOf, withRig } from './setup.js'
import { declareWorkload, emptyWorkload, NAMESPACES, startTraffic } from './workload.js'

export interface ChaosResult extends Counts {
  ok: boolean
  seed: number
  duration_s: number
  kills: number
  crashes_by_function: Record<string, number>
  /** Not an invariant: processes that exited before they were ready (a dependency down at start). */
  exits_while_starting: number
  max_rss_mb: Record<string, number>
  foreground_requests: number
  foreground_requests_refused: number
  jobs_created: number
  /** Not an invariant: Jobs a request raced (stored while the POST was in flight) that were deleted promptly. */
  jobs_raced_and_deleted: number
  /** Workload Jobs whose creation the oracle timed by the apiserver's audit log (all of them, when it works). */
  jobs_timed_by_audit: number
  /** The oracle's watch: how late it saw a Job created, at most (what timing by the watch alone would be off by). */
  watch_lag_ms_max: number
  hostile_events_stored: number
  hostile_events_refused: number
  hostile_refs_accepted: number
  faults: Record<string, number>
  settled_after_last_fault_s: number | null
  evidence: Record<string, unknown[]>
  logs?: string
}

const describeExit = (c: Crash) => ({
  ...c,
  at: new Date(c.at).toISOString(),
  // The error line of a Node.js crash, or the last lines.
  logTail: c.logTail
    .split('\n')
    .filter((l) => /Error|error|at |exit/.test(l))
    .slice(0, 6),
})

export interface RunOptions {
  log?: (line: string) => void
  /** How many evidence items per invariant (default 20). */
  evidence?: number
  /** Keep the function logs even when every invariant holds. */
  keepLogs?: boolean
}

export async function runChaos(config: ChaosConfig, opts: RunOptions = {}): Promise<ChaosResult> {
  const random = rng(config.seed)
  return withRig(
    {
      name: 'chaos',
      seed: config.seed,
      log: opts.log ?? ((line: string) => process.stderr.write(`[chaos] ${line}\n`)),
      keepLogs: opts.keepLogs,
      restartDelayMs: () => random.between(config.restartDelayMinMs, config.restartDelayMaxMs),
      fleet: () => ({ env: { FAILSAFE_BLIND_MS: String(config.failSafeBoundMs) } }),
    },
    async ({ say, started, env, kc, nc, jsm, fleet, defer }) => {
      say(`functions running, each in a process of its own: ${FUNCTIONS.join(', ')}`)

      // The oracle watches before anything is created: it sees every Job as it appears.
      const workload = emptyWorkload()
      const oracle = new Oracle(kc, workload, config, say)
      await oracle.start()
      defer(() => oracle.stop())
      const foreignJobs = await createForeignJobs(kc)
      for (const job of foreignJobs) oracle.foreign.add(job)
      await declareWorkload(kc, nc, config, random, say, workload)
      const traffic = startTraffic(nc, workload, config, random)
      defer(() => traffic.stop())

      const progress = setInterval(() => {
        const jobs = [...oracle.jobs.values()].filter((j) => j.owner)
        const active = oracle.faults.filter((f) => f.start <= Date.now() && f.end >= Date.now() && f.kind !== 'kill')
        say(
          `requests ${traffic.requests.length}, attempts created ${jobs.length} (live ${jobs.filter((j) => j.endAt === undefined).length}), ` +
            `kills ${oracle.faults.filter((f) => f.kind === 'kill').length}, crashes ${fleet.crashes.length}` +
            `${active.length ? `; now: ${active.map((f) => f.kind).join(', ')}` : ''}`,
        )
      }, 10_000)
      defer(async () => clearInterval(progress))

      say(`warm-up ${config.warmupMs / 1000} s`)
      await sleep(config.warmupMs)

      // The fault phase: every fault is scheduled at an offset, all are awaited. Deferred last, so cleared first: no
      // fault fires while the run is torn down.
      const phaseStart = Date.now()
      const timers = new Set<NodeJS.Timeout>()
      defer(async () => {
        for (const timer of timers) clearTimeout(timer)
      })
      const at = (offsetMs: number, action: () => Promise<void>) =>
        new Promise<void>((resolve, reject) => {
          const timer = setTimeout(
            () => {
              timers.delete(timer)
              action().then(resolve, reject)
            },
            Math.max(0, phaseStart + offsetMs - Date.now()),
          )
          timers.add(timer)
        })
      const window = (kind: FaultWindow['kind'], start: number, end = Date.now(), fn?: string) =>
        oracle.fault({ kind, start, end, fn })
      const faults: Promise<void>[] = []

      let kills = 0
      for (let k = 0; k < config.kills; k++) {
        const offset = random.between(2_000, config.faultPhaseMs - 2_000)
        faults.push(
          at(offset, async () => {
            // A random function that is up (a paused or already killed one is not picked).
            for (let tries = 0; tries < 20; tries++) {
              const fn = random.pick(FUNCTIONS) as FunctionName
              const killedAt = fleet.kill9(fn)
              if (killedAt === undefined) continue
              kills++
              window('kill', killedAt, killedAt + config.restartDelayMaxMs + config.processStartAllowanceMs, fn)
              return
            }
          }),
        )
      }

      const longestWindow = Math.max(...workload.backfills.filter((b) => !b.hostile).map((b) => b.idleForMs))
      faults.push(
        at(config.demandPauseAtMs, async () => {
          await waitFor('demand up to pause it', () => fleet.upSince('demand') !== undefined, { timeoutMs: 20_000 })
          const from = Date.now()
          fleet.pause('demand')
          say(`demand SIGSTOPped for ${(longestWindow + config.demandPauseExtraMs) / 1000} s`)
          await sleep(longestWindow + config.demandPauseExtraMs)
          fleet.resume('demand')
          window('demand-pause', from)
          say('demand resumed (SIGCONT)')
        }),
      )

      faults.push(
        at(config.quotaAtMs, async () => {
          const from = Date.now()
          await setQuota(kc)
          say(`ResourceQuota count/jobs.batch=0 in ${NAMESPACES[1]} for ${config.quotaForMs / 1000} s`)
          await sleep(config.quotaForMs)
          await removeQuota(kc)
          window('quota', from)
          say('ResourceQuota removed')
        }),
      )

      faults.push(
        at(config.natsRestartAtMs, async () => {
          const from = Date.now()
          say('nats-server stopped')
          await env.stopServer('nats-server')
          await sleep(config.natsDownMs)
          await env.startServer('nats-server')
          window('nats-restart', from)
          say(`nats-server back (same port and JetStream store) after ${((Date.now() - from) / 1000).toFixed(1)} s`)
        }),
      )

      const apiserverFault = at(config.apiserverStopAtMs, async () => {
        const from = Date.now()
        say(`kube-apiserver stopped for ${config.apiserverDownMs / 1000} s`)
        await env.stopServer('kube-apiserver')
        await sleep(config.apiserverDownMs)
        await env.startServer('kube-apiserver')
        window('apiserver-stop', from)
        say(`kube-apiserver back after ${((Date.now() - from) / 1000).toFixed(1)} s`)
      })
      faults.push(apiserverFault)

      let hostile = { stored: 0, refused: 0, kinds: {} as Record<string, number> }
      faults.push(
        at(config.hostileFromMs, async () => {
          const from = Date.now()
          say(`publishing ${config.hostileEvents} hostile events over ${config.hostileForMs / 1000} s`)
          hostile = await publishHostile(
            nc,
            random,
            foreignJobs,
            config.hostileEvents,
            config.hostileHugeBodies,
            config.hostileForMs,
            config.hostilePoisonShare,
          )
          window('hostile-events', from)
          say(`hostile events: ${hostile.stored} stored, ${hostile.refused} refused by NATS`)
        }),
      )

      await Promise.all(faults)
      const faultsOver = Math.max(...oracle.faults.filter((f) => f.kind !== 'kill').map((f) => f.end))
      await sleep(
        Math.max(0, phaseStart + config.faultPhaseMs - Date.now(), faultsOver + config.trafficTailMs - Date.now()),
      )
      await traffic.stop()
      const lastFaultEnd = Math.max(...oracle.faults.map((f) => f.end), Date.now())
      say(
        `fault phase over; traffic stopped; waiting up to ${config.settleWithinMs / 1000} s for every backfill to settle`,
      )

      // Settling: polled every 2 s until consistent or the bound after the last fault.
      const { problems, settledAt } = await awaitSettled(oracle, traffic.requests, lastFaultEnd, config.settleWithinMs)
      say(
        settledAt
          ? `every backfill settled ${((settledAt - lastFaultEnd) / 1000).toFixed(1)} s after the last fault`
          : `${Object.keys(problems).length} backfill(s) not settled ${config.settleWithinMs / 1000} s after the last fault`,
      )
      // Every request's cancel deadline has passed before the verdict.
      await awaitCancelDeadlines(traffic.requests, config.cancelBoundMs)

      // A kill's fault window ends when the process that replaced it was ready (or after the allowance).
      for (const f of oracle.faults) {
        if (f.kind !== 'kill' || !f.fn) continue
        const ready = fleet.readyAfter(f.fn as FunctionName, f.start)
        f.end = ready ?? f.start + config.restartDelayMaxMs + config.processStartAllowanceMs
      }
      const verdict = await verdictOf(oracle, jsm, traffic.requests, env.auditLogPath)
      const limit = opts.evidence ?? 20
      const crashes = fleet.crashes.filter((c) => !c.duringStartup)
      const startupFailures = fleet.crashes.filter((c) => c.duringStartup)
      const crashesBy: Record<string, number> = {}
      for (const c of crashes) crashesBy[c.fn] = (crashesBy[c.fn] ?? 0) + 1
      const rssMb = Object.fromEntries(Object.entries(fleet.maxRssKb).map(([fn, kb]) => [fn, Math.round(kb / 1024)]))
      const counts = countsOf(
        verdict,
        problems,
        crashes.length,
        Object.values(rssMb).filter((mb) => mb > config.rssLimitMb).length,
      )
      const faultCounts: Record<string, number> = {}
      for (const f of oracle.faults) faultCounts[f.kind] = (faultCounts[f.kind] ?? 0) + 1
      const ok = Object.values(counts).every((n) => n === 0)
      const result: ChaosResult = {
        ...counts,
        ok,
        seed: config.seed,
        duration_s: Math.round((Date.now() - started) / 1000),
        kills,
        crashes_by_function: crashesBy,
        exits_while_starting: startupFailures.length,
        max_rss_mb: rssMb,
        foreground_requests: traffic.requests.length,
        foreground_requests_refused: traffic.failed(),
        jobs_created: [...oracle.jobs.values()].filter((j) => j.owner).length,
        jobs_raced_and_deleted: verdict.raced.length,
        jobs_timed_by_audit: verdict.timedByAudit,
        watch_lag_ms_max: verdict.watchLagMsMax,
        hostile_events_stored: hostile.stored,
        hostile_events_refused: hostile.refused,
        hostile_refs_accepted: workload.backfills.filter((b) => b.hostile).length,
        faults: faultCounts,
        settled_after_last_fault_s: settledAt ? Math.round((settledAt - lastFaultEnd) / 100) / 10 : null,
        evidence: {
          jobs_created_in_idle_window: verdict.inWindow.slice(0, limit),
          jobs_raced_and_deleted: verdict.raced.slice(0, limit),
          two_live_attempts_same_model_or_node: verdict.twoLive.slice(0, limit),
          foreign_jobs_deleted: verdict.foreignDeleted.slice(0, limit),
          lost_cancels: verdict.lost.slice(0, limit),
          jobs_running_while_blind: verdict.blind.slice(0, limit),
          backfills_not_settled: Object.entries(problems)
            .slice(0, limit)
            .map(([k, v]) => `${k}: ${v}`),
          processes_crashed: crashes.slice(0, limit).map(describeExit),
          exits_while_starting: startupFailures.slice(0, limit).map(describeExit),
        },
      }
      sayEvidence(say, result.evidence)
      return result
    },
  )
}
