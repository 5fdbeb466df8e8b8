// The chaos oracle's idle-window rule and its one exception (chaos/oracle.ts, chaos/README.md): a request that may
// have raced the Job's POST is allowed only when the watch saw the Job deleted within 1 s of the request's store
// time; anything else inside the window counts. Judged from the oracle's own records, as in a run.
import { KubeConfig } from '@kubernetes/client-node'
import { describe, expect, it } from 'vitest'
import { short } from '../../chaos/config.js'
import { Oracle } from '../../chaos/oracle.js'
import { emptyWorkload, type ForegroundRequest } from '../../chaos/workload.js'

const T = Date.parse('2026-12-01T12:00:00.000Z')
const W = 4_000

function judge(job: { addedAt: number; endAt?: number; endHow?: string; createdSecond?: number }, storedAt: number) {
  const workload = emptyWorkload()
  workload.backfills.push({ namespace: 'a', name: 'bf', model: 'm', node: 'n', idleForMs: W, hostile: false })
  const oracle = new Oracle(new KubeConfig(), workload, short, () => {})
  oracle.jobs.set('uid-1', {
    uid: 'uid-1',
    namespace: 'a',
    name: 'bf-1',
    owner: 'a/bf',
    createdSecond: job.createdSecond ?? Math.floor(job.addedAt / 1000) * 1000,
    addedAt: job.addedAt,
    addedSeq: 1,
    endAt: job.endAt,
    endSeq: job.endAt === undefined ? undefined : 2,
    endHow: job.endHow,
  })
  const request: ForegroundRequest = {
    model: 'a/m',
    sentAt: storedAt - 2,
    ackAt: storedAt + 1,
    seq: 7,
    background: false,
  }
  return oracle.evaluate([request], T + 60_000, async () => storedAt)
}

describe('oracle: a Job created inside an idle window', () => {
  it.each([
    // [what, job, request stored at, counted, raced]
    ['stored 300 ms before, the Job never deleted', { addedAt: T }, T - 300, 1, 0],
    ['stored 300 ms before, deleted 600 ms later', { addedAt: T, endAt: T + 600, endHow: 'deleting' }, T - 300, 0, 1],
    // The failover run's finding: stored 309–373 ms before, deleted through demand → cancel about 1.3 s later.
    ['stored 350 ms before, deleted 1.3 s later', { addedAt: T, endAt: T + 1_300, endHow: 'deleting' }, T - 350, 1, 0],
    [
      'stored 1.5 s before (visible to admit), deleted at once',
      { addedAt: T, endAt: T + 100, endHow: 'deleted' },
      T - 1_500,
      1,
      0,
    ],
    [
      'stored 900 ms before, deleted 50 ms after it was seen',
      { addedAt: T, endAt: T + 50, endHow: 'deleted' },
      T - 900,
      0,
      1,
    ],
    ['within the tolerance: stored 200 ms before', { addedAt: T }, T - 200, 0, 0],
    ['before the window: stored idleFor before', { addedAt: T }, T - W, 0, 0],
    [
      'ended by a finished condition, not a deletion',
      { addedAt: T, endAt: T + 100, endHow: 'Complete' },
      T - 300,
      1,
      0,
    ],
  ])('%s', async (_, job, storedAt, counted, raced) => {
    const verdict = await judge(job, storedAt)
    expect(verdict.inWindow).toHaveLength(counted)
    expect(verdict.raced).toHaveLength(raced)
  })

  it('a relisted watch (creation known only to the second) gets no allowance', async () => {
    const verdict = await judge({ addedAt: T + 3_000, createdSecond: T, endAt: T + 3_100, endHow: 'deleting' }, T - 500)
    expect(verdict.inWindow).toHaveLength(1)
    expect(verdict.raced).toHaveLength(0)
  })
})
