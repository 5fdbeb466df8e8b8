// model-eval behind the real gate (cmd/gate/proxy.ts in front of the simulated engine): it finds the gate and its
// cap, and once the gate has closed, a request cut or refused by it is the attempt ending (aborted, the owner told,
// no retry), never an item's failure; while the gate is open, a failure is the item's, as without a gate.
import { afterEach, describe, expect, it } from 'vitest'
import { Gate } from '../../cmd/gate/proxy.js'
import { gateProfile } from '../../cmd/model-eval/gate-profile.js'
import { OpenAiClient, WorkloadError } from '../../cmd/model-eval/openai.js'
import { EngineSim } from '../../dev/bench/engine-sim/engine.js'
import { createLogger } from '../../pkg/observability/log.js'

const log = createLogger('model-eval-gate-test')
log.level = 'silent'
const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function gated(upstream?: string) {
  const sim = new EngineSim({ stepBaseMs: 20, stepPerSeqMs: 0, prefillMsPerToken: 0 })
  const simUrl = await sim.listen()
  cleanups.push(() => sim.stop())
  const gate = new Gate({ upstream: upstream ?? simUrl, job: 'eval-1-abc', engine: 'vllm', maxInFlight: 3, log })
  const url = await gate.listen()
  cleanups.push(() => gate.stop())
  return { gate, url, simUrl }
}

const clientOf = (url: string, onGateClosed?: () => void) =>
  new OpenAiClient({
    baseUrl: `${url}/v1`,
    workloadClass: 'background',
    requestTimeoutMs: 20_000,
    maxRetries: 5,
    maxRetryWaitMs: 5_000,
    signal: new AbortController().signal,
    gate: onGateClosed && { onGateClosed },
  })

describe('model-eval behind the gate', () => {
  it('finds the gate and its cap; an engine alone has none', async () => {
    const { url, simUrl } = await gated()
    expect(await gateProfile(`${url}/v1`)).toEqual({ engine: 'vllm', priority: 10, maxInFlight: 3, maxQueued: 64 })
    expect(await gateProfile(`${simUrl}/v1`)).toBeUndefined()
    expect(await gateProfile('http://127.0.0.1:1/v1')).toBeUndefined()
  })

  it('a stream the closing gate cuts is the attempt ending, and a closed gate is not waited for', async () => {
    const { gate, url } = await gated()
    gate.open()
    let told = 0
    const client = clientOf(url, () => told++)
    const streaming = client.stream('chat', 'm', 'hello', 500).catch((e) => e)
    await expect.poll(() => gate.inFlight).toBe(1)
    gate.close('preempted')
    const cut = await streaming
    expect(cut).toBeInstanceOf(WorkloadError)
    expect(cut.kind).toBe('aborted')
    expect(told).toBe(1)
    // Refused by the closed gate: no wait for its Retry-After (30 s), the same end.
    const started = Date.now()
    await expect(client.complete('chat', 'm', 'again', 4)).rejects.toMatchObject({ kind: 'aborted' })
    expect(Date.now() - started).toBeLessThan(2_000)
    expect(told).toBe(2)
  })

  it("while the gate is open, a failure is the item's, as without a gate", async () => {
    // The gate in front of an engine that is not there: its 502 is the item's failure.
    const { gate, url } = await gated('http://127.0.0.1:1')
    gate.open()
    let told = 0
    const err = await clientOf(url, () => told++)
      .complete('chat', 'm', 'hi', 4)
      .catch((e) => e)
    expect(err).toBeInstanceOf(WorkloadError)
    expect(err.kind).toBe('refused')
    expect(err.message).toMatch(/HTTP 502/)
    expect(told).toBe(0)
  })
})
