import { describe, expect, it } from 'vitest'
import { MAX_REPLICAS, natsReplicas } from '../../pkg/jetstream/topology.js'

describe('natsReplicas (NATS_REPLICAS)', () => {
  it('is 1 when unset or empty: one nats-server', () => {
    expect(natsReplicas({})).toBe(1)
    expect(natsReplicas({ NATS_REPLICAS: ' ' })).toBe(1)
  })

  it('takes a whole number from 1 to the server limit', () => {
    expect(natsReplicas({ NATS_REPLICAS: '3' })).toBe(3)
    expect(natsReplicas({ NATS_REPLICAS: String(MAX_REPLICAS) })).toBe(MAX_REPLICAS)
  })

  it('refuses anything else with the variable in the message', () => {
    for (const bad of ['0', '-1', '2.5', 'three', String(MAX_REPLICAS + 1)]) {
      expect(() => natsReplicas({ NATS_REPLICAS: bad }), bad).toThrow(/NATS_REPLICAS/)
    }
  })
})
