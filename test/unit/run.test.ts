// The run identity (pkg/core/run.ts): the pure rules, then decide() under random histories of admissions,
// preemptions, crashes (the state lost, taken over from the status), retried POSTs, refusals, spec changes,
// successes and failures — one identity per run, the same for every attempt of it, a new one once a run ends, and
// the attempt number counting the run's attempts.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { checkSpec } from '../../pkg/core/api.js'
import { decide } from '../../pkg/core/decide.js'
import type { Decision, Observed, Trigger } from '../../pkg/core/decision.js'
import { buildJob } from '../../pkg/core/job.js'
import {
  ATTEMPT_ENV,
  beginAttempt,
  endRun,
  RUN_ID_ENV,
  RUN_ID_RE,
  type RunFields,
  runIdOf,
  soundRun,
  takeBackAttempt,
} from '../../pkg/core/run.js'
import {
  aBackfill,
  aCronJob,
  aJob,
  anIdleState,
  aWorld,
  cancelRequest,
  MINUTE,
  SECOND,
  T0,
  withSpec,
} from './support/world.js'

const fields = (o: Partial<RunFields> = {}): RunFields => ({
  namespace: 'ns',
  name: 'bf',
  uid: 'uid-1',
  generation: 1,
  attempts: 1,
  ...o,
})

describe('run rules', () => {
  it('derives a DNS-safe identity from the owner, the generation and the attempt that began the run', () => {
    const id = runIdOf('uid-1', 1, 1)
    expect(id).toMatch(RUN_ID_RE)
    expect(runIdOf('uid-1', 1, 1)).toBe(id)
    expect(new Set([id, runIdOf('uid-2', 1, 1), runIdOf('uid-1', 2, 1), runIdOf('uid-1', 1, 2)]).size).toBe(4)
  })

  it('continues the open run, begins a new one after it ended, and forgets a run whose only attempt is taken back', () => {
    const s = fields()
    beginAttempt(s)
    const first = s.runId
    expect(s).toMatchObject({ runAttempt: 1 })
    s.attempts = 2
    beginAttempt(s)
    expect(s).toMatchObject({ runId: first, runAttempt: 2 })
    takeBackAttempt(s)
    expect(s).toMatchObject({ runId: first, runAttempt: 1 })
    endRun(s)
    s.attempts = 2
    beginAttempt(s)
    expect(s.runId).not.toBe(first)
    expect(s).toMatchObject({ runAttempt: 1, runEnded: undefined })
    const second = s.runId
    takeBackAttempt(s)
    expect(s.runId).toBeUndefined()
    beginAttempt(s)
    expect(s.runId).toBe(second) // the retried admission derives the same identity
  })

  it('reads back only a sound identity and attempt number', () => {
    expect(soundRun(runIdOf('u', 1, 1), 2)).toEqual({ runId: runIdOf('u', 1, 1), runAttempt: 2 })
    for (const [id, n] of [
      ['not-hex', 1],
      [runIdOf('u', 1, 1), 0],
      [runIdOf('u', 1, 1), 1.5],
      [undefined, 1],
      [42, 1],
    ] as const) {
      expect(soundRun(id, n)).toBeUndefined()
    }
  })

  it('spec.env may not name the run identity or the attempt number', () => {
    const base = { modelRef: 'm', templateRef: 't', idleFor: '10m', maxRunDuration: '30m' }
    for (const name of [RUN_ID_ENV, ATTEMPT_ENV]) {
      expect(checkSpec({ ...base, env: { [name]: 'x' } })).toEqual({
        problem: { reason: 'InvalidEnvironment', message: `${name} is reserved and cannot be overridden` },
      })
    }
  })

  it("puts the controller's values in every container, replacing the template's", () => {
    const template = aCronJob('tpl', 'uid-tpl')
    const pod = template.spec?.jobTemplate.spec?.template.spec
    if (!pod) throw new Error('no pod')
    pod.initContainers = [{ name: 'init', image: 'busybox', env: [{ name: RUN_ID_ENV, value: 'mine' }] }]
    pod.containers.push({
      name: 'side',
      image: 'busybox',
      env: [{ name: ATTEMPT_ENV, valueFrom: { fieldRef: { fieldPath: 'x' } } }],
    })
    const job = buildJob({
      backfill: aBackfill(),
      template,
      name: 'j',
      node: 'n',
      maxRunDurationMs: MINUTE,
      run: { id: 'abc', attempt: 3 },
    })
    const spec = job.spec?.template.spec
    const all = [...(spec?.initContainers ?? []), ...(spec?.containers ?? [])]
    expect(all).toHaveLength(3)
    for (const c of all) {
      const env = c.env ?? []
      expect(
        env.filter((e) => e.name === RUN_ID_ENV),
        c.name,
      ).toEqual([{ name: RUN_ID_ENV, value: 'abc' }])
      expect(
        env.filter((e) => e.name === ATTEMPT_ENV),
        c.name,
      ).toEqual([{ name: ATTEMPT_ENV, value: '3' }])
    }
  })
})

type Op = 'tick' | 'start' | 'preempt' | 'complete' | 'fail' | 'specChange' | 'crash' | 'lostPost' | 'reject'
const OPS: Op[] = ['tick', 'start', 'preempt', 'complete', 'fail', 'specChange', 'crash', 'lostPost', 'reject']

/** One backfill driven through decide(), its Jobs created and deleted as the actions say; the oracle beside it. */
class History {
  world: Observed
  now = T0
  /** Identities handed out to runs that ended or run now. */
  readonly used = new Set<string>()
  /** The run in progress as the oracle sees it: its identity and its attempts so far. */
  run: { id: string; attempts: number } | undefined
  open = false
  lastJob: string | undefined
  runs = 0
  admissions = 0

  constructor(repeat: boolean) {
    this.world = aWorld({ backfill: aBackfill({ spec: repeat ? { repeatAfter: '1m' } : {} }) })
  }

  decide(trigger: Trigger = { type: 'timer' }): Decision {
    const d = decide(structuredClone(this.world), trigger, this.now)
    const before = this.world.state?.phase
    const backfill =
      this.world.backfill && d.status ? { ...this.world.backfill, status: d.status } : this.world.backfill
    this.world = { ...this.world, state: d.state, backfill }
    for (const a of d.actions) {
      if (a.type === 'createJob') this.created(a.jobName, d)
      if (a.type === 'deleteJob' && this.world.job?.name === a.jobName) this.world = { ...this.world, job: null }
    }
    const after = d.state?.phase
    if ((after === 'Succeeded' || after === 'Failed') && before !== after && before !== 'Succeeded') this.ended()
    // The open run is always in the status (a takeover reads it back), an ended one only beside its outcome.
    const s = d.state
    if (s?.runId && !s.runEnded && s.generation === this.world.backfill?.metadata.generation)
      expect(d.status).toMatchObject({ runId: s.runId, runAttempt: s.runAttempt })
    if (s?.runEnded && !(s.phase === 'Succeeded' || s.phase === 'Failed')) expect(d.status?.runId).toBeUndefined()
    return d
  }

  created(jobName: string, d: Decision) {
    const s = d.state
    if (!s?.runId || !s.runAttempt) throw new Error(`Job ${jobName} created without a run identity`)
    expect(s.runId).toMatch(RUN_ID_RE)
    if (jobName === this.lastJob && this.run && s.runId === this.run.id && s.runAttempt === this.run.attempts) {
      // The same attempt's Job asked for again (a lost POST, a retried admission): the same identity.
    } else if (this.open && this.run) {
      expect(s.runId, 'an attempt of the open run').toBe(this.run.id)
      expect(s.runAttempt).toBe(this.run.attempts + 1)
      this.run.attempts += 1
    } else {
      expect(this.used.has(s.runId), 'a new run gets a new identity').toBe(false)
      expect(s.runAttempt).toBe(1)
      this.run = { id: s.runId, attempts: 1 }
      this.used.add(s.runId)
      this.open = true
      this.runs += 1
    }
    this.admissions += 1
    this.lastJob = jobName
    this.world = { ...this.world, job: aJob(jobName) }
  }

  ended() {
    this.open = false
  }

  apply(op: Op) {
    const job = this.world.job
    const phase = this.world.state?.phase
    switch (op) {
      case 'tick':
        this.now += 11 * MINUTE
        this.decide()
        return
      case 'start':
        if (!job || job.outcome) return
        this.now += SECOND
        this.world = { ...this.world, job: { ...job, started: true } }
        this.decide({ type: 'resource' })
        return
      case 'preempt':
        if (!job || job.outcome) return
        this.now += SECOND
        this.world = { ...this.world, job: null, idle: anIdleState(this.now) }
        this.decide(cancelRequest(this.now))
        return
      case 'complete':
      case 'fail':
        if (!job || job.outcome || !(phase === 'Starting' || phase === 'Running')) return
        this.now += SECOND
        this.world = {
          ...this.world,
          job: {
            ...job,
            started: true,
            outcome: op === 'complete' ? 'Complete' : 'Failed',
            outcomeTime: new Date(Math.floor(this.now / 1000) * 1000).toISOString(),
          },
        }
        this.decide({ type: 'resource' })
        return
      case 'specChange': {
        const b = this.world.backfill
        if (!b) return
        this.now += SECOND
        this.world = { ...this.world, backfill: withSpec(b, { env: { GEN: String(this.now) } }) }
        // A spec change ends the run at once, whatever the decisions that follow make of its attempt.
        this.ended()
        this.decide({ type: 'resource' })
        return
      }
      case 'crash':
        // The KV state is lost: the next decision takes the backfill over from its status and Jobs.
        this.now += SECOND
        this.world = { ...this.world, state: null }
        this.decide({ type: 'resource' })
        return
      case 'lostPost':
        // The admission crashed before its POST: the attempt is Starting, its Job never came.
        if (phase !== 'Starting' || !job || job.started) return
        this.now += SECOND
        this.world = { ...this.world, job: null }
        this.decide({ type: 'timer' })
        return
      case 'reject': {
        if (phase !== 'Starting' || !job || job.started) return
        this.now += SECOND
        this.world = { ...this.world, job: null }
        const s = this.world.state
        this.decide({ type: 'jobRejected', jobName: job.name, message: 'quota' })
        // Nothing was created: the attempt was never the run's.
        if (this.run && (this.world.state?.attempts ?? 0) < (s?.attempts ?? 0)) {
          this.run.attempts -= 1
          this.lastJob = undefined
          if (this.run.attempts === 0) {
            this.used.delete(this.run.id)
            this.run = undefined
            this.open = false
          }
          expect(this.world.state?.runAttempt).toBe(this.run?.attempts)
        } else expect(this.world.state?.runId).toBe(s?.runId)
        return
      }
    }
  }
}

describe('run identity under random histories', () => {
  it('one identity per run, the same for every attempt of it, a new one after it ends; attempts counted', () => {
    let runs = 0
    let admissions = 0
    fc.assert(
      fc.property(fc.boolean(), fc.array(fc.constantFrom(...OPS), { minLength: 10, maxLength: 60 }), (repeat, ops) => {
        const h = new History(repeat)
        for (const op of ops) h.apply(op)
        runs += h.runs
        admissions += h.admissions
      }),
      { numRuns: 300 },
    )
    // The histories are not degenerate: runs begin often and most have several attempts.
    expect(runs).toBeGreaterThan(300)
    expect(admissions).toBeGreaterThan(runs)
  })
})
