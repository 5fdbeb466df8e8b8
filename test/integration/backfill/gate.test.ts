// The background gate end to end, on the real servers: a backfill that opts in (annotation) is admitted with the gate
// injected as a native sidecar — the apiserver accepts the pod spec, the GPU guard passes, every container keeps
// FLEXINFER_WORKLOAD_CLASS=background — and the gate, run with exactly the sidecar's settings against the simulated
// engine, closes the moment a foreground request for the model is published: demand's preempt subject reaches it
// before the Job's deletion, the engine sees every in-flight background request disconnected within the bound, and a
// workload ignoring the 503 gets nothing more through. A gate whose NATS goes away closes within its bound too.
import type { V1CronJob } from '@kubernetes/client-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { gateConfig } from '../../../cmd/gate/config.js'
import { type RunningGate, startGate } from '../../../cmd/gate/index.js'
import { ending, streamCompletion } from '../../../dev/bench/engine-sim/client.js'
import { EngineSim } from '../../../dev/bench/engine-sim/engine.js'
import { ANNOTATION_GATE_ENDPOINT_ENV, GATE_CONTAINER } from '../../../pkg/core/gate.js'
import { gpuViolations } from '../../../pkg/core/job.js'
import { jobName } from '../../../pkg/core/names.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { useTestEnv } from '../../env/fixture.js'
import { startNats } from '../../env/nats.js'
import { useBackfillSystem } from '../support/backfill-system.js'
import { waitUntil } from '../support/backfill-world.js'

const env = useTestEnv()
const sys = useBackfillSystem(env, { gate: { image: 'model-backfill:test', natsUrl: 'nats://gate@nats.test:4222' } })
const log = createLogger('gate-test')
log.level = 'silent'
/**
 * Foreground published → the engine saw the last background request disconnect, on a shared two-core machine with
 * the whole system in this process (167-490 ms seen at load 12-17; bench:gate measures it alone: milliseconds).
 */
const ABORT_BOUND_MS = 1_500

let sim: EngineSim
let engineUrl: string
const stops: (() => Promise<void>)[] = []
beforeAll(async () => {
  sim = new EngineSim({ stepBaseMs: 10, stepPerSeqMs: 0, prefillMsPerToken: 0 })
  engineUrl = await sim.listen()
})
afterAll(async () => {
  for (const stop of stops.reverse()) await stop()
  await sim.stop()
})

const envOf = (c?: { env?: { name: string; value?: string }[] }) =>
  Object.fromEntries((c?.env ?? []).map((e) => [e.name, e.value ?? '']))

/** Streams a long completion through the gate; resolves with how it ended (refusal status, 'cut', 'completed'). */
const stream = (url: string) => streamCompletion(url, { maxTokens: 100_000 }).then(ending)

describe('the background gate', () => {
  it('is injected, and a foreground request closes it and aborts its requests at the engine within the bound', async () => {
    const n = sys.world.names('gated')
    await sys.world.model(n.model, { node: n.node })
    await sys.world.template(n.template, {
      env: [
        { name: 'OPENAI_BASE_URL', value: `${engineUrl}/v1` },
        { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'foreground' },
      ],
      initContainer: true,
    })
    await sys.world.backfill(
      n.backfill,
      { modelRef: n.model, templateRef: n.template, idleFor: '2s' },
      { [ANNOTATION_GATE_ENDPOINT_ENV]: 'OPENAI_BASE_URL' },
    )
    await sys.world.waitFor(n.backfill, 'Running', 'JobRunning')
    const job = await sys.world.job(jobName(n.backfill, 1))
    const pod = job?.spec?.template.spec
    // What the apiserver stored: the native sidecar first, the workload pointed at it, background everywhere.
    const sidecar = pod?.initContainers?.[0]
    expect(sidecar?.name).toBe(GATE_CONTAINER)
    expect(sidecar?.restartPolicy).toBe('Always')
    for (const c of [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])])
      expect(envOf(c).FLEXINFER_WORKLOAD_CLASS, c.name).toBe('background')
    expect(envOf(pod?.containers[0]).OPENAI_BASE_URL).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/)
    expect(gpuViolations({ spec: { schedule: '', jobTemplate: { spec: job?.spec } } } as V1CronJob)).toEqual([])

    // The gate as the sidecar would run, on the test's NATS (the sidecar's own NATS_URL names the cluster's, and its
    // seed file is the mounted Secret's path in the pod).
    const settings = envOf(sidecar)
    expect(settings.GATE_UPSTREAM).toBe(engineUrl)
    expect(settings.NATS_NKEY_SEED_FILE).toMatch(/^\//)
    const running: RunningGate = await startGate(
      gateConfig({ ...settings, NATS_URL: env.natsUrl, NATS_NKEY_SEED_FILE: undefined, GATE_PORT: '0' }),
      log,
    )
    stops.push(running.stop)
    await expect.poll(() => running.gate.state, { timeout: 10_000 }).toBe('open')

    // Three background streams: two in flight (the default cap), one waiting.
    const outcomes = [stream(running.url), stream(running.url), stream(running.url)]
    await expect.poll(() => sim.stats.tokens.background, { timeout: 10_000 }).toBeGreaterThan(10)
    expect(running.gate.inFlight).toBe(2)

    const publishedAt = await sys.world.foreground(n.model)
    await expect.poll(() => running.gate.state, { timeout: 5_000 }).toBe('closed')
    expect(running.gate.closeReason).toBe('preempted')
    expect((await Promise.all(outcomes)).sort()).toEqual([503, 'cut', 'cut'].sort())
    await expect.poll(() => sim.aborts.length, { timeout: 2_000 }).toBe(2)
    const lastAbort = Math.max(...sim.aborts.map((a) => a.seenAt))
    const p = running.gate.lastPreemption
    console.log(
      `gate: foreground published → last background request aborted at the engine ${(lastAbort - publishedAt).toFixed(1)} ms; ` +
        `signal → last abort in the gate ${((p?.lastAbortAt ?? 0) - (p?.signalAt ?? 0)).toFixed(3)} ms`,
    )
    expect(lastAbort - publishedAt).toBeLessThan(ABORT_BOUND_MS)
    await expect.poll(() => sim.stats.running, { timeout: 2_000 }).toBe(0)

    // A workload that ignores the 503 gets nothing through; the Job's deletion follows as the backstop.
    const before = sim.stats.completed.background + sim.stats.aborted.background
    const statuses = await Promise.all(Array.from({ length: 50 }, () => stream(running.url)))
    expect(new Set(statuses)).toEqual(new Set([503]))
    expect(sim.stats.completed.background + sim.stats.aborted.background).toBe(before)
    await waitUntil('the attempt preempted by foreground (the Job deleted)', async () =>
      (await sys.world.state(n.backfill))?.counters.preemptions.foreground === 1 ? true : undefined,
    )
  })

  it('closes when its NATS goes away, within its bound', async () => {
    const own = await startNats({ cluster: false })
    stops.push(own.stop)
    const running = await startGate(
      gateConfig({
        NATS_URL: own.natsUrl,
        GATE_UPSTREAM: engineUrl,
        GATE_NAMESPACE: env.namespace,
        GATE_MODEL: 'lonely',
        GATE_JOB: 'lonely-1-abcdef12',
        GATE_PORT: '0',
        GATE_NATS_BOUND_MS: '500',
      }),
      log,
    )
    stops.push(running.stop)
    await expect.poll(() => running.gate.state, { timeout: 10_000 }).toBe('open')
    const outcome = stream(running.url)
    await waitUntil('a background request in flight', async () => (running.gate.inFlight === 1 ? true : undefined))
    const killedAt = Date.now()
    await own.kill(own.servers[0]?.name as string)
    await expect.poll(() => running.gate.state, { timeout: 5_000 }).toBe('closed')
    const closedAfter = Date.now() - killedAt
    console.log(`gate: NATS killed → gate closed after ${closedAfter} ms (bound 500 ms)`)
    expect(running.gate.closeReason).toBe('nats_unreachable')
    expect(closedAfter).toBeLessThan(2_000)
    expect(await outcome).toBe('cut')
    expect((await fetch(`${running.url}/v1/completions`, { method: 'POST', body: '{}' })).status).toBe(503)
  })
})
