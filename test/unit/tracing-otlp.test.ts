// Tracing switched on the way a deployment does it: OTEL_EXPORTER_OTLP_ENDPOINT set, the configuration parsed and
// tracing started as the entry point does (cmd/manager/main.ts), then nothing called but the hooks. The SDK sets up
// the OTLP/HTTP exporter from the environment itself; the spans reach a loopback
// collector (OTLP/HTTP JSON) at shutdown, with service.name model-backfill-<FUNCTION>. A file of its own: the tracer
// provider is process-wide.
import Fastify from 'fastify'
import { afterAll, expect, it } from 'vitest'
import { loadConfig, tracingOptions } from '../../cmd/manager/config.js'
import { decode } from '../../events/codec.js'
import { inEventSpan, startTracing, stopTracing, traced, tracingEnabled } from '../../pkg/observability/tracing.js'

const collector = Fastify({ logger: false })
const posts: { url: string; body: unknown }[] = []
collector.post('/v1/traces', async (req) => {
  posts.push({ url: req.url, body: req.body })
  return {}
})
afterAll(() => collector.close())

it('OTEL_EXPORTER_OTLP_ENDPOINT turns spans on; they are exported over OTLP/HTTP', async () => {
  const url = await collector.listen({ port: 0, host: '127.0.0.1' })
  const saved = { ...process.env }
  Object.assign(process.env, { OTEL_EXPORTER_OTLP_ENDPOINT: url, FUNCTION: 'cancel' })
  delete process.env.OTEL_SERVICE_NAME
  try {
    const tracing = tracingOptions(loadConfig(process.env))
    expect(tracing).toEqual({ serviceName: 'model-backfill-cancel' })
    await startTracing(tracing)
    const decoded = decode(
      JSON.stringify({
        specversion: '1.0',
        id: 'otlp-1',
        source: 'test',
        type: 'ai.flexinfer.backfill.admit',
        traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
        data: { namespace: 'ns', backfill: 'b' },
      }),
    )
    if (!decoded.ok) throw new Error(decoded.reason)
    await inEventSpan(decoded.event, 'cancel', () => traced('DELETE Job', { 'k8s.job.name': 'j' }, async () => {}))
    expect(tracingEnabled()).toBe(true)
    await stopTracing()
  } finally {
    process.env = saved
  }
  const text = JSON.stringify(posts.map((p) => p.body))
  expect(posts.length).toBeGreaterThan(0)
  expect(text).toContain('CloudEvents Process ai.flexinfer.backfill.admit')
  expect(text).toContain('DELETE Job')
  expect(text).toContain('model-backfill-cancel')
  expect(text).toContain('4bf92f3577b34da6a3ce929d0e0e4736')
})
