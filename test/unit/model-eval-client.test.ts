// model-eval's settings and its OpenAI-compatible client against a real local HTTP server: the background mark on
// every request, retries on 429/503 that wait the server's Retry-After, bounded, and each failure named.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { OpenAiClient, retryAfterMs, WorkloadError } from '../../cmd/model-eval/openai.js'
import { parseDurationMs, parseModels, readSettings } from '../../cmd/model-eval/settings.js'
import { modelInfo } from '../../cmd/model-eval/work.js'

describe('settings', () => {
  const base = { OPENAI_BASE_URL: 'http://gate:8000/v1/', MODELS: 'gemma4-26b-a4b-gptq-5930k=vllm' }
  it('reads the template defaults (FlexInfer gauntlet: 64, 3, 30s)', () => {
    const s = readSettings(base, () => 'x')
    expect(s).toMatchObject({
      baseUrl: 'http://gate:8000/v1',
      models: [{ name: 'gemma4-26b-a4b-gptq-5930k', engine: 'vllm' }],
      api: 'chat',
      expect: 'READY',
      batchSize: 64,
      iters: 3,
      minDurationMs: 30_000,
      workloadClass: 'background',
      runId: 'local-x',
      runIdFromController: false,
      attempt: 1,
      configMaps: true,
    })
  })
  it('takes the run identity and attempt from the controller', () => {
    const s = readSettings({ ...base, FLEXINFER_RUN_ID: 'run-abc', FLEXINFER_ATTEMPT: '3' }, () => 'x')
    expect([s.runId, s.runIdFromController, s.attempt]).toEqual(['run-abc', true, 3])
  })
  it('names every bad setting at once', () => {
    expect(() =>
      readSettings(
        {
          MODELS: 'Bad_Name=vllm',
          GAUNTLET_API: 'embeddings',
          BATCH_SIZE: '0',
          MIN_DURATION: 'soon',
          FLEXINFER_WORKLOAD_CLASS: 'foreground',
          DATABASE_URL: 'mysql://x',
        },
        () => 'x',
      ),
    ).toThrow(
      /OPENAI_BASE_URL is not set[\s\S]*MODELS[\s\S]*GAUNTLET_API[\s\S]*BATCH_SIZE[\s\S]*MIN_DURATION[\s\S]*FLEXINFER_WORKLOAD_CLASS[\s\S]*DATABASE_URL/,
    )
  })
  it('refuses a result with nowhere to go', () => {
    expect(() => readSettings({ ...base, RESULT_CONFIGMAPS: 'false' }, () => 'x')).toThrow(/needs DATABASE_URL/)
  })
  it('parses models and durations', () => {
    expect(parseModels('a=vllm, b=llamacpp')).toEqual([
      { name: 'a', engine: 'vllm' },
      { name: 'b', engine: 'llamacpp' },
    ])
    expect(() => parseModels('a=vllm,a=vllm')).toThrow(/twice/)
    expect([parseDurationMs('30s'), parseDurationMs('2m'), parseDurationMs('500ms'), parseDurationMs('5')]).toEqual([
      30_000, 120_000, 500, 5000,
    ])
  })
})

describe('client', () => {
  let server: http.Server
  let url: string
  const seen: { path: string; klass?: string; at: number }[] = []
  let busy = 0
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      seen.push({ path: req.url ?? '', klass: req.headers['x-flexinfer-workload-class'] as string, at: Date.now() })
      if (req.url === '/v1/models') return void res.end(JSON.stringify({ data: [{ id: 'm', max_model_len: 2048 }] }))
      if (req.url === '/busy/v1/chat/completions' && busy-- > 0) {
        res.writeHead(429, { 'retry-after': '0.3' })
        return void res.end('slow down')
      }
      if (req.url === '/always/v1/chat/completions') {
        res.writeHead(503, { 'retry-after': '0' })
        return void res.end('closed')
      }
      if (req.url === '/later/v1/chat/completions') {
        res.writeHead(503, { 'retry-after': '5' })
        return void res.end('closed for now')
      }
      if (req.url === '/garbage/v1/chat/completions') return void res.end('<html>')
      if (req.url === '/missing/v1/chat/completions') {
        res.writeHead(404)
        return void res.end('{"error":{"message":"The model `x` does not exist."}}')
      }
      res.end(JSON.stringify({ choices: [{ message: { content: 'READY' } }], usage: { completion_tokens: 1 } }))
    })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(() => new Promise<void>((r) => server.close(() => r())))
  const client = (prefix: string, maxRetries = 3) =>
    new OpenAiClient({
      baseUrl: `${url}${prefix}/v1`,
      workloadClass: 'background',
      requestTimeoutMs: 2000,
      maxRetries,
      signal: new AbortController().signal,
    })

  it('marks every request background', async () => {
    seen.length = 0
    await client('').complete('chat', 'm', 'hi', 4)
    expect(seen.map((s) => s.klass)).toEqual(['background'])
  })
  it('waits what Retry-After asks on 429, then succeeds', async () => {
    busy = 2
    seen.length = 0
    const c = await client('/busy').complete('chat', 'm', 'hi', 4)
    expect(c.text).toBe('READY')
    expect(seen).toHaveLength(3)
    expect((seen[1]?.at ?? 0) - (seen[0]?.at ?? 0)).toBeGreaterThanOrEqual(280)
  })
  it('gives up after the bounded retries with the status', async () => {
    seen.length = 0
    await expect(client('/always', 2).complete('chat', 'm', 'hi', 4)).rejects.toMatchObject({
      kind: 'refused',
      message: expect.stringMatching(/HTTP 503 after 2 retries: closed/),
    })
    expect(seen).toHaveLength(3)
  })
  it('names a malformed answer, a model not served and an endpoint not reached', async () => {
    await expect(client('/garbage').complete('chat', 'm', 'hi', 4)).rejects.toMatchObject({ kind: 'malformed' })
    await expect(client('/missing').complete('chat', 'x', 'hi', 4)).rejects.toMatchObject({ kind: 'not-served' })
    const gone = new OpenAiClient({
      baseUrl: 'http://127.0.0.1:1/v1',
      workloadClass: 'background',
      requestTimeoutMs: 1000,
      maxRetries: 3,
      signal: new AbortController().signal,
    })
    const err = await gone.complete('chat', 'm', 'hi', 4).catch((e) => e)
    expect(err).toBeInstanceOf(WorkloadError)
    expect(err.kind).toBe('unreachable')
    expect(await modelInfo(client(''), 'other', 'vllm')).toMatchObject({ error: { kind: 'not-served' }, served: ['m'] })
  })
  it('an abort ends a request at once and is never retried', async () => {
    const stop = new AbortController()
    const c = new OpenAiClient({
      baseUrl: `${url}/later/v1`,
      workloadClass: 'background',
      requestTimeoutMs: 2000,
      maxRetries: 10,
      maxRetryWaitMs: 5000,
      signal: stop.signal,
    })
    const started = Date.now()
    const pending = c.complete('chat', 'm', 'hi', 4)
    setTimeout(() => stop.abort(), 50)
    await expect(pending).rejects.toMatchObject({ kind: 'aborted' })
    expect(Date.now() - started).toBeLessThan(1000)
  })
  it('reads Retry-After as seconds or a date', () => {
    expect(retryAfterMs('2')).toBe(2000)
    expect(retryAfterMs(new Date(10_000).toUTCString(), 5000)).toBe(5000)
    expect(retryAfterMs('soon')).toBeUndefined()
  })
})
