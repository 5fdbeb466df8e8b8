// admit's claims store on NATS (pkg/admission/nats-ports.ts claimStore): both free claims go as one atomic batch
// (pkg/jetstream/js-requests.ts kvWriteTogether), and what the server answers decides what happens next. Over a stand-in
// connection that answers each batch's commit as told; the batch on the real server is in
// test/integration/transport/claim-release.test.ts.
import type { Msg, SubscriptionOptions } from '@nats-io/transport-node'
import { describe, expect, it, vi } from 'vitest'
import { claimStore } from '../../pkg/admission/nats-ports.js'
import { isCasConflict } from '../../pkg/jetstream/errors.js'
import { fake, fakeDeps } from './support/deps.js'

type Answer = { seq: number } | { error: { code: number; err_code: number; description: string } } | 'silent'

function world(answers: Answer[]) {
  const sent: { subject: string; headers: Record<string, string>; reply?: string }[] = []
  const warned: string[] = []
  let inbox: SubscriptionOptions['callback']
  let now = 1_000_000
  const nc = {
    options: {},
    subscribe: (_subject: string, opts?: SubscriptionOptions) => {
      inbox = opts?.callback
      return { unsubscribe() {} }
    },
    publish: (subject: string, _body: unknown, opts?: { reply?: string; headers?: Iterable<[string, string[]]> }) => {
      const headers: Record<string, string> = {}
      for (const [k, v] of opts?.headers ?? []) headers[k] = v[0] ?? ''
      sent.push({ subject, headers, reply: opts?.reply })
      const reply = opts?.reply
      if (!reply) return
      const answer = answers.shift() ?? { seq: 1 }
      if (answer === 'silent') return
      queueMicrotask(() => inbox?.(null, fake<Msg>({ subject: reply, data: new Uint8Array(1), json: () => answer })))
    },
  }
  const kv = {}
  const deps = fakeDeps({
    bus: { nc, kv: { claims: kv } },
    now: () => now,
    log: { warn: (_o: unknown, msg?: string) => void warned.push(msg ?? '') },
  })
  const writes = [
    { key: 'model.ns.m', value: '{}', revision: 7 },
    { key: 'node.n', value: '{}', revision: 0 },
  ]
  return { store: claimStore(deps), sent, warned, writes, tick: (ms: number) => (now += ms) }
}

const refusal = (err_code: number, description: string) => ({ error: { code: 400, err_code, description } })

describe('claims taken as one atomic batch', () => {
  it('sends the model first with no reply, then the node as the commit, each a compare-and-set on what was read', async () => {
    const { store, sent, writes } = world([{ seq: 9 }])
    expect(await store.writeTogether?.(writes)).toBe(true)
    expect(sent.map((m) => [m.subject, m.reply !== undefined])).toEqual([
      ['$KV.flexinfer-claims.model.ns.m', false],
      ['$KV.flexinfer-claims.node.n', true],
    ])
    const [first, commit] = sent
    expect(first?.headers['Nats-Batch-Id']).toBe(commit?.headers['Nats-Batch-Id'])
    expect([first?.headers['Nats-Batch-Sequence'], commit?.headers['Nats-Batch-Sequence']]).toEqual(['1', '2'])
    expect([first?.headers['Nats-Batch-Commit'], commit?.headers['Nats-Batch-Commit']]).toEqual([undefined, '1'])
    expect(first?.headers['Nats-Expected-Last-Subject-Sequence']).toBe('7')
    expect(commit?.headers['Nats-Expected-Last-Subject-Sequence']).toBe('0')
  })

  it('a key that moved: a compare-and-set conflict for the caller to judge', async () => {
    const { store, writes } = world([refusal(10071, 'wrong last sequence: 12')])
    const err = await store.writeTogether?.(writes).catch((e) => e)
    expect(isCasConflict(err)).toBe(true)
  })

  it('refused for another reason (too many batches in flight): nothing stored, the keys one by one this time', async () => {
    const { store, sent, warned, writes } = world([
      { error: { code: 429, err_code: 10210, description: 'atomic publish too many inflight' } },
    ])
    expect(await store.writeTogether?.(writes)).toBe(false)
    expect(warned).toEqual(['claims batch refused: claims taken one by one'])
    // The next admission tries the batch again.
    expect(await store.writeTogether?.(writes)).toBe(true)
    expect(sent).toHaveLength(4)
  })

  it('a stream without allow_atomic: one key at a time for a minute, logged once, then the batch again', async () => {
    const { store, sent, warned, writes, tick } = world([
      refusal(10174, 'atomic publish is disabled'),
      refusal(10174, 'atomic publish is disabled'),
    ])
    expect(await store.writeTogether?.(writes)).toBe(false)
    expect(await store.writeTogether?.(writes)).toBe(false)
    expect(sent).toHaveLength(2)
    tick(61_000)
    expect(await store.writeTogether?.(writes)).toBe(false)
    expect(sent).toHaveLength(4)
    expect(warned.filter((m) => /refuses atomic batches/.test(m))).toHaveLength(1)
    tick(61_000)
    expect(await store.writeTogether?.(writes)).toBe(true)
  })

  it('no answer: the batch may have been stored, so the admission fails rather than write the keys one by one', async () => {
    vi.useFakeTimers()
    try {
      const { store, writes } = world(['silent'])
      const failed = store.writeTogether?.(writes).then(
        () => 'written',
        (e: Error) => e.message,
      )
      await vi.advanceTimersByTimeAsync(5_001)
      expect(await failed).toMatch(/timed out/)
    } finally {
      vi.useRealTimers()
    }
  })
})
