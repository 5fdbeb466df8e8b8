// Server loss on a 3-server JetStream cluster, the short variant of `npm run failover` (dev/chaos/failover.ts): its own
// environment with NATS as a cluster and every stream and bucket at three replicas, the functions as separate
// processes, the chaos workload and traffic; the server leading the claims bucket is killed with SIGKILL and
// restarted. The oracle (it trusts no function state) must count nothing: no Job inside an idle window, no second
// live attempt per model or node, no lost cancel (10 s from the request; from the new leader when it fell in the election), no
// backfill left unsettled (no timer lost), no crash. About 100 s, most of it the environment and the build.
import { describe, expect, it } from 'vitest'
import { withOverrides } from '../../../dev/chaos/config.js'
import { type FailoverConfig, runFailover, shortFailover } from '../../../dev/chaos/failover.js'

describe('failover (short variant)', () => {
  it('keeps every invariant when the leader of the claims bucket is killed', async () => {
    const lines: string[] = []
    const config: FailoverConfig = { ...shortFailover, ...withOverrides(shortFailover) }
    const result = await runFailover(config, {
      log: (line) => {
        lines.push(line)
        if (process.env.CHAOS_VERBOSE) process.stderr.write(`[failover] ${line}\n`)
      },
      evidence: 5,
    })
    const { evidence, ...summary } = result
    process.stderr.write(`[failover] ${JSON.stringify(summary)}\n`)
    const failing = [
      'jobs_created_in_idle_window',
      'two_live_attempts_same_model_or_node',
      'lost_cancels',
      'backfills_not_settled',
      'processes_crashed',
      'timers_lost',
    ].filter((k) => result[k as keyof typeof result] !== 0)
    if (failing.length) process.stderr.write(`${lines.join('\n')}\n${JSON.stringify(evidence, null, 2)}\n`)
    // The run happened as configured, or a zero proves nothing.
    expect(result.replicas).toBe(3)
    expect(result.kills).toHaveLength(1)
    expect(result.kills[0]?.new_leader).not.toBe(result.kills[0]?.server)
    expect(result.foreground_requests).toBeGreaterThan(20)
    expect(result.jobs_created).toBeGreaterThan(0)
    // Every Job's creation timed by the apiserver itself (dev/chaos/audit.ts), not by the watch's delivery.
    expect(result.jobs_timed_by_audit).toBe(result.jobs_created)
    expect(failing).toEqual([])
  }, 300_000)
})
