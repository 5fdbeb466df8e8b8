// functions/registry.ts (every function once: its name and the loader of its code): each loader makes the function
// of its name, a new instance at every call, and nothing else is a function. And what a process without a Kubernetes
// client gets as Deps.kube (pkg/transport/deps.ts): demand and source need none; anything else does.
import { describe, expect, it } from 'vitest'
import {
  FUNCTION_NAMES,
  type FunctionFactory,
  functionLoaders,
  loadFunction,
  loadFunctions,
} from '../../functions/registry.js'
import { needsKube, noKube } from '../../pkg/transport/deps.js'

describe('the function registry', () => {
  it('each name loads the function of that name, a new instance at every call', async () => {
    expect(FUNCTION_NAMES).toEqual(['source', 'demand', 'admit', 'cancel', 'lifecycle'])
    const all = await loadFunctions()
    expect(Object.keys(all)).toEqual([...FUNCTION_NAMES])
    for (const name of FUNCTION_NAMES) {
      const factory = (await loadFunction(name)) as FunctionFactory
      expect(factory).toBe(all[name])
      const one = factory()
      expect(one.name).toBe(name)
      expect(one.subscriptions.length).toBeGreaterThan(0)
      expect(factory()).not.toBe(one)
    }
  })

  it('the process settings reach the function whose consumers depend on them (demand: DEMAND_ACK_POLICY)', async () => {
    const demand = await functionLoaders.demand()
    expect(demand().ackAll).toBe(false)
    expect(demand({ demandAckAll: true }).ackAll).toBe(true)
  })

  it('an unknown name loads nothing', () => {
    expect(loadFunction('nobody')).toBeUndefined()
    expect(loadFunction('ingress')).toBeUndefined()
    expect(loadFunction('toString')).toBeUndefined()
    expect(loadFunction('__proto__')).toBeUndefined()
  })
})

describe('a Kubernetes client only where a function calls the apiserver', () => {
  it('demand, source and the ingress need none; every other function, or an unknown list, does', () => {
    expect(needsKube(['demand'])).toBe(false)
    expect(needsKube(['source', 'demand'])).toBe(false)
    expect(needsKube(['ingress'])).toBe(false)
    for (const fn of ['admit', 'cancel', 'lifecycle']) expect(needsKube([fn])).toBe(true)
    expect(needsKube(['demand', 'cancel'])).toBe(true)
    expect(needsKube(undefined)).toBe(true)
    expect(needsKube([])).toBe(true)
  })

  it('without one, Deps.kube counts no request and says why any call fails', async () => {
    const kube = noKube()
    expect(kube.requests).toEqual({ read: 0, list: 0, write: 0 })
    kube.close()
    expect(() => kube.getJob('ns', 'j')).toThrow(/KUBE_FREE_FUNCTIONS/)
    expect(() => kube.batch).toThrow(/without a Kubernetes client/)
    // Awaiting it (a Promise resolving to deps) must not look like a thenable.
    expect(await Promise.resolve(kube)).toBe(kube)
  })
})
