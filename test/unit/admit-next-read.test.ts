// Shared template GETs (pkg/admission/copies-unchanged.ts NextRead): every caller gets an answer that was asked for after it
// asked, and callers arriving while a read is in flight share one read queued behind it.
import { describe, expect, it } from 'vitest'
import { NextRead } from '../../pkg/admission/copies-unchanged.js'

function deferred<T>() {
  let resolve: (v: T) => void = () => {}
  let reject: (e: Error) => void = () => {}
  const promise = new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

const tick = () => new Promise((r) => setImmediate(r))

describe('NextRead', () => {
  it('one read in flight, one queued behind it for everyone who asked meanwhile', async () => {
    const reads = new NextRead<string>()
    const sent: ReturnType<typeof deferred<string>>[] = []
    const fetch = () => {
      const d = deferred<string>()
      sent.push(d)
      return d.promise
    }
    const a = reads.read('ns/tpl', fetch)
    const b = reads.read('ns/tpl', fetch)
    const c = reads.read('ns/tpl', fetch)
    expect(sent.length).toBe(1)
    // Another key is read on its own.
    void reads.read('ns/other', fetch)
    expect(sent.length).toBe(2)
    sent[0]?.resolve('asked before b and c')
    expect(await a).toBe('asked before b and c')
    await tick()
    // b and c get a read sent after they asked, one for both.
    expect(sent.length).toBe(3)
    sent[2]?.resolve('after b and c')
    expect(await b).toBe('after b and c')
    expect(await c).toBe('after b and c')
    // Nothing in flight any more: the next caller's read is sent at once.
    await tick()
    void reads.read('ns/tpl', fetch)
    expect(sent.length).toBe(4)
  })

  it('a failed read fails its callers only; the next read is sent', async () => {
    const reads = new NextRead<string>()
    const first = deferred<string>()
    const failing = reads.read('k', () => first.promise)
    first.reject(new Error('apiserver unavailable'))
    await expect(failing).rejects.toThrow('apiserver unavailable')
    await tick()
    expect(await reads.read('k', async () => 'fine')).toBe('fine')
  })
})
