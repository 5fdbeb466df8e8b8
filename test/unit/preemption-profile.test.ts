// The preemption hop profile: the benchmark's, demand's and cancel's lines are joined by Job name into consecutive
// hops, a Job's first cancel counts (the one that deleted it), and lines it cannot read are skipped.
import { describe, expect, it } from 'vitest'
import { BENCH_LINE, preemptionProfile } from '../../dev/bench/preemption-profile.js'

const line = (o: object) => JSON.stringify(o)

describe('preemptionProfile', () => {
  it('gives each hop of every preemption the benchmark made, in path order', () => {
    const lines = Array.from({ length: 10 }, (_, i) => {
      const job = `b-${i}-1`
      const s = 1000 * i
      return [
        line({
          msg: 'demand: cancel published',
          job,
          via: i < 8 ? 'watch' : 'read',
          t: { stored: s + 1, handled: s + 3, acked: s + 7 },
        }),
        line({
          msg: 'cancel: job delete accepted',
          job,
          t: { stored: s + 5, handled: s + 6 + i, job: s + 20 + i, pods: s + 25 + i },
        }),
        // A second cancel of the same Job (lifecycle's, later): not the one that deleted it.
        line({ msg: 'cancel: job delete accepted', job, t: { stored: s + 40, handled: s + 50, job: s + 60 } }),
        line({ msg: BENCH_LINE, job, t: { sent: s, acked: s + 2, jobSeen: s + 22 + i, podsSeen: s + 30 + i } }),
      ]
    }).flat()
    // Not the benchmark's Jobs, unreadable, or cut short: ignored.
    lines.push(line({ msg: 'cancel: job delete accepted', job: 'other', t: { stored: 0, handled: 1e6 } }))
    lines.push(`{"msg":"${BENCH_LINE}", cut off`, 'plain text', '')
    const { rows, samples, vias } = preemptionProfile(lines.join('\n'))
    expect(samples).toBe(10)
    expect(vias).toEqual({ watch: 8, read: 2 })
    const hop = Object.fromEntries(rows.map((r) => [r.hop, r]))
    expect(hop.publish_to_stored).toMatchObject({ n: 10, p50: 1, p99: 1 })
    expect(hop.stored_to_demand?.p50).toBe(2)
    expect(hop.demand_to_cancel_stored?.p50).toBe(2)
    expect(hop.cancel_stored_to_demand_puback?.p50).toBe(2)
    expect(hop.cancel_queued).toMatchObject({ p50: 5, p99: 10, max: 10 })
    expect(hop.job_delete?.p50).toBe(14)
    expect(hop.pods_delete?.p50).toBe(5)
    expect(hop.pods_watch?.p50).toBe(5)
    expect(hop.job_watch?.p50).toBe(2)
    expect(hop.total_pods).toMatchObject({ p50: 34, p99: 39 })
    expect(rows.map((r) => r.hop)).toEqual([
      'publish_to_stored',
      'publish_to_puback',
      'stored_to_demand',
      'demand_to_cancel_stored',
      'cancel_stored_to_demand_puback',
      'cancel_queued',
      'job_delete',
      'pods_delete',
      'pods_watch',
      'job_watch',
      'total_job',
      'total_pods',
    ])
  })
})
