// Issue 12: one trace from a gateway's foreground request to the Job's DELETE, across the NATS hops, on the real
// servers. Tracing is set up in this process with an in-memory exporter (every function runs in-process); a
// gateway request span emits the request; demand cancels the running attempt, cancel deletes the Job and writes
// the status. Every span is in the request's trace and each hop is the child of the one before:
//   gateway request → Create foreground.request → Process foreground.request (demand)
//   → Create backfill.cancel → Process backfill.cancel (cancel) → DELETE Job, write ModelBackfill status

import { createForegroundEmitter } from '@flexinfer/gateway-emitter'
import { context, trace } from '@opentelemetry/api'
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { jobName } from '../../../pkg/core/names.js'
import { CE_ATTR, startTracing, stopTracing } from '../../../pkg/observability/tracing.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const env = useTestEnv()
const exporter = new InMemorySpanExporter()
let runner: Runner
let world: BackfillWorld

beforeAll(async () => {
  await startTracing({ exporter, simple: true, serviceName: 'tracing-test' })
  runner = await startTestRunner(env)
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  world?.close()
  await runner?.stop()
  await stopTracing()
})

it('one trace from a foreground request (emitter) to the Job DELETE and the status write, parent → child across NATS', async () => {
  const n = await world.declare('traced')
  await world.waitFor(n.backfill, 'Running', 'JobRunning', 45_000)
  const job = jobName(n.backfill, 1)

  const emitter = createForegroundEmitter(env.nc, { source: 'traced-gateway' })
  const root = trace.getTracer('gateway').startSpan('gateway request')
  const outcome = await context.with(trace.setSpan(context.active(), root), () =>
    emitter.emit({ namespace: env.namespace, model: n.model }),
  )
  root.end()
  await emitter.close()
  expect(outcome).toBe('published')
  const traceId = root.spanContext().traceId

  const inTrace = () => exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId)
  const named = (name: string, spans = inTrace()) => spans.find((s) => s.name === name)
  await waitUntil(
    'the DELETE and the status write in the request trace',
    async () => (named('DELETE Job') && named('write ModelBackfill status') ? true : undefined),
    30_000,
    async () => JSON.stringify(inTrace().map((s) => s.name)),
  )
  expect((await world.job(job))?.metadata?.deletionTimestamp ?? 'gone').toBeTruthy()

  const spans = inTrace()
  const chain = [
    'gateway request',
    'CloudEvents Create ai.flexinfer.foreground.request',
    'CloudEvents Process ai.flexinfer.foreground.request',
    'CloudEvents Create ai.flexinfer.backfill.cancel',
    'CloudEvents Process ai.flexinfer.backfill.cancel',
    'DELETE Job',
  ].map((name) => {
    const span = named(name, spans)
    expect(span, `${name} in trace ${traceId}: ${spans.map((s) => s.name).join(', ')}`).toBeDefined()
    return span as ReadableSpan
  })
  for (let i = 1; i < chain.length; i++) {
    const [parent, child] = [chain[i - 1] as ReadableSpan, chain[i] as ReadableSpan]
    expect(child.parentSpanContext?.spanId, `${child.name} is the child of ${parent.name}`).toBe(
      parent.spanContext().spanId,
    )
  }
  const cancelSpan = chain[4] as ReadableSpan
  const status = named('write ModelBackfill status', spans) as ReadableSpan
  expect(status.parentSpanContext?.spanId).toBe(cancelSpan.spanContext().spanId)

  // The CloudEvents semantic conventions on the hops.
  expect(chain[2]?.attributes).toMatchObject({
    [CE_ATTR.type]: 'ai.flexinfer.foreground.request',
    [CE_ATTR.source]: 'traced-gateway',
    [CE_ATTR.specVersion]: '1.0',
  })
  // The function's name (here with the test runner's instance suffix).
  expect(chain[2]?.attributes['flexinfer.function']).toMatch(/^demand/)
  expect(chain[1]?.attributes[CE_ATTR.id]).toBe(chain[2]?.attributes[CE_ATTR.id])
  expect(chain[3]?.attributes[CE_ATTR.id]).toBe(chain[4]?.attributes[CE_ATTR.id])
  expect(cancelSpan.attributes['flexinfer.function']).toMatch(/^cancel/)
  expect(chain[5]?.attributes).toMatchObject({ 'k8s.namespace.name': env.namespace, 'k8s.job.name': job })
  const ms = (s: ReadableSpan) => s.startTime[0] * 1000 + s.startTime[1] / 1e6
  process.stderr.write(
    `[tracing] request → DELETE ${Math.round(ms(chain[5] as ReadableSpan) - ms(chain[0] as ReadableSpan))} ms; ` +
      `${spans.length} spans in the trace: ${spans.map((s) => s.name).join(', ')}\n`,
  )
})
