// The chaos oracle's fail-safe rule (dev/chaos/oracle.ts, dev/chaos/README.md): a workload Job still live the fail-safe's
// bound plus its slack into a NATS outage that lasted that long ran while nothing could see a foreground request.
// Judged from the oracle's own records, as in a run.
import { KubeConfig } from '@kubernetes/client-node'
import { describe, expect, it } from 'vitest'
import { short } from '../../dev/chaos/config.js'
import { Oracle } from '../../dev/chaos/oracle.js'
import { emptyWorkload } from '../../dev/chaos/workload.js'

const T = Date.parse('2026-12-01T12:00:00.000Z')
const BY = short.failSafeBoundMs + short.failSafeSlackMs

function blind(
  job: { addedAt: number; endAt?: number },
  outage: { start: number; end: number },
  cancelKill?: { start: number; end: number },
) {
  const workload = emptyWorkload()
  workload.backfills.push({ namespace: 'a', name: 'bf', model: 'm', node: 'n', idleForMs: 4_000, hostile: false })
  const oracle = new Oracle(new KubeConfig(), workload, short, () => {})
  oracle.jobs.set('uid-1', {
    uid: 'uid-1',
    namespace: 'a',
    name: 'bf-1',
    owner: 'a/bf',
    createdSecond: Math.floor(job.addedAt / 1000) * 1000,
    addedAt: job.addedAt,
    addedSeq: 1,
    endAt: job.endAt,
    endSeq: job.endAt === undefined ? undefined : 2,
    endHow: job.endAt === undefined ? undefined : 'deleting',
  })
  oracle.fault({ kind: 'nats-restart', ...outage })
  if (cancelKill) oracle.fault({ kind: 'kill', fn: 'cancel', ...cancelKill })
  return oracle.runningWhileBlind(T + 120_000)
}

describe('oracle: a Job running while foreground demand cannot be observed', () => {
  const outage = { start: T, end: T + short.natsDownMs }
  it.each([
    // [what, job, counted]
    ['live before, deleted within the bound', { addedAt: T - 10_000, endAt: T + short.failSafeBoundMs + 500 }, 0],
    ['live before, deleted just past bound + slack', { addedAt: T - 10_000, endAt: T + BY + 1 }, 1],
    ['live before, never deleted', { addedAt: T - 10_000 }, 1],
    ['created after the check (a raced admission the next probe deletes)', { addedAt: T + BY + 10 }, 0],
    ['ended before the outage', { addedAt: T - 10_000, endAt: T - 1 }, 0],
  ])('%s → %i', (_, job, counted) => {
    expect(blind(job, outage)).toHaveLength(counted)
  })

  it('a cancel killed during the outage: its bound runs from its restart (seen in a CI chaos run: 8.4 s)', () => {
    const long = { start: T, end: T + 30_000 }
    const kill = { start: T + 2_000, end: T + 5_000 }
    expect(blind({ addedAt: T - 10_000, endAt: T + 5_000 + BY - 1 }, long, kill)).toEqual([])
    expect(blind({ addedAt: T - 10_000, endAt: T + 5_000 + BY + 1 }, long, kill)).toHaveLength(1)
    // Without the kill the bound runs from the outage's start.
    expect(blind({ addedAt: T - 10_000, endAt: T + BY + 1 }, long)).toHaveLength(1)
  })

  it('an outage shorter than bound + slack proves nothing either way', () => {
    expect(blind({ addedAt: T - 10_000 }, { start: T, end: T + BY - 1 })).toEqual([])
  })

  it('the short preset keeps NATS down long enough for the rule to judge', () => {
    expect(short.natsDownMs).toBeGreaterThan(BY)
  })
})
