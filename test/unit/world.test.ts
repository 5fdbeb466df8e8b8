// Lenient views of objects other parties own: a field we do not understand never stops a decision.
import { describe, expect, it } from 'vitest'
import {
  blockingGamingSession,
  blockingLease,
  gamingSessionView,
  gpuLeaseView,
  isActiveJob,
  jobView,
  modelView,
  unexpired,
} from '../../pkg/core/world.js'
import { aGamingSession, aLease, aModel, NODE, OTHER_NODE, T0 } from './support/world.js'

describe('modelView', () => {
  it('reads phase, node, GPU group and lastActiveTime', () => {
    expect(
      modelView({
        metadata: { namespace: 'ns', name: 'llm' },
        spec: { nodeSelector: { 'kubernetes.io/hostname': 'selector-node' }, gpu: { shared: 'group-1' } },
        status: { phase: 'Ready', gpu: { node: 'status-node' }, lastActiveTime: '2026-03-01T00:00:00Z' },
      }),
    ).toEqual({
      namespace: 'ns',
      name: 'llm',
      ready: true,
      phase: 'Ready',
      node: 'status-node',
      group: 'group-1',
      lastActiveTime: '2026-03-01T00:00:00Z',
    })
  })

  it('falls back to the hostname selector for the node', () => {
    expect(modelView({ spec: { nodeSelector: { 'kubernetes.io/hostname': 'n1' } } }).node).toBe('n1')
  })

  it('only phase Ready is ready', () => {
    expect(modelView({ status: { phase: 'Loading' } }).ready).toBe(false)
    expect(modelView({ status: { phase: 'ready' } }).ready).toBe(false)
  })

  it.each([null, undefined, 42, 'x', [], { metadata: 7, spec: [], status: 'Ready' }])('tolerates %j', (raw) => {
    expect(modelView(raw)).toMatchObject({ ready: false, namespace: '', name: '', node: undefined })
  })
})

describe('gamingSessionView / gpuLeaseView', () => {
  it('mode defaults to gaming; a deletionTimestamp marks it deleting', () => {
    expect(gamingSessionView({ metadata: { name: 's' }, spec: { nodeName: 'n1' } })).toMatchObject({
      mode: 'gaming',
      deleting: false,
      nodeName: 'n1',
    })
    expect(gamingSessionView({ metadata: { deletionTimestamp: 'x' }, spec: { mode: 'desktop' } })).toMatchObject({
      mode: 'desktop',
      deleting: true,
    })
  })

  it('leases carry group, node and expiry', () => {
    expect(
      gpuLeaseView({
        metadata: { namespace: 'l', name: 'one' },
        spec: { group: 'g', node: 'n', expiresAt: '2026-03-01T01:00:00Z' },
      }),
    ).toEqual({ namespace: 'l', name: 'one', group: 'g', node: 'n', expiresAt: '2026-03-01T01:00:00Z' })
  })
})

describe('jobView', () => {
  const raw = (status: object, meta: object = {}) => ({
    metadata: {
      namespace: 'ns',
      name: 'bf-1-abc',
      uid: 'u',
      creationTimestamp: '2026-03-01T00:00:00Z',
      labels: { 'ai.flexinfer/model-backfill': 'label' },
      annotations: { 'ai.flexinfer/backfill-model': 'llm', 'ai.flexinfer/backfill-node': 'n1' },
      ownerReferences: [{ uid: 'not-controller' }, { uid: 'owner', controller: true }],
      ...meta,
    },
    status,
  })

  it('reads label, owner, model, node and start', () => {
    expect(jobView(raw({ startTime: '2026-03-01T00:00:01Z', active: 1 }))).toEqual({
      namespace: 'ns',
      name: 'bf-1-abc',
      uid: 'u',
      backfillLabel: 'label',
      ownerUid: 'owner',
      model: 'llm',
      node: 'n1',
      createdAt: '2026-03-01T00:00:00Z',
      deleting: false,
      outcome: undefined,
      outcomeMessage: undefined,
      outcomeTime: undefined,
      started: true,
    })
    expect(jobView(raw({})).started).toBe(false)
    expect(jobView(raw({ active: 1 })).started).toBe(true)
  })

  it('Complete or Failed condition with status True is the outcome', () => {
    const done = jobView(
      raw({
        completionTime: '2026-03-01T00:10:00Z',
        conditions: [{ type: 'Complete', status: 'True', lastTransitionTime: '2026-03-01T00:10:01Z' }],
      }),
    )
    expect(done).toMatchObject({ outcome: 'Complete', outcomeTime: '2026-03-01T00:10:00Z' })
    const failed = jobView(
      raw({
        conditions: [
          { type: 'Complete', status: 'False' },
          {
            type: 'Failed',
            status: 'True',
            reason: 'DeadlineExceeded',
            message: 'Job was active longer than specified deadline',
            lastTransitionTime: '2026-03-01T00:30:00Z',
          },
        ],
      }),
    )
    expect(failed).toMatchObject({
      outcome: 'Failed',
      outcomeMessage: 'Job was active longer than specified deadline',
      outcomeTime: '2026-03-01T00:30:00Z',
    })
    expect(jobView(raw({ conditions: [{ type: 'Suspended', status: 'True' }] })).outcome).toBeUndefined()
  })

  it('a deleted Job carries its deletion time (decide compares it with a Failed condition’s)', () => {
    expect(jobView(raw({}, { deletionTimestamp: new Date('2026-03-01T00:30:00Z') }))).toMatchObject({
      deleting: true,
      deletedAt: '2026-03-01T00:30:00.000Z',
    })
    expect(jobView(raw({})).deletedAt).toBeUndefined()
  })

  it('reads times the typed client parsed into Date objects (readNamespacedJob) as well as raw strings', () => {
    const typed = jobView({
      ...raw({
        completionTime: new Date('2026-03-01T00:10:00Z'),
        conditions: [{ type: 'Complete', status: 'True', lastTransitionTime: new Date('2026-03-01T00:10:01Z') }],
      }),
      metadata: { ...raw({}).metadata, creationTimestamp: new Date('2026-03-01T00:00:00Z') },
    })
    expect(typed).toMatchObject({
      outcome: 'Complete',
      outcomeTime: '2026-03-01T00:10:00.000Z',
      createdAt: '2026-03-01T00:00:00.000Z',
    })
    const noCompletionTime = jobView(
      raw({ conditions: [{ type: 'Failed', status: 'True', lastTransitionTime: new Date('2026-03-01T00:30:00Z') }] }),
    )
    expect(noCompletionTime.outcomeTime).toBe('2026-03-01T00:30:00.000Z')
  })

  it('active: neither terminal nor being deleted', () => {
    expect(isActiveJob(jobView(raw({ active: 1 })))).toBe(true)
    expect(isActiveJob(jobView(raw({ active: 1 }, { deletionTimestamp: '2026-03-01T00:05:00Z' })))).toBe(false)
    expect(isActiveJob(jobView(raw({ conditions: [{ type: 'Failed', status: 'True' }] })))).toBe(false)
  })

  it('one view per object, frozen; a replaced object (a watch update) gets its own', () => {
    const running = raw({ active: 1 })
    const view = jobView(running)
    expect(jobView(running)).toBe(view)
    expect(Object.isFrozen(view)).toBe(true)
    const failed = { ...running, status: { conditions: [{ type: 'Failed', status: 'True' }] } }
    expect(jobView(failed).outcome).toBe('Failed')
    expect(jobView(running).outcome).toBeUndefined()
    const model = { status: { phase: 'Ready' } }
    expect(modelView(model)).toBe(modelView(model))
    expect(modelView({ status: { phase: 'Loading' } }).ready).toBe(false)
  })
})

describe('blocking sessions and leases', () => {
  const iso = (ms: number) => new Date(ms).toISOString()

  it('unexpired: no expiry and unparsable expiry are unexpired (fail safe), the expiry instant is expired', () => {
    expect(unexpired(undefined, T0)).toBe(true)
    expect(unexpired('soon', T0)).toBe(true)
    expect(unexpired(iso(T0 + 1), T0)).toBe(true)
    expect(unexpired(iso(T0), T0)).toBe(false)
  })

  it('a gaming session blocks its node in gaming mode, being deleted or not', () => {
    expect(blockingGamingSession([aGamingSession()], NODE, T0)).toBeDefined()
    expect(blockingGamingSession([aGamingSession({ deleting: true })], NODE, T0)).toBeDefined()
    expect(blockingGamingSession([aGamingSession()], OTHER_NODE, T0)).toBeUndefined()
    expect(blockingGamingSession([aGamingSession()], undefined, T0)).toBeUndefined()
    expect(blockingGamingSession([aGamingSession({ mode: 'desktop' })], NODE, T0)).toBeUndefined()
    expect(blockingGamingSession([aGamingSession({ expiresAt: iso(T0 - 1) })], NODE, T0)).toBeUndefined()
  })

  it('a lease blocks by node or by GPU group', () => {
    expect(blockingLease([aLease()], aModel(), T0)).toBeDefined()
    expect(blockingLease([aLease({ node: undefined, group: 'gpu-group-1' })], aModel(), T0)).toBeDefined()
    expect(blockingLease([aLease({ node: OTHER_NODE })], aModel(), T0)).toBeUndefined()
    expect(
      blockingLease([aLease({ node: undefined, group: undefined })], aModel({ group: undefined }), T0),
    ).toBeUndefined()
    expect(blockingLease([aLease({ expiresAt: iso(T0) })], aModel(), T0)).toBeUndefined()
  })
})
