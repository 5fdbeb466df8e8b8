// kubectl mbf's pure parts: flags, durations, the gate verdicts of `explain` (worlds built with the decide() test
// support, states produced by decide itself), `get` rows and `top`'s idle ratio and metrics parsing.
import { describe, expect, it } from 'vitest'
import { parseArgs, UsageError } from '../../cmd/kubectl-mbf/args.js'
import { type ExplainInput, explain } from '../../cmd/kubectl-mbf/explain.js'
import { gatePodSeen } from '../../cmd/kubectl-mbf/explain-gate.js'
import { renderExplanation } from '../../cmd/kubectl-mbf/explain-render.js'
import { human, table } from '../../cmd/kubectl-mbf/format.js'
import { getRow, idleShare, metricsByModel, renderGet, topRows } from '../../cmd/kubectl-mbf/views.js'
import { everyCheck } from '../../pkg/core/decide.js'
import { CHECKS, type Observed } from '../../pkg/core/decision.js'
import { ANNOTATION_GATE_ENDPOINT_ENV, ANNOTATION_GATE_MAX_IN_FLIGHT, GATE_CONTAINER } from '../../pkg/core/gate.js'
import {
  aBackfill,
  aGamingSession,
  aJob,
  anIdleState,
  aWorld,
  BACKFILL,
  cancelRequest,
  iso,
  J,
  MINUTE,
  NODE,
  NS,
  SECOND,
  T0,
  Timeline,
} from './support/world.js'

const input = (observed: Observed, now: number, o: Partial<ExplainInput> = {}): ExplainInput => ({
  namespace: NS,
  name: BACKFILL,
  now,
  observed,
  claims: [],
  fence: { ready: true },
  timer: { stored: false },
  history: [],
  events: [],
  cancelRequests: [],
  ...o,
})

const gate = (e: ReturnType<typeof explain>, name: string) => e.gates.find((g) => g.gate === name)

describe('args', () => {
  it('parses kubectl-style flags', () => {
    expect(parseArgs(['explain', 'bf', '-n', 'demo', '-ojson'])).toMatchObject({
      command: 'explain',
      name: 'bf',
      namespace: 'demo',
      output: 'json',
    })
    expect(parseArgs(['status', '-A', '--nats-url=nats://x:4222'])).toMatchObject({
      command: 'get',
      allNamespaces: true,
      natsUrl: 'nats://x:4222',
    })
    expect(parseArgs(['top', '--interval', '0', '--timeout', '2s', '-ndemo'])).toMatchObject({
      command: 'top',
      intervalMs: 0,
      timeoutMs: 2000,
      namespace: 'demo',
    })
    expect(parseArgs([]).command).toBe('help')
  })
  it('refuses what it does not know', () => {
    expect(() => parseArgs(['explain'])).toThrow(UsageError)
    expect(() => parseArgs(['get', '--bogus'])).toThrow(/unknown flag --bogus/)
    expect(() => parseArgs(['frobnicate'])).toThrow(/unknown command/)
    expect(() => parseArgs(['get', '-o', 'yaml'])).toThrow(/text or json/)
    expect(() => parseArgs(['top', '--interval', 'soon'])).toThrow(/not a duration/)
    expect(() => parseArgs(['get', '-n'])).toThrow(/needs a value/)
  })
})

describe('format', () => {
  it('durations as kubectl shows them', () => {
    expect(human(133_000)).toBe('2m13s')
    expect(human(467_000)).toBe('7m47s')
    expect(human(3_723_000)).toBe('1h2m')
    expect(human(850)).toBe('850ms')
    expect(human(0)).toBe('0s')
    expect(human(Number.NaN)).toBe('-')
  })
  it('aligns columns', () => {
    expect(table(['A', 'BB'], [['xxx', 'y']])).toBe('A     BB\nxxx   y')
  })
})

describe('explain', () => {
  it('WaitingForIdle: the window countdown from the last foreground request, and the timer', () => {
    const t = new Timeline(aWorld())
    t.step(T0) // first decision: window from creation
    const lastRequest = T0 + MINUTE
    const now = lastRequest + 2 * MINUTE + 13 * SECOND
    t.change(() => ({ idle: anIdleState(lastRequest), lastRequestAt: iso(lastRequest) }))
    t.step(lastRequest + SECOND) // demand's write woke nothing; a resync re-armed the timer
    const e = explain(input(t.world, now, { timer: { stored: true, schedule: '@at x' } }))
    expect(gate(e, 'idle window')).toEqual({
      gate: 'idle window',
      verdict: 'wait',
      evidence: 'last foreground request 2m13s ago (idle KV (demand)); window completes in 7m47s (idleFor 10m)',
    })
    // One line per check decide makes: found, Ready, on a node.
    expect(gate(e, 'model')?.evidence).toBe('Model llm found')
    expect(gate(e, 'model ready')?.evidence).toBe('Model llm Ready')
    expect(gate(e, 'node')?.evidence).toBe(`Model llm on node ${NODE}`)
    expect(e.gates.filter((g) => g.verdict !== 'pass').map((g) => g.gate)).toEqual(['idle window'])
    // Timers are re-armed lazily: the one armed at creation fires first, and admit re-arms it to the window's end.
    expect(e.nextTimer).toMatchObject({ at: iso(T0 + 10 * MINUTE), in: 'in 6m47s', stored: true })
    expect(e.decideNow).toMatchObject({ phase: 'WaitingForIdle', reason: 'IdleWindow', wouldCreateJob: false })
    const text = renderExplanation(e)
    expect(text).toContain('WAIT    idle window')
    expect(text).toContain('window completes in 7m47s')
  })

  it("an admitted attempt: the run's identity and the attempt's number within it", () => {
    const t = new Timeline(aWorld())
    t.step(T0)
    t.step(T0 + 11 * MINUTE)
    const e = explain(input(t.world, T0 + 11 * MINUTE + SECOND))
    expect(e.status).toMatchObject({ runId: t.state.runId, runAttempt: 1 })
    expect(renderExplanation(e)).toContain(
      `  run         ${t.state.runId}, attempt 1 of the run; no progress reported yet`,
    )
  })

  it("a preempted attempt's report: the run line shows its items done/total and discarded, the counters too", () => {
    const t = new Timeline(aWorld())
    t.step(T0)
    t.step(T0 + 11 * MINUTE)
    t.change(() => ({ job: aJob(J(1), { started: true }) }))
    t.step(T0 + 11 * MINUTE + SECOND)
    t.change(() => ({ job: null, idle: anIdleState(T0 + 14 * MINUTE) }))
    t.step(T0 + 14 * MINUTE, cancelRequest(T0 + 14 * MINUTE))
    const runId = t.state.runId as string
    const progress = { runId, done: 5, total: 12, inFlight: 3 }
    t.step(T0 + 14 * MINUTE + SECOND, { type: 'progress', jobName: J(1), progress, preempted: true })
    const e = explain(input(t.world, T0 + 14 * MINUTE + 2 * SECOND))
    const text = renderExplanation(e)
    expect(text).toContain(`  run         ${runId}, attempt 1 of the run; 5/12 items done, 3 discarded by preemptions`)
    expect(text).toMatch(/Counters: .*; items completed 5, discarded 3, preempted running 3m/)
  })

  it('a gaming session, a foreign claim and a stopped demand are each named as what blocks admission', () => {
    const now = T0 + 11 * MINUTE
    const world = aWorld({
      state: null,
      gamingSessions: [aGamingSession({ name: 'evening', nodeName: NODE })],
    })
    const e = explain(
      input(world, now, {
        claims: [
          {
            key: `node.${NODE}`,
            claim: {
              namespace: 'other',
              backfill: 'bench',
              attempt: 3,
              jobName: 'bench-3-x',
              claimedAt: iso(now - MINUTE),
            },
          },
        ],
        fence: { ready: false, why: 'no demand instance is pulling foreground requests' },
      }),
    )
    // decide's own message: what the status says once this gate is the one that holds.
    expect(gate(e, 'gaming')).toMatchObject({
      verdict: 'blocked',
      evidence: `GamingSession evening targets node ${NODE}`,
    })
    expect(gate(e, 'claims')).toMatchObject({
      verdict: 'blocked',
      evidence: `claim node.${NODE} held by other/bench (Job bench-3-x, attempt 3, since 1m ago)`,
    })
    expect(gate(e, 'preemption path')).toMatchObject({
      verdict: 'wait',
      evidence: 'no demand instance is pulling foreground requests',
    })
  })

  it('a stopped demand alone: decide() confirms admission waits, and says why', () => {
    const t = new Timeline(aWorld())
    t.step(T0)
    const e = explain(
      input(t.world, T0 + 11 * MINUTE, {
        fence: { ready: false, why: 'no cancel instance is pulling cancel requests' },
      }),
    )
    expect(e.decideNow).toMatchObject({ phase: 'WaitingForIdle', wouldCreateJob: false })
    expect(e.decideNow?.message).toContain('not admitting: no cancel instance is pulling cancel requests')
    const open = explain(input(t.world, T0 + 11 * MINUTE))
    expect(open.decideNow).toMatchObject({ phase: 'Starting', wouldCreateJob: true })
  })

  it('running: a later foreground request is what cancels it; the last cancel with trigger and latency', () => {
    const t = new Timeline(aWorld())
    t.step(T0)
    t.step(T0 + 10 * MINUTE) // admitted
    t.change(() => ({ job: aJob(J(1), { started: true }) }))
    t.step(T0 + 10 * MINUTE + SECOND)
    const running = t.state
    const requestAt = T0 + 12 * MINUTE
    t.change(() => ({ idle: anIdleState(requestAt), job: aJob(J(1), { started: true, deleting: true }) }))
    const cancelling = t.step(requestAt + 340, cancelRequest(requestAt)).state
    expect(cancelling?.phase).toBe('Cancelling')
    // Explained while still cancelling, with the world as it was before the DELETE (the gate names the request).
    const before = explain(input({ ...t.world, state: running, job: aJob(J(1), { started: true }) }, requestAt + 100))
    expect(gate(before, 'idle window')?.verdict).toBe('cancels')
    const e = explain(
      input(t.world, requestAt + 5 * SECOND, {
        history: [running, cancelling as NonNullable<typeof cancelling>],
        cancelRequests: [
          { jobName: J(1), reason: 'ForegroundDemand', at: iso(requestAt), storedAt: iso(requestAt + 12) },
        ],
        events: [{ type: 'Normal', reason: 'BackfillCancelled', message: `Cancelled Job ${J(1)}: ForegroundDemand` }],
      }),
    )
    expect(e.lastCancel).toEqual({
      jobName: J(1),
      reason: 'ForegroundDemand',
      triggerAt: iso(requestAt),
      cancelRequestedAt: iso(requestAt + 12),
      recordedAt: iso(requestAt + 340),
      latencyMs: 340,
      source: 'KV history (Cancelling revision)',
    })
    expect(renderExplanation(e)).toContain('latency 340ms')
    expect(e.counters?.preemptions.foreground).toBe(1)
    // A later cancel request for the same Job, naming a later request (demand cancels again for a request while the
    // Job is still going: its pods held): the trigger of the recorded cancel is still the request before it. Failed
    // before: the newest request was taken, latency -160 ms (the fresh-clone CI saw -29 ms on the real servers).
    const resent = explain(
      input(t.world, requestAt + 5 * SECOND, {
        history: [running, cancelling as NonNullable<typeof cancelling>],
        cancelRequests: [
          { jobName: J(1), reason: 'ForegroundDemand', at: iso(requestAt), storedAt: iso(requestAt + 12) },
          { jobName: J(1), reason: 'ForegroundDemand', at: iso(requestAt + 500), storedAt: iso(requestAt + 510) },
        ],
        events: [],
      }),
    )
    expect(resent.lastCancel).toMatchObject({ triggerAt: iso(requestAt), latencyMs: 340 })
  })

  it('no state yet: the first window starts at the last known foreground request (takeover), as decide does', () => {
    const e = explain(input(aWorld({ state: null, idle: anIdleState(T0) }), T0 + 30 * MINUTE))
    expect(gate(e, 'idle window')?.verdict).toBe('pass')
    expect(e.decideNow).toMatchObject({ phase: 'Starting', wouldCreateJob: true })
    const soon = explain(input(aWorld({ state: null, idle: anIdleState(T0) }), T0 + MINUTE))
    expect(gate(soon, 'idle window')?.verdict).toBe('wait')
    expect(gate(soon, 'idle window')?.evidence).toContain('no state yet')
    expect(soon.decideNow).toMatchObject({ phase: 'WaitingForIdle', wouldCreateJob: false })
  })

  it("the gates are decide()'s own: every gate in its order, with the verdicts its report gives", () => {
    // The background gate the template cannot build holds admission (decide's InvalidEnvironment); the template
    // itself is found.
    const world = aWorld({ idle: anIdleState(T0), template: { found: true, gpu: [], gate: 'no container sets X' } })
    const e = explain(input(world, T0 + 30 * MINUTE))
    expect(e.gates.map((g) => g.gate)).toEqual([...CHECKS])
    expect(gate(e, 'template')?.verdict).toBe('pass')
    expect(gate(e, 'background gate')).toEqual({
      gate: 'background gate',
      verdict: 'blocked',
      evidence: 'background gate: no container sets X',
    })
    const d = everyCheck(structuredClone(world), { type: 'timer' }, T0 + 30 * MINUTE)
    expect(e.gates.map((g) => g.verdict)).toEqual(d.checks.map((g) => g.verdict))
    expect(e.decideNow).toMatchObject({ phase: 'Blocked', reason: 'InvalidEnvironment', wouldCreateJob: false })
    const unreadable = explain(input(world, T0 + 30 * MINUTE, { fence: { error: 'timeout' } }))
    expect(gate(unreadable, 'preemption path')).toMatchObject({ verdict: 'unknown' })
  })

  it('an attempt in flight: the admission-only gates are not checked', () => {
    const t = new Timeline(aWorld({ idle: anIdleState(T0) }))
    t.step(T0 + 30 * MINUTE)
    t.change(() => ({ job: aJob(J(1), { started: true }) }))
    t.step(T0 + 31 * MINUTE)
    const e = explain(input(t.world, T0 + 32 * MINUTE))
    expect(gate(e, 'claims')).toEqual({
      gate: 'claims',
      verdict: 'not-reached',
      evidence: 'not checked while an attempt is in flight',
    })
    // The attempt's own claims are still shown: they are how demand finds it to cancel.
    const claim = { namespace: NS, backfill: BACKFILL, attempt: 1, jobName: J(1), claimedAt: iso(T0 + 30 * MINUTE) }
    const held = explain(input(t.world, T0 + 32 * MINUTE, { claims: [{ key: `node.${NODE}`, claim }] }))
    expect(gate(held, 'claims')).toMatchObject({ evidence: `held by this backfill: node.${NODE}` })
    expect(gate(e, 'spec')?.evidence).toContain('idleFor 10m')
    expect(renderExplanation(e)).toContain('  -       template')
    expect(e.gates.filter((g) => g.verdict !== 'pass' && g.verdict !== 'not-reached')).toEqual([])
  })

  it('a missing backfill is reported, not crashed on', () => {
    const e = explain(input(aWorld({ backfill: null }), T0))
    expect(e.exists).toBe(false)
  })
})

describe('get', () => {
  it('time left in the window and the last preemption', () => {
    const now = T0 + 5 * MINUTE
    const b = aBackfill({ status: { phase: 'WaitingForIdle', reason: 'IdleWindow', idleSince: iso(T0), attempts: 2 } })
    const row = getRow(
      b,
      [
        {
          type: 'Normal',
          reason: 'BackfillCancelled',
          message: 'Cancelled Job j1: GamingIntent',
          time: iso(T0 - 9 * MINUTE),
        },
        {
          type: 'Normal',
          reason: 'BackfillCancelled',
          message: 'Cancelled Job j2: ForegroundDemand',
          time: iso(T0 - MINUTE),
        },
        { type: 'Normal', reason: 'BackfillStarted', message: 'x', time: iso(T0 - 2 * MINUTE) },
      ],
      now,
    )
    expect(row).toMatchObject({ windowLeftMs: 5 * MINUTE, lastPreemption: { reason: 'ForegroundDemand' }, attempts: 2 })
    expect(renderGet([row], now, undefined)).toContain('5m            6m ago (ForegroundDemand)')
    expect(row.run).toBeNull()
    const running = getRow(
      aBackfill({ status: { phase: 'Running', reason: 'JobRunning', runId: '0123456789abcdef', runAttempt: 3 } }),
      [],
      now,
    )
    expect(running.windowLeftMs).toBeNull()
    expect(running.run).toEqual({ id: '0123456789abcdef', attempt: 3 })
    expect(renderGet([running], now, 'ns')).toMatch(/RUN +PROGRESS\n.*0123456789abcdef #3 +-$/)
    const reported = getRow(
      aBackfill({
        status: {
          phase: 'Running',
          reason: 'JobRunning',
          runId: '0123456789abcdef',
          runAttempt: 2,
          runDone: 4,
          runTotal: 9,
        },
      }),
      [],
      now,
    )
    expect(reported.progress).toEqual({ done: 4, total: 9 })
    expect(renderGet([reported], now, 'ns')).toMatch(/RUN +PROGRESS\n.*0123456789abcdef #2 +4\/9$/)
  })
})

describe('top', () => {
  it('idle ratio: the share of time past idleFor since the last request', () => {
    // 0..100 s, idleFor 10 s, requests at 20 and 50, the one before at -5: idle 5..20, 30..50, 60..100 = 75 s.
    expect(idleShare([20_000, 50_000], 0, 100_000, 10_000, -5_000)).toBeCloseTo(0.75)
    expect(idleShare([], 0, 100_000, 10_000)).toBe(1)
    expect(idleShare([], 0, 100_000, 10_000, 95_000 - 100_000)).toBeCloseTo(0.95)
    expect(idleShare([1, 2], 5, 5, 1)).toBe(0)
  })
  it('sums a model from the metrics endpoint when given, the KV states otherwise', () => {
    const text = [
      '# HELP flexinfer_model_backfill_useful_running_seconds_total x',
      'flexinfer_model_backfill_useful_running_seconds_total{backfill="a",namespace="ns",model="llm"} 12.5',
      'flexinfer_model_backfill_useful_running_seconds_total{backfill="b",namespace="ns",model="llm"} 7.5',
      'flexinfer_model_backfill_preemptions_total{backfill="a",namespace="ns",model="llm",reason="foreground"} 3',
      'flexinfer_model_backfill_preemptions_total{backfill="a",namespace="ns",model="llm",reason="gaming"} 1',
      'garbage{',
    ].join('\n')
    const m = metricsByModel(text)
    expect(m.get('ns/llm')).toEqual({ usefulSeconds: 20, preemptions: 4 })
    const t = new Timeline(aWorld())
    t.step(T0)
    const rows = topRows([t.state], [aBackfill()], [anIdleState(T0)], new Map(), m)
    expect(rows).toMatchObject([{ model: 'llm', backfills: 1, usefulSeconds: 20, preemptions: 4, source: 'metrics' }])
    const sampled = topRows(
      [t.state],
      [aBackfill({ spec: { idleFor: '2s' } })],
      [],
      new Map([
        [
          'ns/llm',
          {
            entries: [
              { ...anIdleState(T0 - MINUTE), requests: 10 },
              { ...anIdleState(T0 + 5 * SECOND), requests: 30 },
            ],
            from: T0,
            to: T0 + 10 * SECOND,
          },
        ],
      ]),
    )
    // Idle from T0 (the request before was a minute earlier) to the request at +5 s, then from +7 s to +10 s.
    expect(sampled[0]).toMatchObject({ ratePerS: 2, idleRatio: 0.8, source: 'kv' })
  })
})

const gated = (annotations: Record<string, string> = {}) => {
  const b = aBackfill()
  b.metadata.annotations = { [ANNOTATION_GATE_ENDPOINT_ENV]: 'OPENAI_BASE_URL', ...annotations }
  return b
}
const pod = (status: object) => ({
  metadata: { name: 'bf-1-abc-x1' },
  status: {
    phase: 'Running',
    initContainerStatuses: [{ name: GATE_CONTAINER, restartCount: 0, ready: false, ...status }],
  },
})

describe('explain: the background gate', () => {
  it('says nothing for a backfill without the gate', () => {
    expect(explain(input(aWorld(), T0)).backgroundGate).toBeUndefined()
    expect(renderExplanation(explain(input(aWorld(), T0)))).not.toContain('Background gate')
  })

  it('shows what was asked for, and a problem that blocks it', () => {
    const e = explain(
      input(
        aWorld({ backfill: gated(), template: { found: true, gpu: [], gate: 'no container sets OPENAI_BASE_URL' } }),
        T0,
      ),
    )
    expect(renderExplanation(e)).toContain(
      'Background gate: OPENAI_BASE_URL through the gate, engine vllm, at most 2 in flight; BLOCKS: no container sets OPENAI_BASE_URL',
    )
    const bad = explain(input(aWorld({ backfill: gated({ [ANNOTATION_GATE_MAX_IN_FLIGHT]: '0' }) }), T0))
    expect(bad.backgroundGate?.problem).toContain('expected a whole number from 1 to 64')
  })

  it.each([
    [{ ready: true, started: true, state: { running: {} } }, 'open: admitting background requests'],
    [{ ready: false, started: true, state: { running: {} } }, 'closed: refusing background requests'],
    [{ ready: false, started: false, state: { running: {} } }, 'starting: background refused'],
    [
      { ready: false, state: { waiting: { reason: 'ContainerCreating' } } },
      'not running: waiting: ContainerCreating (is Secret model-backfill-gate in the namespace?)',
    ],
    [{ ready: false, state: { terminated: { reason: 'Completed' } } }, 'stopped: terminated: Completed'],
  ])('a gate container %j reads as "%s"', (status, text) => {
    const e = explain(input(aWorld({ backfill: gated() }), T0, { gatePods: [gatePodSeen(pod(status))] }))
    expect(renderExplanation(e)).toContain(`  pod bf-1-abc-x1: ${text}`)
  })

  it('a pending pod (no container status yet) and a pod without the gate', () => {
    expect(gatePodSeen({ metadata: { name: 'p' }, status: { phase: 'Pending' } }).state).toContain('Pending')
    expect(
      gatePodSeen({ metadata: { name: 'p' }, status: { phase: 'Running', initContainerStatuses: [] } }).state,
    ).toBe('absent')
  })
})
