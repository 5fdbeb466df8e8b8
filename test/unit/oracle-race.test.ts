// The chaos oracle's idle-window rule and its one exception (dev/chaos/oracle.ts, dev/chaos/README.md): a request that may
// have raced the Job's POST is allowed only when the watch saw the Job deleted within 1 s of the request's store
// time; anything else inside the window counts. Judged from the oracle's own records, as in a run.
import { KubeConfig } from '@kubernetes/client-node'
import { describe, expect, it } from 'vitest'
import { type JobAudit, parseJobAudit } from '../../dev/chaos/audit.js'
import { short } from '../../dev/chaos/config.js'
import { type FaultWindow, Oracle } from '../../dev/chaos/oracle.js'
import { emptyWorkload, type ForegroundRequest } from '../../dev/chaos/workload.js'

const T = Date.parse('2026-12-01T12:00:00.000Z')
const W = 4_000

function judge(
  job: { addedAt: number; endAt?: number; endHow?: string; createdSecond?: number },
  storedAt: number,
  audit?: JobAudit,
  faults: FaultWindow[] = [],
) {
  const workload = emptyWorkload()
  workload.backfills.push({ namespace: 'a', name: 'bf', model: 'm', node: 'n', idleForMs: W, hostile: false })
  const oracle = new Oracle(new KubeConfig(), workload, short, () => {})
  for (const f of faults) oracle.fault(f)
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
  return oracle.evaluate([request], T + 60_000, async () => storedAt, audit)
}

/** An audit event as kube-apiserver writes it (--audit-log-format=json, level Metadata, stage ResponseComplete). */
function auditLine(verb: 'create' | 'delete', code: number, receivedAt: number, completedAt: number, name = 'bf-1') {
  // The apiserver's microseconds: Date.parse keeps the milliseconds.
  const micro = (t: number) => new Date(t).toISOString().replace('Z', '417Z')
  return JSON.stringify({
    kind: 'Event',
    apiVersion: 'audit.k8s.io/v1',
    level: 'Metadata',
    auditID: `id-${verb}-${receivedAt}`,
    stage: 'ResponseComplete',
    requestURI: verb === 'create' ? '/apis/batch/v1/namespaces/a/jobs' : `/apis/batch/v1/namespaces/a/jobs/${name}`,
    verb,
    user: { username: 'system:admin', groups: ['system:masters', 'system:authenticated'] },
    sourceIPs: ['127.0.0.1'],
    userAgent: 'node-fetch',
    objectRef: { resource: 'jobs', namespace: 'a', name, apiGroup: 'batch', apiVersion: 'v1' },
    responseStatus: { metadata: {}, code },
    requestReceivedTimestamp: micro(receivedAt),
    stageTimestamp: micro(completedAt),
    annotations: { 'authorization.k8s.io/decision': 'allow' },
  })
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

  it('a watch that delivered the Job late: the apiserver audit times it, and the raced request is allowed', async () => {
    // The watch saw ADDED 700 ms after the apiserver received the POST (a loaded machine), and the deletion as late:
    // by the watch the request was stored 570 ms before the Job and deleted 1.2 s after it; by the apiserver it was
    // stored while the POST was in flight and the DELETE completed 500 ms after it.
    const received = T + 130
    const job = { addedAt: T + 830, createdSecond: T, endAt: T + 1_460, endHow: 'deleting' }
    const withoutAudit = await judge(job, T + 260)
    expect(withoutAudit.inWindow).toHaveLength(1)
    const audit = parseJobAudit(
      [
        auditLine('create', 201, received, received + 40),
        // Refused writes are no creation or deletion.
        auditLine('create', 409, T + 300, T + 310),
        auditLine('delete', 404, T + 600, T + 610),
        auditLine('delete', 200, T + 740, T + 760),
        // A torn last line while the apiserver stops.
        '{"kind":"Event","stage":"ResponseCo',
      ].join('\n'),
    )
    expect(audit.unreadable).toBe(1)
    const verdict = await judge(job, T + 260, audit)
    expect(verdict.inWindow).toHaveLength(0)
    expect(verdict.timedByAudit).toBe(1)
  })

  it('timed by the apiserver audit, a request stored before the POST arrived still counts', async () => {
    const received = T + 500
    const audit = parseJobAudit(
      [auditLine('create', 201, received, received + 30), auditLine('delete', 200, T + 2_000, T + 2_020)].join('\n'),
    )
    // Stored 400 ms before the POST arrived; the DELETE completed 1.9 s after it: neither raced nor allowed.
    const verdict = await judge({ addedAt: T + 540, endAt: T + 2_100, endHow: 'deleting' }, T + 100, audit)
    expect(verdict.inWindow).toHaveLength(1)
    expect(verdict.inWindow[0]).toMatchObject({
      timedBy: 'apiserver audit',
      certain: true,
      lastRequestStoredMsBeforeCreation: 400,
      deletedMsAfterRequest: 1_920,
      postMs: 30,
      watchLagMs: 10,
      createdBy: 'system:admin',
    })
    // Deleted within the bound instead: raced, not counted.
    const quick = parseJobAudit(
      [auditLine('create', 201, received, received + 30), auditLine('delete', 200, T + 900, T + 950)].join('\n'),
    )
    const raced = await judge({ addedAt: T + 540, endAt: T + 1_100, endHow: 'deleting' }, T + 100, quick)
    expect(raced.inWindow).toHaveLength(0)
    expect(raced.raced).toHaveLength(1)
  })

  it("timed by the apiserver audit, the window's edge is the simulation's 100 ms, not the watch's 250 ms", async () => {
    const received = T + 500
    const audit = parseJobAudit(auditLine('create', 201, received, received + 20))
    // Stored 150 ms before the POST arrived and never deleted: inside the bound a watch needs, outside the audit's.
    expect((await judge({ addedAt: received + 30 }, received - 150, audit)).inWindow).toHaveLength(1)
    expect((await judge({ addedAt: received + 30 }, received - 80, audit)).inWindow).toHaveLength(0)
  })

  it('an audit of another Job of the same name (another second) is not used', async () => {
    const audit = parseJobAudit(auditLine('create', 201, T - 5_000, T - 4_990))
    const verdict = await judge({ addedAt: T }, T - 300, audit)
    expect(verdict.timedByAudit).toBe(0)
    expect(verdict.inWindow).toHaveLength(1)
    expect(verdict.inWindow[0]).toMatchObject({ timedBy: 'watch' })
  })

  it('the admit that POSTed it killed after the POST: deleting it is demand → cancel’s, within a lost cancel’s deadline', async () => {
    // A Job POSTed 446 ms after a request was stored (the POST late on a loaded machine) and deleted 3.9 s after the
    // request: counted, unless the admit that sent it was killed before it could read the newest request again.
    const received = T + 446
    const audit = parseJobAudit(
      [auditLine('create', 201, received, received + 4), auditLine('delete', 200, T + 3_880, T + 3_900)].join('\n'),
    )
    const job = { addedAt: received + 20, endAt: T + 3_950, endHow: 'deleting' }
    expect((await judge(job, T, audit)).inWindow).toHaveLength(1)
    const kill = (start: number, fn = 'admit'): FaultWindow => ({ kind: 'kill', fn, start, end: start + 1_000 })
    const killed = await judge(job, T, audit, [kill(received + 10)])
    expect(killed.inWindow).toHaveLength(0)
    expect(killed.raced).toEqual([
      expect.objectContaining({ admitKilledAfterPost: true, deletedMsAfterRequest: 3_900 }),
    ])
    // Another function killed, or admit killed long before or after: admit's own second still holds.
    const otherKilled = await judge(job, T, audit, [kill(received + 10, 'lifecycle')])
    expect(otherKilled.inWindow).toEqual([expect.objectContaining({ killsAround: ['lifecycle 10 ms'] })])
    expect((await judge(job, T, audit, [kill(received - 2_000)])).inWindow).toHaveLength(1)
    expect((await judge(job, T, audit, [kill(received + 2_000)])).inWindow).toHaveLength(1)
    // And past the lost-cancel deadline it counts whatever happened to admit.
    const late = parseJobAudit(
      [auditLine('create', 201, received, received + 4), auditLine('delete', 200, T + 12_000, T + 12_020)].join('\n'),
    )
    const lateJob = { addedAt: received + 20, endAt: T + 12_050, endHow: 'deleting' }
    expect((await judge(lateJob, T, late, [kill(received + 10)])).inWindow).toHaveLength(1)
  })
})
