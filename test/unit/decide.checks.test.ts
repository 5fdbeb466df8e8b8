// decide()'s check report: every check in CHECKS order, the one that decided named with decide's own message, the
// rest passed or not reached; everyCheck reports the checks past the first hold and never changes the decision.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import type { Phase } from '../../pkg/core/api.js'
import { decide, everyCheck } from '../../pkg/core/decide.js'
import {
  CHECKS,
  type CheckReport,
  type Decision,
  type Observed,
  type TemplateObservation,
  type Trigger,
} from '../../pkg/core/decision.js'
import {
  aBackfill,
  aContender,
  aGamingSession,
  aJob,
  aLease,
  aModel,
  anIdleState,
  aWorld,
  iso,
  J,
  MINUTE,
  NODE,
  OTHER_NODE,
  SECOND,
  T0,
  Timeline,
  templateFound,
  templateMissing,
  templateWithGpu,
} from './support/world.js'

/** Idle since T0 and no state yet: the first window starts at T0 (takeover), so at ADMIT_AT it is complete. */
const ADMIT_AT = T0 + 30 * MINUTE
const admissible = (o: Partial<Observed> = {}) => aWorld({ idle: anIdleState(T0), ...o })
const holds = (d: Decision) => d.checks.filter((g) => g.verdict !== 'pass' && g.verdict !== 'not-reached')
const check = (d: Decision, name: CheckReport['check']) => d.checks.find((g) => g.check === name) as CheckReport
const creates = (d: Decision) => d.actions.some((a) => a.type === 'createJob')

/** The phases a holding verdict stands for. */
const PHASES_OF: Record<string, Phase[]> = {
  blocked: ['Blocked', 'Suspended', 'Failed'],
  wait: ['WaitingForIdle', 'Succeeded'],
  cancels: ['Cancelling'],
}

function rejectedState() {
  const t = new Timeline(admissible())
  t.step(ADMIT_AT)
  t.step(ADMIT_AT + SECOND, { type: 'jobRejected', jobName: J(1), message: 'quota exceeded' })
  return t
}

function failedState() {
  const t = new Timeline(admissible())
  t.step(ADMIT_AT)
  t.change(() => ({ job: aJob(J(1), { started: true, outcome: 'Failed', outcomeMessage: 'boom' }) }))
  t.step(ADMIT_AT + MINUTE)
  return t.change(() => ({ job: null })) // removed by its TTL
}

describe('decide() reports its checks', () => {
  it('an admission: every check passes, in CHECKS order', () => {
    const d = decide(admissible(), { type: 'timer' }, ADMIT_AT)
    expect(creates(d)).toBe(true)
    expect(d.checks.map((g) => g.check)).toEqual([...CHECKS])
    expect(d.checks.every((g) => g.verdict === 'pass')).toBe(true)
  })

  const rejected = rejectedState()
  const failed = failedState()
  it.each<[CheckReport['check'], CheckReport['verdict'], Observed, number]>([
    ['spec', 'blocked', admissible({ backfill: aBackfill({ spec: { repeatAfter: 'soon' } }) }), ADMIT_AT],
    ['suspend', 'blocked', admissible({ backfill: aBackfill({ spec: { suspend: true } }) }), ADMIT_AT],
    ['previous run', 'blocked', failed.world, ADMIT_AT + 2 * MINUTE],
    ['model', 'blocked', admissible({ model: null }), ADMIT_AT],
    ['template', 'blocked', admissible({ template: templateMissing }), ADMIT_AT],
    ['gpu request', 'blocked', admissible({ template: templateWithGpu() }), ADMIT_AT],
    ['background gate', 'blocked', admissible({ template: { found: true, gpu: [], gate: 'no container' } }), ADMIT_AT],
    ['model ready', 'wait', admissible({ model: aModel({ ready: false, phase: 'Loading' }) }), ADMIT_AT],
    ['node', 'wait', admissible({ model: aModel({ node: undefined }) }), ADMIT_AT],
    ['idle window', 'wait', admissible(), T0 + MINUTE],
    ['gaming', 'blocked', admissible({ gamingSessions: [aGamingSession()] }), ADMIT_AT],
    ['gpu lease', 'blocked', admissible({ leases: [aLease()] }), ADMIT_AT],
    ['claims', 'blocked', admissible({ contenders: [aContender()] }), ADMIT_AT],
    ['preemption path', 'wait', admissible({ preemptionPath: { ready: false, why: 'no demand' } }), ADMIT_AT],
    ['rejected recheck', 'blocked', rejected.world, ADMIT_AT + 2 * SECOND],
  ])('%s holds (%s) with decide’s own message as evidence; no other check holds', (name, verdict, world, now) => {
    const d = decide(structuredClone(world), { type: 'timer' }, now)
    expect(creates(d)).toBe(false)
    expect(holds(d)).toEqual([{ ...check(d, name), check: name, verdict, evidence: d.state?.message }])
    // Checks admission evaluates after the one that held are not reached.
    if (name !== 'rejected recheck') expect(check(d, 'rejected recheck').verdict).toBe('not-reached')
  })

  it('the previous run holds while its Job is still there too', () => {
    const t = failedState()
    t.change(() => ({ job: aJob(J(1), { started: true, outcome: 'Failed', outcomeMessage: 'boom' }) }))
    const d = t.peek(ADMIT_AT + 2 * MINUTE)
    expect(holds(d)).toEqual([{ check: 'previous run', verdict: 'blocked', evidence: d.state?.message }])
  })

  it('the idle window reports the window it measured and when it completes', () => {
    const d = decide(admissible(), { type: 'timer' }, T0 + MINUTE)
    expect(check(d, 'idle window')).toMatchObject({ verdict: 'wait', since: T0, until: T0 + 10 * MINUTE })
    const session = aGamingSession({ expiresAt: iso(ADMIT_AT + 5 * MINUTE) })
    expect(
      check(decide(admissible({ gamingSessions: [session] }), { type: 'timer' }, ADMIT_AT), 'gaming'),
    ).toMatchObject({ verdict: 'blocked', until: ADMIT_AT + 5 * MINUTE })
  })

  it('an attempt in flight: the check that cancels it, the admission checks not reached', () => {
    const t = new Timeline(admissible())
    t.step(ADMIT_AT)
    t.change(() => ({ job: aJob(J(1), { started: true }) }))
    const running = t.step(ADMIT_AT + SECOND)
    expect(running.state?.phase).toBe('Running')
    expect(holds(running)).toEqual([])
    expect(check(running, 'idle window').verdict).toBe('pass')
    expect(check(running, 'template').verdict).toBe('not-reached')
    t.change(() => ({ model: aModel({ node: OTHER_NODE }) }))
    const moved = t.peek(ADMIT_AT + 2 * SECOND)
    expect(moved.state?.phase).toBe('Cancelling')
    expect(holds(moved)).toEqual([{ check: 'node', verdict: 'cancels', evidence: 'the Model moved to another node' }])
    expect(moved.state?.message.startsWith('the Model moved to another node')).toBe(true)
  })

  it('everyCheck: every check that holds is reported, the decision is the same', () => {
    const world = admissible({
      gamingSessions: [aGamingSession({ nodeName: NODE })],
      contenders: [aContender()],
      preemptionPath: { ready: false, why: 'no demand' },
    })
    const d = decide(structuredClone(world), { type: 'timer' }, T0 + MINUTE)
    const every = everyCheck(structuredClone(world), { type: 'timer' }, T0 + MINUTE)
    expect(holds(d).map((g) => g.check)).toEqual(['idle window'])
    expect(holds(every).map((g) => g.check)).toEqual(['idle window', 'gaming', 'claims', 'preemption path'])
    expect(every.state).toEqual(d.state)
    expect(every.actions).toEqual(d.actions)
    // An invalid spec holds first; the checks that do not need it are still shown (the idle window does).
    const bad = admissible({ backfill: aBackfill({ spec: { repeatAfter: 'soon' } }), template: templateMissing })
    const report = everyCheck(bad, { type: 'timer' }, ADMIT_AT)
    expect(holds(report).map((g) => g.check)).toEqual(['spec', 'template'])
    expect(check(report, 'idle window').verdict).toBe('not-reached')
  })
})

// Random worlds: a history (none, waiting, admitted, running, finished) and a world around it.
const history = fc.constantFrom('none', 'waiting', 'starting', 'running', 'failed', 'succeeded', 'rejected')
// Each obstacle is rare, so that many worlds have none (admissions) or exactly one.
const rare = fc.nat(6).map((n) => n === 0)
const mostly = <T extends string>(usual: T, ...others: T[]) =>
  fc.oneof({ arbitrary: fc.constant(usual), weight: 4 }, { arbitrary: fc.constantFrom(...others), weight: 1 })
const arbWorld = fc.record({
  history,
  model: mostly('ok', 'missing', 'notReady', 'noNode', 'moved'),
  template: mostly('ok', 'missing', 'gpu', 'gate'),
  gaming: rare,
  lease: rare,
  contender: rare,
  path: rare,
  suspend: rare,
  badSpec: rare,
  respec: rare,
  repeat: fc.boolean(),
  requestAfterMin: fc.option(fc.integer({ min: 0, max: 60 }), { nil: undefined }),
  nowAfterMin: fc.integer({ min: 0, max: 90 }),
  trigger: fc.constantFrom<Trigger['type']>('timer', 'resource', 'admit'),
})

type WorldSpec = typeof arbWorld extends fc.Arbitrary<infer T> ? T : never

function build(w: WorldSpec): { world: Observed; now: number } {
  const spec = w.repeat ? { repeatAfter: '5m' } : {}
  const t = new Timeline(admissible({ backfill: aBackfill({ spec }) }))
  let at = ADMIT_AT
  if (w.history !== 'none') t.step(w.history === 'waiting' ? T0 + MINUTE : at)
  if (w.history === 'running' || w.history === 'failed' || w.history === 'succeeded') {
    const outcome = w.history === 'failed' ? 'Failed' : w.history === 'succeeded' ? 'Complete' : undefined
    t.change(() => ({ job: aJob(J(1), { started: true, outcome, outcomeTime: outcome && iso(at + SECOND) }) }))
    at += 2 * SECOND
    t.step(at)
  }
  if (w.history === 'rejected') {
    at += SECOND
    t.step(at, { type: 'jobRejected', jobName: J(1), message: 'quota exceeded' })
  }
  const b = t.world.backfill as NonNullable<Observed['backfill']>
  const backfill = aBackfill({
    generation: w.respec ? 2 : 1,
    spec: { ...b.spec, ...(w.suspend ? { suspend: true } : {}), ...(w.badSpec ? { repeatAfter: 'soon' } : {}) },
    status: b.status,
  })
  const models = {
    ok: aModel(),
    missing: null,
    notReady: aModel({ ready: false, phase: 'Loading' }),
    noNode: aModel({ node: undefined }),
    moved: aModel({ node: OTHER_NODE }),
  }
  const templates: Record<WorldSpec['template'], TemplateObservation> = {
    ok: templateFound,
    missing: templateMissing,
    gpu: templateWithGpu(),
    gate: { found: true, gpu: [], gate: 'no container' },
  }
  const now = at + w.nowAfterMin * MINUTE
  const request = w.requestAfterMin === undefined ? undefined : at + w.requestAfterMin * MINUTE
  const world: Observed = {
    ...t.world,
    backfill,
    model: models[w.model],
    template: templates[w.template],
    gamingSessions: w.gaming ? [aGamingSession({ nodeName: w.model === 'moved' ? OTHER_NODE : NODE })] : [],
    leases: w.lease ? [aLease({ node: w.model === 'moved' ? OTHER_NODE : NODE })] : [],
    contenders: w.contender ? [aContender()] : [],
    preemptionPath: w.path ? { ready: false, why: 'no demand' } : undefined,
    idle: request !== undefined && request <= now ? anIdleState(request) : t.world.idle,
  }
  return { world, now }
}

describe('decide() checks: property', () => {
  it('the check that holds agrees with the decision; a Job is created iff every check passed; everyCheck decides alike', () => {
    fc.assert(
      fc.property(arbWorld, (spec) => {
        const { world, now } = build(spec)
        const trigger = { type: spec.trigger } as Trigger
        const d = decide(structuredClone(world), trigger, now)
        const every = everyCheck(structuredClone(world), trigger, now)
        expect(every.state).toEqual(d.state)
        expect(every.actions).toEqual(d.actions)
        expect(d.checks.map((g) => g.check)).toEqual([...CHECKS])
        expect(every.checks.map((g) => g.check)).toEqual([...CHECKS])
        const held = holds(d)
        expect(held.length).toBeLessThanOrEqual(1)
        const first = held[0]
        if (first) {
          // everyCheck reports the same first hold (and maybe more).
          expect(holds(every)).toContainEqual(first)
          expect(PHASES_OF[first.verdict]).toContain(d.state?.phase)
          if (first.verdict === 'cancels') {
            if (world.state?.phase !== 'Cancelling') expect(d.state?.message.startsWith(first.evidence)).toBe(true)
          } else {
            expect(first.evidence).toBe(d.state?.message)
          }
        }
        const allPass = d.checks.every((g) => g.verdict === 'pass')
        // The one Job created without the admission checks: an admitted attempt whose Job was not created yet (a
        // crash between the state write and the POST) is re-created while its own checks pass.
        const recreate = world.state?.phase === 'Starting' && Boolean(world.state.jobName) && !world.job
        if (allPass) expect(creates(d)).toBe(true)
        if (creates(d) && !recreate) expect(allPass).toBe(true)
      }),
      { numRuns: 400 },
    )
  })
})
