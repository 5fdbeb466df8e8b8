// admit's raced path (pkg/admission/create-job.ts): a request raced the POST, or the read after it gave no answer, and
// admit deleted the Job it had just created. The decision made again on that cancel records it without a second
// DELETE of the same Job, as cancel's bookkeeping does (the trigger carries the UID whose DELETE was accepted).
import { describe, expect, it } from 'vitest'
import { createAttemptJob } from '../../pkg/admission/create-job.js'
import type { AdmissionPorts } from '../../pkg/admission/ports.js'
import type { Action, Decision, Trigger } from '../../pkg/core/decision.js'
import { fakeDeps } from './support/deps.js'
import { type Gate, MemoryJobs, MemoryKv, MemoryRequests, memoryPorts } from './support/memory-ports.js'
import { aCronJob, aJob, anIdleState, iso, J, MINUTE, silentLogger, T0, TEMPLATE, Timeline } from './support/world.js'

/** The Starting decision that creates J1 at T0+10m (a quiet window complete), and the world it was made in. */
function admitted() {
  const t = new Timeline()
  t.step(T0)
  const now = T0 + 10 * MINUTE
  const d = t.step(now)
  const create = d.actions.find((a): a is Extract<Action, { type: 'createJob' }> => a.type === 'createJob')
  if (!create) throw new Error('no createJob at the end of the window')
  return { t, d, create, now }
}

/** The in-memory ports, a request stored `raceAt` while the POST is in flight, the n-th newest-request read failing. */
function ports(now: number, raceAt: number, o: { failRead?: number; deleteAnswer?: 'replaced' } = {}) {
  const clock = { now: () => now }
  let reads = 0
  let requests: MemoryRequests | undefined
  const gate: Gate = async (op) => {
    if (op === 'requests.newest' && ++reads === o.failRead) return 'failBefore'
    if (op === 'jobs.create')
      requests?.store({ namespace: 'ns', model: 'llm', at: raceAt, subject: 'documented' } as never)
    return 'ok'
  }
  requests = new MemoryRequests(new MemoryKv('idle', gate), clock, gate)
  const jobs = new MemoryJobs(clock, gate)
  const p: AdmissionPorts = memoryPorts({
    claims: new MemoryKv('claims'),
    states: new MemoryKv('backfills'),
    requests,
    jobs,
    clock,
    log: silentLogger,
  })
  const answer = o.deleteAnswer
  if (answer) p.jobs = { ...p.jobs, create: p.jobs.create.bind(p.jobs), delete: async () => answer }
  return { ports: p, jobs }
}

/** admit's createJob of `create` over `p`; the trigger it hands back to decide with. */
async function raced(a: ReturnType<typeof admitted>, p: AdmissionPorts) {
  const { t, d, create, now } = a
  const b = t.world.backfill
  if (!b) throw new Error('no backfill')
  const deps = fakeDeps({ log: silentLogger, now: () => now, kube: { recordEvent: async () => {} } })
  const out = await createAttemptJob(deps, p, b, aCronJob(TEMPLATE, 'uid-tpl'), d, create, { cursor: 0 })
  if (typeof out !== 'object' || !('raced' in out)) throw new Error(`not raced: ${JSON.stringify(out)}`)
  return out.raced
}

/** decide() on the world after the raced POST: J1 (of `uid`) deleting, the request in the idle state. */
function decideAfter(t: Timeline, uid: string, trigger: Trigger, now: number) {
  t.change(() => ({ idle: anIdleState(now - 10), job: aJob(J(1), { uid, deleting: true }) }))
  return t.step(now, trigger)
}

const deletes = (d: Decision) => d.actions.filter((a) => a.type === 'deleteJob')

describe("admit's raced admission", () => {
  it('a request stored during the POST: the cancel is recorded without a second DELETE of the Job it deleted', async () => {
    const a = admitted()
    const { t, now } = a
    const w = ports(now, now - 10)
    const trigger = await raced(a, w.ports)
    const uid = w.jobs.created[0]?.uid as string
    expect(trigger).toMatchObject({ type: 'cancel', reason: 'ForegroundDemand', at: iso(now - 10), deletedUid: uid })
    const after = decideAfter(t, uid, trigger, now + 5)
    expect(after.state).toMatchObject({ phase: 'Cancelling', reason: 'ForegroundDemand' })
    expect(after.state?.counters.preemptions).toEqual({ foreground: 1 })
    expect(deletes(after)).toEqual([])
  })

  it('the read after the POST gave no answer: the same (the fail-safe reason)', async () => {
    const a = admitted()
    const { t, now } = a
    const w = ports(now, now - 10, { failRead: 2 })
    const trigger = await raced(a, w.ports)
    const uid = w.jobs.created[0]?.uid as string
    expect(trigger).toMatchObject({ type: 'cancel', deletedUid: uid })
    expect(deletes(decideAfter(t, uid, trigger, now + 5))).toEqual([])
  })

  it('a DELETE that met another Job under the name says nothing was deleted: that Job is still deleted', async () => {
    const a = admitted()
    const { t, now } = a
    const w = ports(now, now - 10, { deleteAnswer: 'replaced' })
    const trigger = await raced(a, w.ports)
    expect(trigger).not.toHaveProperty('deletedUid')
    expect(deletes(decideAfter(t, 'uid-other', trigger, now + 5))).toEqual([
      { type: 'deleteJob', jobName: J(1), why: 'ForegroundDemand' },
    ])
  })
})
