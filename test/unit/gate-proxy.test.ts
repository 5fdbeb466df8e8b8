// The gate's HTTP side (cmd/gate/proxy.ts) against the simulated engine (dev/bench/engine-sim) and a recording
// upstream: background marks, the cap, 503 + Retry-After once closed, in-flight requests aborted at the engine on
// close, and a workload ignoring 503 getting nothing through. The NATS side is in
// test/integration/backfill/gate.test.ts; the real engine in test/integration/engine/engine.test.ts.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { epochMs, Gate } from '../../cmd/gate/proxy.js'
import { ending, streamCompletion } from '../../dev/bench/engine-sim/client.js'
import { EngineSim } from '../../dev/bench/engine-sim/engine.js'
import { createLogger } from '../../pkg/observability/log.js'

const log = createLogger('gate-test')
log.level = 'silent'
const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function startGate(upstream: string, opts: Partial<ConstructorParameters<typeof Gate>[0]> = {}) {
  const gate = new Gate({ upstream, job: 'eval-1-abc', engine: 'vllm', maxInFlight: 2, log, ...opts })
  const url = await gate.listen()
  cleanups.push(() => gate.stop())
  return { gate, url }
}

async function startSim(params = {}) {
  const sim = new EngineSim({ stepBaseMs: 5, stepPerSeqMs: 0, prefillMsPerToken: 0, ...params })
  const url = await sim.listen()
  cleanups.push(() => sim.stop())
  return { sim, url }
}

/** An upstream that records what it was sent and answers after `holdMs`. */
async function recorder(holdMs = 0) {
  const seen: { headers: http.IncomingHttpHeaders; body: Record<string, unknown>; url?: string }[] = []
  let open = 0
  let maxOpen = 0
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      seen.push({ headers: req.headers, body: JSON.parse(Buffer.concat(chunks).toString() || '{}'), url: req.url })
      open++
      maxOpen = Math.max(maxOpen, open)
      setTimeout(() => {
        open--
        res.end('{"ok":true}')
      }, holdMs)
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  cleanups.push(async () => {
    server.closeAllConnections()
    await new Promise<void>((r) => server.close(() => r()))
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, maxOpen: () => maxOpen }
}

const post = (url: string, body: unknown, signal?: AbortSignal) =>
  fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  })

describe('the gate proxy', () => {
  it('refuses while starting: nothing passes before foreground demand is visible', async () => {
    const up = await recorder()
    const { url } = await startGate(up.url)
    const r = await post(url, { prompt: 'x' })
    expect(r.status).toBe(503)
    expect(r.headers.get('retry-after')).toBe('30')
    expect(up.seen).toHaveLength(0)
  })

  it('marks every request background for the engine and numbers it bg-<job>-<n>; the workload cannot outrank', async () => {
    const up = await recorder()
    const { gate, url } = await startGate(up.url)
    gate.open()
    for (let i = 0; i < 2; i++) expect((await post(url, { prompt: 'hi', priority: -100 })).status).toBe(200)
    expect(up.seen.map((s) => s.body.request_id)).toEqual(['bg-eval-1-abc-1', 'bg-eval-1-abc-2'])
    expect(up.seen.map((s) => s.body.priority)).toEqual([10, 10])
    expect(up.seen[0]?.headers['x-flexinfer-workload-class']).toBe('background')
    expect(up.seen[0]?.headers['x-request-id']).toBe('bg-eval-1-abc-1')
    expect(up.seen[0]?.url).toBe('/v1/completions')
  })

  it.each([
    ['sglang', -10, 'rid'],
    ['none', undefined, undefined],
  ] as const)('engine %s: priority %s', async (engine, priority, idField) => {
    const up = await recorder()
    const { gate, url } = await startGate(up.url, { engine })
    gate.open()
    await post(url, { prompt: 'hi', priority: 3 })
    expect(up.seen[0]?.body.priority).toBe(priority)
    if (idField) expect(up.seen[0]?.body[idField]).toBe('bg-eval-1-abc-1')
    expect(up.seen[0]?.body.request_id).toBeUndefined()
  })

  it('caps background requests in flight; the rest wait their turn, none lost', async () => {
    const up = await recorder(50)
    const { gate, url } = await startGate(up.url, { maxInFlight: 2 })
    gate.open()
    const answers = await Promise.all(Array.from({ length: 7 }, () => post(url, { prompt: 'x' })))
    expect(answers.map((a) => a.status)).toEqual(Array(7).fill(200))
    expect(up.maxOpen()).toBe(2)
    expect(up.seen).toHaveLength(7)
  })

  it('refuses beyond its bounded queue with 429', async () => {
    const up = await recorder(200)
    const { gate, url } = await startGate(up.url, { maxInFlight: 1, maxQueued: 2 })
    gate.open()
    const answers = await Promise.all(Array.from({ length: 5 }, () => post(url, { prompt: 'x' })))
    expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 200, 429, 429])
  })

  it('closing aborts every in-flight request at the engine at once and refuses the waiting ones', async () => {
    const { sim, url: engine } = await startSim({ stepBaseMs: 20 })
    const { gate, url } = await startGate(engine, { maxInFlight: 3 })
    gate.open()
    // Three streaming requests in flight, two waiting for a place.
    const requests = Array.from({ length: 5 }, () => streamCompletion(url, { maxTokens: 10_000 }).then(ending))
    await expect.poll(() => sim.stats.tokens.background, { timeout: 5_000 }).toBeGreaterThan(5)
    expect(gate.inFlight).toBe(3)
    const signalAt = epochMs()
    const p = gate.close('preempted', signalAt)
    expect(p?.aborted).toBe(3)
    expect(p?.refusedQueued).toBe(2)
    const outcomes = await Promise.all(requests)
    expect(outcomes.filter((o) => o === 'cut')).toHaveLength(3)
    expect(outcomes.filter((o) => o === 503)).toHaveLength(2)
    await expect.poll(() => sim.aborts.length, { timeout: 2_000 }).toBe(3)
    const lastSeen = Math.max(...sim.aborts.map((a) => a.seenAt))
    // Signal → the engine saw the last disconnect: milliseconds on an idle machine (bench:gate measures it); the bound
    // leaves room for a shared two-core machine.
    expect(lastSeen - signalAt).toBeLessThan(250)
    await expect.poll(() => sim.stats.running, { timeout: 2_000 }).toBe(0)
    expect(gate.inFlight).toBe(0)
  })

  it('a workload ignoring 503 gets nothing through once closed', async () => {
    const up = await recorder()
    const { gate, url } = await startGate(up.url)
    gate.open()
    expect((await post(url, { prompt: 'x' })).status).toBe(200)
    gate.close('preempted')
    const statuses: number[] = []
    for (let i = 0; i < 100; i++) statuses.push((await post(url, { prompt: 'again' })).status)
    expect(new Set(statuses)).toEqual(new Set([503]))
    expect(up.seen).toHaveLength(1)
    gate.open() // a closed gate never reopens
    expect((await post(url, { prompt: 'x' })).status).toBe(503)
    const m = await gate.metrics.registry.getSingleMetricAsString('flexinfer_gate_refused_total')
    expect(m).toContain('status="503"} 101')
  })

  it('refuses a body above its limit with 413 and counts requests and in-flight', async () => {
    const up = await recorder()
    const { gate, url } = await startGate(up.url, { bodyLimitBytes: 100 })
    gate.open()
    expect((await post(url, { prompt: 'x'.repeat(200) })).status).toBe(413)
    expect(up.seen).toHaveLength(0)
    expect((await fetch(`${url}/flexinfer-gate/readyz`)).status).toBe(200)
    const state = await (await fetch(`${url}/flexinfer-gate/state`)).json()
    expect(state).toMatchObject({ state: 'open', inFlight: 0 })
    gate.close('nats_unreachable')
    expect((await fetch(`${url}/flexinfer-gate/readyz`)).status).toBe(503)
    expect(await (await fetch(`${url}/flexinfer-gate/metrics`)).text()).toContain('flexinfer_gate_open 0')
  })

  it('its health listener answers the probes and /metrics and proxies nothing; refusals say the state; state says the cap', async () => {
    const up = await recorder()
    const { gate, url } = await startGate(up.url, { maxInFlight: 3, maxQueued: 7, engine: 'llamacpp' })
    const health = await gate.listenHealth(0, '127.0.0.1')
    expect((await fetch(`${health}/flexinfer-gate/healthz`)).status).toBe(200)
    expect((await fetch(`${health}/flexinfer-gate/readyz`)).status).toBe(503)
    const starting = await post(url, { prompt: 'x' })
    expect(starting.headers.get('x-flexinfer-gate-state')).toBe('starting')
    gate.open()
    expect((await fetch(`${health}/flexinfer-gate/readyz`)).status).toBe(200)
    expect(await (await fetch(`${health}/flexinfer-gate/metrics`)).text()).toContain('flexinfer_gate_open 1')
    // Not a way around the loopback-only proxy: no request and no state from the pod's address.
    expect((await post(health, { prompt: 'x' })).status).toBe(404)
    expect((await fetch(`${health}/v1/models`)).status).toBe(404)
    expect((await fetch(`${health}/flexinfer-gate/state`)).status).toBe(404)
    expect(up.seen).toHaveLength(0)
    const state = (await (await fetch(`${url}/flexinfer-gate/state`)).json()) as { profile: unknown }
    expect(state.profile).toEqual({ engine: 'llamacpp', priority: undefined, maxInFlight: 3, maxQueued: 7 })
    gate.close('preempted')
    const closed = await post(url, { prompt: 'x' })
    expect(closed.status).toBe(503)
    expect(closed.headers.get('x-flexinfer-gate-state')).toBe('closed')
    expect((await fetch(`${health}/flexinfer-gate/readyz`)).status).toBe(503)
  })

  it('sends each request on a connection of its own: an engine dropping a reused connection loses nothing', async () => {
    // As llama.cpp's server may close a kept-alive connection when the next request goes out on it: any second
    // request on one connection is dropped unanswered.
    const uses = new WeakMap<object, number>()
    const server = http.createServer((req, res) => {
      const n = (uses.get(req.socket) ?? 0) + 1
      uses.set(req.socket, n)
      if (n > 1) return void req.socket.destroy()
      req.resume()
      req.on('end', () => res.end('{"ok":true}'))
    })
    server.keepAliveTimeout = 60_000
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
    cleanups.push(async () => {
      server.closeAllConnections()
      await new Promise<void>((r) => server.close(() => r()))
    })
    const { gate, url } = await startGate(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)
    gate.open()
    const statuses: number[] = []
    for (let i = 0; i < 6; i++) statuses.push((await post(url, { prompt: `p${i}` })).status)
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200])
  })

  it('passes the workload disconnecting on to the engine', async () => {
    const { sim, url: engine } = await startSim()
    const { gate, url } = await startGate(engine)
    gate.open()
    const ac = new AbortController()
    const r = await post(url, { prompt: 'x', max_tokens: 10_000, stream: true }, ac.signal)
    expect(r.status).toBe(200)
    await expect.poll(() => sim.stats.tokens.background, { timeout: 5_000 }).toBeGreaterThan(2)
    ac.abort()
    await expect.poll(() => sim.aborts.length, { timeout: 2_000 }).toBe(1)
    await expect.poll(() => gate.inFlight).toBe(0)
  })

  it('the engine gone mid-stream: the workload reads an error event before the cut, and a 502 when not yet answered', async () => {
    // An engine that streams one event, then its process dies (the socket reset, no end of the stream).
    const server = http.createServer((req, res) => {
      req.resume()
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write('data: {"choices":[{"index":0,"text":"a"}]}\n\n', () => setTimeout(() => res.socket?.destroy(), 20))
      })
    })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
    cleanups.push(async () => {
      server.closeAllConnections()
      await new Promise<void>((r) => server.close(() => r()))
    })
    const { gate, url } = await startGate(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {
      engine: 'llamacpp',
    })
    gate.open()
    // node:http reads every byte that arrived before the cut (a fetch body errored by the cut drops queued chunks).
    const read = (stream: boolean) =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = http.request(`${url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
        })
        req.on('error', reject)
        req.on('response', (res) => {
          let text = ''
          res.setEncoding('utf8')
          res.on('data', (c: string) => {
            text += c
          })
          const done = () => resolve({ status: res.statusCode ?? 0, text })
          res.on('error', done)
          res.on('end', done)
        })
        req.end(JSON.stringify({ prompt: 'x', stream }))
      })
    const streamed = await read(true)
    expect(streamed.status).toBe(200)
    expect(streamed.text).toContain('data: {"error":{"message":"the engine connection was lost","code":502}}')
    // The non-streaming request went upstream as a stream, to be collected: nothing sent yet, so a 502 with a body.
    const collected = await read(false)
    expect(collected.status).toBe(502)
    expect(JSON.parse(collected.text).error.message).toBe('the engine connection was lost mid-answer')
    await expect.poll(() => gate.inFlight).toBe(0)
  })

  it('counts background tokens and requests: completed for answers that ended, discarded and aborted for those the close cut; the closing line says so', async () => {
    const { sim, url: engine } = await startSim({ stepBaseMs: 10 })
    const lines: Record<string, unknown>[] = []
    const logged = createLogger('gate-test', {
      write: (line: string) => {
        const entry = JSON.parse(line) as Record<string, unknown>
        if (String(entry.msg).startsWith('gate closed')) lines.push(entry)
      },
    })
    logged.level = 'info'
    const { gate, url } = await startGate(engine, { maxInFlight: 2, log: logged })
    gate.open()
    const finished = await streamCompletion(url, { maxTokens: 5 })
    expect(ending(finished)).toBe('completed')
    expect(gate.snapshot().tokens).toEqual({ completed: 5, discarded: 0 })
    const cut = streamCompletion(url, { maxTokens: 10_000 })
    await expect.poll(() => sim.stats.tokens.background, { timeout: 5_000 }).toBeGreaterThan(8)
    gate.close('preempted')
    const outcome = await cut
    expect(ending(outcome)).toBe('cut')
    await expect.poll(() => gate.inFlight).toBe(0)
    const { tokens } = gate.snapshot()
    expect(tokens.completed).toBe(5)
    // Every token the workload received of the cut answer is counted thrown away (a token in the socket may be too).
    expect(tokens.discarded).toBeGreaterThanOrEqual(outcome.tokens)
    expect(tokens.discarded).toBeLessThanOrEqual(outcome.tokens + 1)
    const m = await gate.metrics.registry.getSingleMetricAsString('flexinfer_gate_tokens_total')
    expect(m).toContain(`outcome="discarded"} ${tokens.discarded}`)
    expect(gate.snapshot().requestsEnded).toEqual({ completed: 1, aborted: 1, failed: 0 })
    const ended = await gate.metrics.registry.getSingleMetricAsString('flexinfer_gate_requests_ended_total')
    expect(ended).toContain('outcome="completed"} 1')
    expect(ended).toContain('outcome="aborted"} 1')
    // The closing line, written at the close: what was kept, and what this close threw away.
    expect(lines).toHaveLength(1)
    expect(lines[0]?.requests).toEqual({ completed: 1, aborted: 1, failed: 0 })
    const closingTokens = lines[0]?.tokens as { completed: number; discarded: number }
    expect(closingTokens.completed).toBe(5)
    expect(closingTokens.discarded).toBeGreaterThan(0)
    expect(closingTokens.discarded).toBeLessThanOrEqual(tokens.discarded)
  })

  it('on llama.cpp asks every stream for its prompt progress and takes it back out of what the workload reads', async () => {
    // An engine that answers as llama.cpp does with return_progress: progress events, then tokens.
    const bodies: Record<string, unknown>[] = []
    const progress = '{"choices":[{"text":"","index":0}],"prompt_progress":{"total":9,"cache":0,"processed":9}}'
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = []
      req.on('data', (c) => chunks.push(c))
      req.on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString())
        bodies.push(body)
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        if (body.return_progress) res.write(`data: ${progress}\n\n`)
        res.end('data: {"choices":[{"text":"a","index":0}]}\n\ndata: [DONE]\n\n')
      })
    })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
    cleanups.push(async () => {
      server.closeAllConnections()
      await new Promise<void>((r) => server.close(() => r()))
    })
    const engine = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const { gate, url } = await startGate(engine, { engine: 'llamacpp' })
    gate.open()
    const streamed = await (await post(url, { prompt: 'x', stream: true })).text()
    expect(bodies[0]?.return_progress).toBe(true)
    expect(streamed).toBe('data: {"choices":[{"text":"a","index":0}]}\n\ndata: [DONE]\n\n')
    const collected = (await (await post(url, { prompt: 'x' })).json()) as { choices: { text: string }[] }
    expect([bodies[1]?.stream, bodies[1]?.return_progress]).toEqual([true, true])
    expect(collected.choices[0]?.text).toBe('a')
    // A workload that asked for progress itself gets it.
    expect(await (await post(url, { prompt: 'x', stream: true, return_progress: true })).text()).toContain(progress)
    expect(gate.snapshot().tokens).toEqual({ completed: 3, discarded: 0 })
    // Another engine's profile sends the body as the workload wrote it.
    const other = await startGate(engine, { engine: 'vllm' })
    other.gate.open()
    await (await post(other.url, { prompt: 'x', stream: true })).text()
    expect(bodies[3]?.return_progress).toBeUndefined()
  })
})
