// The background gate on the real engine: llama.cpp's llama-server serving SmolLM2 135M (chat) and Gemma 3 270M
// (completions), started for this file (test/env/engine.ts; built by dev/scripts/install-binaries.sh, which
// ensureBinaries() runs when it is missing, so a machine without the engine fails here instead of skipping). What
// the engine itself reports (/slots, /metrics) is the oracle, not the gate's own view:
// - the collect path: a non-streaming chat or text completion through a `llamacpp` gate is one well-formed JSON body;
// - a foreground request, through the real demand path, while the backfill's streams decode: the gate closes and
//   every slot of the engine is idle within a bound measured from the engine's own step time;
// - a workload that ignores the 503 gets nothing through: the engine's counters do not move;
// - a background request closed while its long prompt is processed: the engine takes at most three more steps (its
//   own count of decode calls), not the rest of the prompt;
// - the engine killed mid-attempt: the workload gets a 502 or an SSE error event with a message, within a deadline.
// Prompts are fresh (a random tag) so the prompt cache does not answer them. The file runs alone (vitest.config.ts).
import { randomBytes } from 'node:crypto'
import http from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { gateConfig } from '../../../cmd/gate/config.js'
import { type RunningGate, startGate } from '../../../cmd/gate/index.js'
import {
  ANNOTATION_GATE_ENDPOINT_ENV,
  ANNOTATION_GATE_ENGINE,
  GATE_CONTAINER,
  GATE_ENV,
} from '../../../pkg/core/gate.js'
import { jobName } from '../../../pkg/core/names.js'
import { createLogger } from '../../../pkg/observability/log.js'
import {
  busySlots,
  ENGINE_PATHS,
  type EngineApi,
  type EngineOnly,
  engineMetrics,
  engineSlots,
  startEngine,
} from '../../env/engine.js'
import { useTestEnv } from '../../env/fixture.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env, { gate: { image: 'model-backfill:test', natsUrl: 'nats://gate@nats.test:4222' } })
const log = createLogger('engine-test')
log.level = 'silent'

/** Every request of this file has a deadline: a hang fails the test, it does not stall the suite. */
const REQUEST_DEADLINE_MS = 60_000
/** The engine killed → the workload has its error: the gate sees the connection reset at once; slack for load. */
const LOST_DEADLINE_MS = 5_000
/**
 * Preempt received → every slot idle, beyond the engine's own steps: the cancel crossing the server's HTTP thread
 * and task queue, the /slots read (itself a task served between steps) and this process's polling, on two cores
 * shared with whatever else runs.
 */
const IDLE_SLACK_MS = 300

let engine: EngineOnly
const stops: (() => Promise<void>)[] = []
beforeAll(async () => {
  engine = await startEngine({ log: (line) => console.log(`engine: ${line}`) })
  stops.push(() => engine.stop())
})
afterAll(async () => {
  for (const stop of stops.reverse()) await stop().catch(() => {})
})

const fresh = () => randomBytes(6).toString('hex')
const url = (api: EngineApi) => engine.server(api).url

/** A gate of the llamacpp profile in front of one of the engine's servers, on the test's NATS. */
async function gateFor(api: EngineApi, model: string, settings: Record<string, string | undefined> = {}) {
  const running: RunningGate = await startGate(
    gateConfig({
      [GATE_ENV.upstream]: url(api),
      [GATE_ENV.namespace]: env.namespace,
      [GATE_ENV.model]: model,
      [GATE_ENV.job]: `${model}-1-abcdef12`,
      [GATE_ENV.engine]: 'llamacpp',
      ...settings,
      // The sidecar's NATS_URL names the cluster's NATS and its seed file the mounted Secret: the test's instead.
      NATS_URL: env.natsUrl,
      NATS_NKEY_SEED_FILE: undefined,
      GATE_PORT: '0',
    }),
    log,
  )
  stops.push(running.stop)
  await expect.poll(() => running.gate.state, { timeout: 10_000 }).toBe('open')
  return running
}

/** The request body of one API: a fresh prompt, `maxTokens` out, streamed or not. */
function body(api: EngineApi, maxTokens: number, stream: boolean, prompt: string) {
  const model = engine.server(api).model
  return api === 'chat'
    ? { model, messages: [{ role: 'user', content: prompt }], max_tokens: maxTokens, stream }
    : { model, prompt, max_tokens: maxTokens, stream }
}

const post = (base: string, api: EngineApi, payload: unknown) =>
  fetch(`${base}${ENGINE_PATHS[api]}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(payload),
    signal: AbortSignal.timeout(REQUEST_DEADLINE_MS),
  })

/** The fields of an OpenAI answer (or error) these tests read. */
interface Answer {
  object?: string
  model?: string
  choices?: { finish_reason?: string; text?: string; message?: { role?: string; content?: string } }[]
  usage?: { completion_tokens?: number }
  error?: { message?: string }
}

/** One non-streaming request: its status, content type and parsed body (or the raw text when it is not JSON). */
async function ask(base: string, api: EngineApi, maxTokens: number, prompt = `${fresh()} Tell me about rivers.`) {
  const r = await post(base, api, body(api, maxTokens, false, prompt))
  const text = await r.text()
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    json = undefined
  }
  return { status: r.status, contentType: r.headers.get('content-type') ?? '', text, json: json as Answer | undefined }
}

/** How one streamed request went: refused (status), tokens and their arrival times, an error event, how it ended. */
interface Streamed {
  status: number
  tokenTimes: number[]
  errorMessage?: string
  end: 'done' | 'cut' | 'refused'
  endedAt: number
}

/**
 * A streamed request whose tokens are counted as they arrive (`live` is updated in place). node:http, not fetch: a
 * fetch body errored by a cut drops the chunks still queued in it, and the last event before a cut is what is tested.
 */
function streamed(base: string, api: EngineApi, maxTokens: number) {
  const live: Streamed = { status: 0, tokenTimes: [], end: 'cut', endedAt: 0 }
  const payload = JSON.stringify(body(api, maxTokens, true, `${fresh()} Write a long story about a lighthouse.`))
  const done = new Promise<Streamed>((resolve) => {
    const finish = () => {
      if (live.endedAt) return
      live.endedAt = performance.timeOrigin + performance.now()
      resolve(live)
    }
    const req = http.request(`${base}${ENGINE_PATHS[api]}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      timeout: REQUEST_DEADLINE_MS,
    })
    req.on('timeout', () => req.destroy(new Error('deadline')))
    req.on('error', finish)
    req.on('response', (res) => {
      live.status = res.statusCode ?? 0
      if (live.status !== 200) {
        live.end = 'refused'
        res.resume()
        res.on('end', finish)
        res.on('close', finish)
        return
      }
      let pending = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        pending += chunk
        for (let cut = pending.indexOf('\n\n'); cut >= 0; cut = pending.indexOf('\n\n')) {
          const event = pending.slice(0, cut).trim()
          pending = pending.slice(cut + 2)
          if (!event.startsWith('data: ')) continue
          const data = event.slice('data: '.length)
          if (data === '[DONE]') {
            live.end = 'done'
            continue
          }
          const parsed = JSON.parse(data) as { error?: { message?: string }; choices?: unknown[] }
          if (parsed.error) live.errorMessage = parsed.error.message ?? JSON.stringify(parsed.error)
          else if (parsed.choices?.length) live.tokenTimes.push(performance.timeOrigin + performance.now())
        }
      })
      // Ended without [DONE] (cut by the gate, or the engine gone): `end` stays 'cut'.
      res.on('error', finish)
      res.on('close', finish)
    })
    req.end(payload)
  })
  return { live, done }
}

/** Resolves with the promise's value, or rejects once `ms` pass: a hang is a failure with a name. */
function within<T>(what: string, ms: number, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)
  })
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer))
}

/** When /slots first showed every slot idle (epoch ms), polled as fast as the engine answers; throws after `ms`. */
async function idleSlotsAt(api: EngineApi, ms: number): Promise<number> {
  const deadline = Date.now() + ms
  for (;;) {
    if ((await busySlots(url(api), 5_000)) === 0) return performance.timeOrigin + performance.now()
    if (Date.now() > deadline) throw new Error(`${api}: a slot still busy ${ms} ms after the preempt`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

/** The longest gap between consecutive tokens of these streams over their last `n` tokens: the step time seen. */
function stepMs(streams: Streamed[], n = 20): number {
  let worst = 0
  for (const s of streams) {
    const t = s.tokenTimes.slice(-n)
    for (let i = 1; i < t.length; i++) worst = Math.max(worst, (t[i] as number) - (t[i - 1] as number))
  }
  return worst
}

/** The counters that move whenever the engine takes a request: prompt and generated tokens, decode calls. */
const WORK = ['prompt_tokens_total', 'tokens_predicted_total', 'n_decode_total'] as const
const work = async (api: EngineApi) => {
  const m = await engineMetrics(url(api))
  return Object.fromEntries(WORK.map((k) => [k, m[k]]))
}

const envOf = (c?: { env?: { name: string; value?: string }[] }) =>
  Object.fromEntries((c?.env ?? []).map((e) => [e.name, e.value ?? '']))

describe('the gate on the real engine (llama.cpp)', () => {
  it('answers a non-streaming chat and text completion with one well-formed JSON body (the collect path)', async () => {
    for (const api of ['chat', 'completions'] as const) {
      const running = await gateFor(api, `collect-${api}`)
      const before = await engineMetrics(url(api))
      const r = await ask(running.url, api, 24)
      expect(r.status, r.text).toBe(200)
      expect(r.contentType).toContain('application/json')
      expect(r.json, r.text).toBeTypeOf('object')
      const answer = r.json as Answer
      expect(answer.choices).toHaveLength(1)
      const choice = answer.choices?.[0]
      expect(['stop', 'length']).toContain(choice?.finish_reason)
      if (api === 'chat') {
        expect(answer.object).toBe('chat.completion')
        expect(choice?.message?.role).toBe('assistant')
        expect(choice?.message?.content).toMatch(/\S/)
      } else {
        expect(answer.object).toBe('text_completion')
        expect(choice?.text).toMatch(/\S/)
      }
      expect(answer.model).toBe(engine.server(api).model)
      const tokens = answer.usage?.completion_tokens as number
      expect(tokens).toBeGreaterThan(0)
      expect(tokens).toBeLessThanOrEqual(24)
      // The engine generated exactly what the one answer reports: one request, nothing lost or repeated.
      await expect.poll(() => busySlots(url(api)), { timeout: 5_000 }).toBe(0)
      const after = await engineMetrics(url(api))
      expect(Number(after.tokens_predicted_total) - Number(before.tokens_predicted_total)).toBe(tokens)
      console.log(`engine: collected ${api} answer, ${tokens} tokens, ${r.text.length} bytes`)
    }
  })

  it('closes on a foreground request while background decodes: every engine slot idle within one step and the disconnect; a workload ignoring the 503 gets nothing through', async () => {
    const n = sys.world.names('engine')
    await sys.world.model(n.model, { node: n.node })
    await sys.world.template(n.template, {
      env: [{ name: 'OPENAI_BASE_URL', value: `${url('chat')}/v1` }],
      initContainer: true,
    })
    await sys.world.backfill(
      n.backfill,
      { modelRef: n.model, templateRef: n.template, idleFor: '2s' },
      { [ANNOTATION_GATE_ENDPOINT_ENV]: 'OPENAI_BASE_URL', [ANNOTATION_GATE_ENGINE]: 'llamacpp' },
    )
    await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    const job = await sys.world.job(jobName(n.backfill, 1))
    const sidecar = job?.spec?.template.spec?.initContainers?.find((c) => c.name === GATE_CONTAINER)
    const settings = envOf(sidecar)
    expect(settings[GATE_ENV.engine]).toBe('llamacpp')
    expect(settings[GATE_ENV.upstream]).toBe(url('chat'))
    // The gate exactly as the sidecar runs, on the test's NATS.
    const running = await gateFor('chat', n.model, settings)

    // Two background streams decode (the default cap), a third waits for a place.
    const streams = [streamed(running.url, 'chat', 1_500), streamed(running.url, 'chat', 1_500)]
    await waitUntil(
      'both background streams decoding',
      async () => (streams.every((s) => s.live.tokenTimes.length >= 25) ? true : undefined),
      REQUEST_DEADLINE_MS,
    )
    const waiting = streamed(running.url, 'chat', 1_500)
    await expect.poll(() => running.gate.snapshot().queued, { timeout: 5_000 }).toBe(1)
    expect(await busySlots(url('chat'))).toBe(2)
    const step = stepMs(streams.map((s) => s.live))

    const publishedAt = await sys.world.foreground(n.model)
    await expect.poll(() => running.gate.state, { timeout: 10_000 }).toBe('closed')
    expect(running.gate.closeReason).toBe('preempted')
    const signalAt = running.gate.lastPreemption?.signalAt as number
    const idleAt = await idleSlotsAt('chat', 10_000)
    // A closed stream is noticed when its next token's write fails (at most the step in flight), and its slot is let
    // go after the step that is running by then: two steps; /slots itself is answered between steps: a third.
    const bound = 3 * step + IDLE_SLACK_MS
    const outcomes = await within('the background requests ended', 10_000, Promise.all(streams.map((s) => s.done)))
    console.log(
      `engine: foreground published → preempt at the gate ${(signalAt - publishedAt).toFixed(1)} ms; ` +
        `preempt → every slot idle on the engine's /slots ${(idleAt - signalAt).toFixed(1)} ms ` +
        `(bound ${bound.toFixed(0)} ms: 3 × the longest token gap ${step.toFixed(1)} ms + ${IDLE_SLACK_MS} ms); ` +
        `background tokens ${outcomes.map((o) => o.tokenTimes.length).join(', ')} before the cut`,
    )
    expect(idleAt - signalAt).toBeLessThan(bound)
    expect(outcomes.map((o) => o.end)).toEqual(['cut', 'cut'])
    expect((await within('the waiting request', 10_000, waiting.done)).status).toBe(503)

    // A workload that ignores the 503: nothing reaches the engine (its own counters, read once its slots are idle).
    const before = await work('chat')
    const retries = await Promise.all([
      ...Array.from({ length: 20 }, () => streamed(running.url, 'chat', 64).done.then((s) => s.status)),
      ...Array.from({ length: 20 }, () => ask(running.url, 'chat', 64).then((r) => r.status)),
    ])
    expect(new Set(retries)).toEqual(new Set([503]))
    expect(await busySlots(url('chat'))).toBe(0)
    expect(await work('chat')).toEqual(before)
    expect((await engineMetrics(url('chat'))).requests_processing).toBe(0)
    // The Job's deletion follows as the backstop.
    await waitUntil('the attempt preempted by foreground (the Job deleted)', async () =>
      (await sys.world.state(n.backfill))?.counters.preemptions.foreground === 1 ? true : undefined,
    )
  })

  it('a background request closed while its prompt is processed is let go within three steps, not at the prompt end', async () => {
    const running = await gateFor('completions', 'prompt-phase')
    // Many prompt chunks (-b, test/env/engine.ts): the prompt alone takes far more steps than the bound.
    const prompt = `${fresh()} ${'The river bends past the old mill, under the stone bridge and on to the sea. '.repeat(70)}`
    const request = post(running.url, 'completions', body('completions', 32, true, prompt)).then(
      (r) => r.text(),
      () => 'cut',
    )
    const inPrompt = async () => {
      const slot = (await engineSlots(url('completions'))).find((s) => s.is_processing)
      // Some chunks taken, no token yet: the prompt is under way.
      return slot && (slot.n_prompt_tokens_processed ?? 0) > 0 && slot.next_token?.[0]?.n_decoded === 0
        ? slot
        : undefined
    }
    const slot = await waitUntil('the prompt under way', inPrompt, REQUEST_DEADLINE_MS)
    // Finished decode calls: the step in flight is not counted yet.
    const before = Number((await engineMetrics(url('completions'))).n_decode_total)
    running.gate.close('preempted')
    await idleSlotsAt('completions', REQUEST_DEADLINE_MS)
    const steps = Number((await engineMetrics(url('completions'))).n_decode_total) - before
    await within('the closed request', 10_000, request)
    console.log(
      `engine: closed in its prompt (${slot.n_prompt_tokens_processed} tokens taken, -b ${engine.batchSize}) → ` +
        `slot idle after ${steps} more steps`,
    )
    // The chunk in flight, the next one when the cancel reaches the queue after it began, and one more for a server
    // HTTP thread waiting for a core (two cores shared): never the rest of the prompt.
    expect(steps).toBeLessThanOrEqual(3)
  })

  it('the engine going away mid-attempt is a clear error for the workload, within a deadline', async () => {
    const running = await gateFor('chat', 'lost')
    const stream = streamed(running.url, 'chat', 1_500)
    const collected = ask(running.url, 'chat', 1_500)
    await waitUntil(
      'a stream decoding and a collected answer in flight',
      async () => (stream.live.tokenTimes.length >= 10 && (await busySlots(url('chat'))) === 2 ? true : undefined),
      REQUEST_DEADLINE_MS,
    )
    const killedAt = performance.timeOrigin + performance.now()
    await engine.kill('chat')
    const [s, c] = await within(
      'the workload told the engine is gone',
      LOST_DEADLINE_MS,
      Promise.all([stream.done, collected.then((r) => ({ ...r, at: performance.timeOrigin + performance.now() }))]),
    )
    console.log(
      `engine: killed → stream error event and cut ${(s.endedAt - killedAt).toFixed(1)} ms, ` +
        `collected answer's ${c.status} ${(c.at - killedAt).toFixed(1)} ms`,
    )
    // The stream under way: an error event with a message, then the cut (never a stream that just stops).
    expect(s.errorMessage).toMatch(/engine connection was lost/)
    expect(s.end).toBe('cut')
    // The collected answer not yet sent: a 502 whose JSON body says why.
    expect(c.status, c.text).toBe(502)
    expect(c.json?.error?.message).toMatch(/engine connection was lost/)
    // And after it, with the engine gone: a 502 naming the refused connection, at once.
    const after = await within('a request to the gone engine', LOST_DEADLINE_MS, ask(running.url, 'chat', 8))
    expect(after.status).toBe(502)
    expect(after.json?.error?.message).toMatch(/upstream unreachable/)
  })
})
