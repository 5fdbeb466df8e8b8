// admit's check of its watched copies against the GETs made during the same decision (pkg/admission/copies-unchanged.ts):
// a decision made on a copy stands only when the apiserver still has that object and a template that gives the same
// Job. Table rows: what must count as the same, and what must not.
import type { V1CronJob } from '@kubernetes/client-node'
import { describe, expect, it } from 'vitest'
import { canonical, sameBackfill, sameTemplate } from '../../pkg/admission/copies-unchanged.js'
import type { ModelBackfill } from '../../pkg/core/api.js'

const backfill = (rv: string, extra: Partial<ModelBackfill['metadata']> = {}): ModelBackfill =>
  ({
    apiVersion: 'ai.flexinfer/v1alpha1',
    kind: 'ModelBackfill',
    metadata: { name: 'b', namespace: 'ns', uid: 'u1', resourceVersion: rv, generation: 1, ...extra },
    spec: { modelRef: 'm', templateRef: 't' },
  }) as ModelBackfill

const template = (rv: string, image = 'busybox', uid = 'c1'): V1CronJob => ({
  metadata: { name: 't', namespace: 'ns', uid, resourceVersion: rv },
  spec: {
    schedule: '0 0 1 1 *',
    jobTemplate: { spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'x', image }] } } } },
  },
})

describe('sameBackfill', () => {
  it.each([
    ['same uid and resourceVersion', backfill('10'), true],
    ['any change since (spec, status, deletion: a new resourceVersion)', backfill('11'), false],
    ['deleted since (404)', null, false],
    ['deleted and re-created under the same name', backfill('10', { uid: 'u2' }), false],
  ])('%s', (_why, fresh, same) => {
    expect(sameBackfill(backfill('10'), fresh)).toBe(same)
  })

  it('a copy without a resourceVersion is never trusted', () => {
    const copy = backfill('')
    expect(sameBackfill(copy, structuredClone(copy))).toBe(false)
  })
})

describe('sameTemplate', () => {
  it.each([
    ['same resourceVersion', template('5'), template('5'), true],
    ['changed elsewhere (status, schedule), same jobTemplate', template('5'), template('6'), true],
    ['a changed image', template('5'), template('6', 'alpine'), false],
    ['deleted since', template('5'), null, false],
    ['created since (the copy had not seen it)', null, template('5'), false],
    ['absent both times', null, null, true],
    ['re-created under the same name', template('5'), template('5', 'busybox', 'c2'), false],
  ])('%s', (_why, copy, fresh, same) => {
    expect(sameTemplate(copy, fresh)).toBe(same)
  })

  it('key order and null members (a watch event against a GET) do not make a difference', () => {
    const copy = template('5')
    const fresh = template('6')
    const spec = fresh.spec?.jobTemplate.spec?.template.spec as unknown as Record<string, unknown>
    const reordered = { containers: spec.containers, nodeName: null, restartPolicy: spec.restartPolicy }
    ;(fresh.spec?.jobTemplate.spec?.template as { spec: unknown }).spec = reordered
    expect(sameTemplate(copy, fresh)).toBe(true)
    expect(canonical({ b: 1, a: { d: null, c: [2, { f: 1, e: undefined }] } })).toBe('{"a":{"c":[2,{"f":1}]},"b":1}')
  })
})
