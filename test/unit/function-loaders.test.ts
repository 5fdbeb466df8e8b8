// functions/load.ts (each function's code loaded on demand) against functions/index.ts (the same table with static
// imports): the same names, the same functions. And what a process without a Kubernetes client gets as Deps.kube
// (pkg/transport/deps.ts): demand and source need none; anything else does.
import { describe, expect, it } from 'vitest'
import { functionFactories } from '../../functions/index.js'
import { functionLoaders, loadFunction } from '../../functions/load.js'
import { FUNCTION_NAMES } from '../../functions/names.js'
import { needsKube, noKube } from '../../pkg/transport/deps.js'

describe('functionLoaders', () => {
  it('loads every function of functionFactories, and nothing else', async () => {
    expect(Object.keys(functionLoaders).sort()).toEqual([...FUNCTION_NAMES].sort())
    expect(Object.keys(functionFactories).sort()).toEqual([...FUNCTION_NAMES].sort())
    for (const name of FUNCTION_NAMES) {
      const lazy = (await functionLoaders[name]())()
      const eager = (functionFactories[name] as () => typeof lazy)()
      expect(lazy.name).toBe(name)
      expect(lazy.subscriptions).toEqual(eager.subscriptions)
      expect(lazy.handle.toString()).toBe(eager.handle.toString())
    }
  })

  it('an unknown name loads nothing', () => {
    expect(loadFunction('nobody')).toBeUndefined()
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
