// The gate's settings (cmd/gate/config.ts) and its NATS account file (pkg/jetstream/gates-conf.ts): every bad value
// named with what was expected, nothing half-configured; one user per namespace, subscribe-only on its own subjects.
import { describe, expect, it } from 'vitest'
import { gateConfig } from '../../cmd/gate/config.js'
import { gateNkeyEnv, gatesConf } from '../../pkg/jetstream/gates-conf.js'

const GOOD = {
  NATS_URL: 'nats://gate@nats:4222',
  GATE_UPSTREAM: 'http://gemma.models:8000',
  GATE_NAMESPACE: 'team-a',
  GATE_MODEL: 'gemma.v2',
  GATE_JOB: 'eval-1-abcdef12',
}

describe('gate settings', () => {
  it('defaults: vLLM marks, a cap of 2, loopback, a 2 s bound', () => {
    expect(gateConfig(GOOD)).toMatchObject({
      upstream: 'http://gemma.models:8000',
      engine: 'vllm',
      maxInFlight: 2,
      host: '127.0.0.1',
      port: 18077,
      natsBoundMs: 2000,
      priority: undefined,
    })
  })

  it("a health listener only when GATE_HEALTH_PORT is set (admit sets it, with the pod's IP)", () => {
    expect(gateConfig(GOOD).health).toBeUndefined()
    expect(gateConfig({ ...GOOD, GATE_HEALTH_PORT: '18078' }).health).toEqual({ port: 18078, host: '0.0.0.0' })
    expect(gateConfig({ ...GOOD, GATE_HEALTH_PORT: '18078', GATE_HEALTH_HOST: '10.244.3.7' }).health).toEqual({
      port: 18078,
      host: '10.244.3.7',
    })
    expect(() => gateConfig({ ...GOOD, GATE_HEALTH_PORT: 'x' })).toThrow(/GATE_HEALTH_PORT="x"/)
  })

  it('names every bad setting at once', () => {
    expect(() =>
      gateConfig({
        ...GOOD,
        GATE_UPSTREAM: 'ftp://x',
        GATE_NAMESPACE: 'Team A',
        GATE_ENGINE: 'tgi',
        GATE_MAX_IN_FLIGHT: '65',
        GATE_NATS_BOUND_MS: '5',
        GATE_PRIORITY: 'high',
        NATS_URL: '',
      }),
    ).toThrow(
      'gate: NATS_URL is not set; GATE_UPSTREAM: http or https only; GATE_NAMESPACE="Team A" is not a Kubernetes object name; ' +
        'GATE_ENGINE="tgi": expected one of vllm, sglang, llamacpp, none; GATE_PRIORITY="high": expected a whole number -1000000..1000000; ' +
        'GATE_MAX_IN_FLIGHT="65": expected a whole number 1..64; GATE_NATS_BOUND_MS="5": expected a whole number 100..60000',
    )
  })
})

describe('deploy/nats/gates.conf', () => {
  it('one subscribe-only user per namespace, keyed by FLEXINFER_GATE_<NS>_NKEY', () => {
    const conf = gatesConf(['team-a', 'b'])
    expect(conf).toContain('nkey: $FLEXINFER_GATE_TEAM_A_NKEY')
    expect(conf).toContain('subscribe: { allow: ["flexinfer.preempt.team-a.>"] }')
    expect(conf).toContain('subscribe: { allow: ["flexinfer.preempt.b.>"] }')
    expect(conf.match(/publish: \{ deny: \[">"\] \}/g)).toHaveLength(2)
    expect(conf).toContain('imports: [ { stream: { account: FLEXINFER, subject: "flexinfer.preempt.>" } } ]')
    expect(gatesConf([])).toContain('users: []')
  })

  it('refuses what is no namespace; a namespace named twice is one user', () => {
    expect(() => gatesConf(['ok', 'Not-OK', 'a.b'])).toThrow('not namespace names: Not-OK, a.b')
    expect(gatesConf(['a-b', 'a-b']).match(new RegExp(gateNkeyEnv('a-b'), 'g'))).toHaveLength(1)
  })
})
