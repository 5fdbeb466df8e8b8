// The typed Deps fakes (test/unit/support/deps.ts): a fake that does not match Deps fails to compile (tsc checks the
// expect-error lines below: each must stay an error), and what a fake holds is what the code under test gets.
import { describe, expect, it } from 'vitest'
import { fakeCaches, fakeDeps } from './support/deps.js'

describe('fakeDeps', () => {
  it('hands over what it is given, nothing more', async () => {
    const deps = fakeDeps({ now: () => 42, bus: { kv: { claims: { get: async () => null } } } })
    expect(deps.now()).toBe(42)
    expect(await deps.bus.kv.claims.get('k')).toBeNull()
    expect(deps.kube).toBeUndefined()
  })

  it('does not compile a fake that drifted from Deps', () => {
    // @ts-expect-error a member Deps does not have
    fakeDeps({ clock: () => 1 })
    // @ts-expect-error a member with another shape than Deps gives it
    fakeDeps({ now: () => 'soon' })
    // @ts-expect-error a nested member Deps does not have
    fakeDeps({ bus: { kv: { claimz: {} } } })
    // @ts-expect-error a cache SharedCaches does not have
    fakeCaches({ secrets: {} })
    expect(true).toBe(true)
  })
})
