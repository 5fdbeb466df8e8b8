// `kubectl mbf explain` on a backfill with the background gate: what it asked for, a setting that blocks it, and
// the gate's state per pod from its container status (ready = open).
import { describe, expect, it } from 'vitest'
import { type ExplainInput, explain, gatePodSeen, renderExplanation } from '../../cli/explain.js'
import type { Observed } from '../../core/decide.js'
import { ANNOTATION_GATE_ENDPOINT_ENV, ANNOTATION_GATE_MAX_IN_FLIGHT, GATE_CONTAINER } from '../../core/gate.js'
import { aBackfill, aWorld, BACKFILL, NS, T0 } from './support/world.js'

const input = (observed: Observed, o: Partial<ExplainInput> = {}): ExplainInput => ({
  namespace: NS,
  name: BACKFILL,
  now: T0,
  observed,
  claims: [],
  fence: { ready: true },
  timer: { stored: false },
  history: [],
  events: [],
  cancelRequests: [],
  ...o,
})
const gated = (annotations: Record<string, string> = {}) => {
  const b = aBackfill()
  b.metadata.annotations = { [ANNOTATION_GATE_ENDPOINT_ENV]: 'OPENAI_BASE_URL', ...annotations }
  return b
}
const pod = (status: object) => ({
  metadata: { name: 'bf-1-abc-x1' },
  status: { phase: 'Running', initContainerStatuses: [{ name: GATE_CONTAINER, restartCount: 0, ...status }] },
})

describe('explain: the background gate', () => {
  it('says nothing for a backfill without the gate', () => {
    expect(explain(input(aWorld())).backgroundGate).toBeUndefined()
    expect(renderExplanation(explain(input(aWorld())))).not.toContain('Background gate')
  })

  it('shows what was asked for, and a problem that blocks it', () => {
    const e = explain(
      input(
        aWorld({ backfill: gated(), template: { found: true, gpu: [], gate: 'no container sets OPENAI_BASE_URL' } }),
      ),
    )
    expect(renderExplanation(e)).toContain(
      'Background gate: OPENAI_BASE_URL through the gate, engine vllm, at most 2 in flight; BLOCKS: no container sets OPENAI_BASE_URL',
    )
    const bad = explain(input(aWorld({ backfill: gated({ [ANNOTATION_GATE_MAX_IN_FLIGHT]: '0' }) })))
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
    const e = explain(input(aWorld({ backfill: gated() }), { gatePods: [gatePodSeen(pod(status))] }))
    expect(renderExplanation(e)).toContain(`  pod bf-1-abc-x1: ${text}`)
  })

  it('a pending pod (no container status yet) and a pod without the gate', () => {
    expect(gatePodSeen({ metadata: { name: 'p' }, status: { phase: 'Pending' } }).state).toContain('Pending')
    expect(
      gatePodSeen({ metadata: { name: 'p' }, status: { phase: 'Running', initContainerStatuses: [] } }).state,
    ).toBe('absent')
  })
})
