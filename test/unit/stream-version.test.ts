// demand remembers a model read unclaimed "at a version" of the claims stream (functions/demand/claim-reads.ts), so a
// version must only ever come from the stream's leader: a member that answers STREAM.INFO while behind (leaderless, or
// a restarted preferred member in its first 10 s) would make a claim stored since look absent — a lost cancel.
import { describe, expect, it } from 'vitest'
import { versionOf } from '../../pkg/jetstream/js-requests.js'

const created = '2026-12-01T20:00:00Z'
const state = { last_seq: 42 }

describe('versionOf (a STREAM.INFO reply)', () => {
  it('a single server: its created time and last sequence', () => {
    expect(versionOf('KV_c', { created, state })).toBe(`${created}/42`)
  })

  it("the leader's reply (it leaves itself out of the replicas): a version", () => {
    const cluster = { leader: 'nats-0', replicas: [{ name: 'nats-1' }, { name: 'nats-2' }] }
    expect(versionOf('KV_c', { created, state, cluster })).toBe(`${created}/42`)
  })

  it('a leaderless reply: a version that matches nothing, each time', () => {
    const cluster = { leader: '', replicas: [{ name: 'nats-0' }, { name: 'nats-1' }, { name: 'nats-2' }] }
    const a = versionOf('KV_c', { created, state, cluster })
    const b = versionOf('KV_c', { created, state, cluster })
    expect(a).not.toBe(`${created}/42`)
    expect(a).not.toBe(b)
  })

  it('a reply from a member that is not the leader (the leader among its replicas): a version that matches nothing', () => {
    const cluster = { leader: 'nats-0', replicas: [{ name: 'nats-0' }, { name: 'nats-1' }] }
    const a = versionOf('KV_c', { created, state, cluster })
    expect(a).not.toBe(`${created}/42`)
    expect(versionOf('KV_c', { created, state, cluster })).not.toBe(a)
  })

  it('an unreadable reply is an error, not a version', () => {
    expect(() => versionOf('KV_c', { created })).toThrow(/KV_c info: unreadable reply/)
  })
})
