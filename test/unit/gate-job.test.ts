// The background gate in the attempt's Job (pkg/core/gate.ts, pkg/core/job.ts): opt-in by annotation, the sidecar as a
// native sidecar, the endpoint variable taken over, the workload class kept, the GPU guard still clean, and every
// bad setting refused with its reason instead of a Job.
import type { V1Container, V1CronJob } from '@kubernetes/client-node'
import { describe, expect, it } from 'vitest'
import { decide } from '../../pkg/core/decide.js'
import {
  ANNOTATION_GATE_ENDPOINT_ENV,
  ANNOTATION_GATE_ENGINE,
  ANNOTATION_GATE_MAX_IN_FLIGHT,
  GATE_CONTAINER,
  GATE_HEALTH_PORT,
  GATE_PORT,
  GATE_SECRET,
} from '../../pkg/core/gate.js'
import { buildJob, gateProblem, gpuViolations } from '../../pkg/core/job.js'
import { jobName } from '../../pkg/core/names.js'
import { aBackfill, aWorld, BACKFILL, MODEL, NODE, NS, T0 } from './support/world.js'

const NAME = jobName(BACKFILL, 1)
const DEPLOYMENT = { image: 'ghcr.io/example/model-backfill:1', natsUrl: 'nats://gate@nats.flexinfer:4222' }

const template = (containers: V1Container[], initContainers?: V1Container[]): V1CronJob => ({
  apiVersion: 'batch/v1',
  kind: 'CronJob',
  metadata: { name: 'eval', namespace: NS },
  spec: {
    schedule: '0 3 * * *',
    jobTemplate: { spec: { template: { spec: { restartPolicy: 'Never', containers, initContainers } } } },
  },
})
const EVAL = template(
  [
    {
      name: 'eval',
      image: 'eval:1',
      env: [
        { name: 'OPENAI_BASE_URL', value: 'http://gemma.models.svc:8000/v1' },
        { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'foreground' },
      ],
    },
    { name: 'uploader', image: 'up:1' },
  ],
  [{ name: 'fetch', image: 'fetch:1' }],
)
const gated = (annotations: Record<string, string> = {}, spec = {}) => {
  const b = aBackfill({ spec })
  b.metadata.annotations = { [ANNOTATION_GATE_ENDPOINT_ENV]: 'OPENAI_BASE_URL', ...annotations }
  return b
}
const build = (b = gated(), t = EVAL) =>
  buildJob({ backfill: b, template: t, name: NAME, node: NODE, maxRunDurationMs: 60_000, gate: DEPLOYMENT })
const envOf = (c: V1Container | undefined) => Object.fromEntries((c?.env ?? []).map((e) => [e.name, e.value]))

describe('the background gate in the Job', () => {
  it('is injected only on the opt-in annotation; without it the Job is as before', () => {
    const plain = buildJob({
      backfill: aBackfill(),
      template: EVAL,
      name: NAME,
      node: NODE,
      maxRunDurationMs: 60_000,
      gate: DEPLOYMENT,
    })
    expect(plain.spec?.template.spec?.initContainers?.map((c) => c.name)).toEqual(['fetch'])
    expect(envOf(plain.spec?.template.spec?.containers[0]).OPENAI_BASE_URL).toBe('http://gemma.models.svc:8000/v1')
    expect(gateProblem(aBackfill(), EVAL, undefined)).toBeUndefined()
  })

  it('runs as a native sidecar first, takes the endpoint over, and keeps the workload class background everywhere', () => {
    const pod = build().spec?.template.spec
    const [sidecar, ...rest] = pod?.initContainers ?? []
    expect(sidecar?.name).toBe(GATE_CONTAINER)
    expect(sidecar?.restartPolicy).toBe('Always')
    expect(sidecar?.image).toBe(DEPLOYMENT.image)
    expect(rest.map((c) => c.name)).toEqual(['fetch'])
    const gateEnv = envOf(sidecar)
    expect(gateEnv).toMatchObject({
      FUNCTION: 'gate',
      NATS_URL: DEPLOYMENT.natsUrl,
      GATE_UPSTREAM: 'http://gemma.models.svc:8000',
      GATE_NAMESPACE: NS,
      GATE_MODEL: MODEL,
      GATE_JOB: NAME,
      GATE_ENGINE: 'vllm',
      GATE_MAX_IN_FLIGHT: '2',
      FLEXINFER_WORKLOAD_CLASS: 'background',
    })
    expect(envOf(pod?.containers[0]).OPENAI_BASE_URL).toBe(`http://127.0.0.1:${GATE_PORT}/v1`)
    for (const c of [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])])
      expect(envOf(c).FLEXINFER_WORKLOAD_CLASS, c.name).toBe('background')
    // The seed is mounted into the gate alone, from the namespace's gate Secret.
    expect(pod?.volumes?.find((v) => v.secret)?.secret?.secretName).toBe(GATE_SECRET)
    for (const c of pod?.containers ?? []) expect(c.volumeMounts ?? []).toEqual([])
    // The workload containers are otherwise untouched.
    expect(pod?.containers[1]).toEqual({
      ...EVAL.spec?.jobTemplate.spec?.template.spec?.containers[1],
      env: [{ name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' }],
    })
  })

  it("is probed on the pod's address (the kubelet cannot reach the pod's loopback), and its seed is readable by its user", () => {
    const pod = build().spec?.template.spec
    const sidecar = pod?.initContainers?.[0]
    for (const probe of [sidecar?.startupProbe, sidecar?.readinessProbe]) {
      expect(probe?.httpGet?.host).toBeUndefined()
      expect(probe?.httpGet?.port).toBe(GATE_HEALTH_PORT)
    }
    expect(envOf(sidecar).GATE_HEALTH_PORT).toBe(String(GATE_HEALTH_PORT))
    expect(sidecar?.env?.find((e) => e.name === 'GATE_HEALTH_HOST')?.valueFrom?.fieldRef?.fieldPath).toBe(
      'status.podIP',
    )
    expect(sidecar?.ports).toEqual([{ name: 'gate-health', containerPort: GATE_HEALTH_PORT, protocol: 'TCP' }])
    // The files of a secret volume are root's; the gate runs as the image's user, and no fsGroup is set.
    expect(pod?.volumes?.find((v) => v.secret)?.secret?.defaultMode).toBe(0o444)
    // A workload port on the gate's would collide in the pod's one network namespace.
    const clash = template([
      {
        ...(EVAL.spec?.jobTemplate.spec?.template.spec?.containers[0] as V1Container),
        ports: [{ containerPort: GATE_HEALTH_PORT }],
      },
    ])
    expect(gateProblem(gated(), clash, DEPLOYMENT)).toMatch(/declares port 18078, which the gate uses/)
  })

  it('passes the GPU guard (the sidecar asks for CPU and memory only)', () => {
    const job = build()
    const asTemplate: V1CronJob = { spec: { schedule: '', jobTemplate: { spec: job.spec } } } as V1CronJob
    expect(gpuViolations(asTemplate)).toEqual([])
  })

  it('takes spec.env into account: an override of the endpoint is the upstream', () => {
    const b = gated({}, { env: { OPENAI_BASE_URL: 'https://other:8443' } })
    const sidecar = build(b).spec?.template.spec?.initContainers?.[0]
    expect(envOf(sidecar).GATE_UPSTREAM).toBe('https://other:8443')
    expect(envOf(build(b).spec?.template.spec?.containers[0]).OPENAI_BASE_URL).toBe(`http://127.0.0.1:${GATE_PORT}`)
  })

  it('passes engine and cap through', () => {
    const b = gated({ [ANNOTATION_GATE_ENGINE]: 'sglang', [ANNOTATION_GATE_MAX_IN_FLIGHT]: '5' })
    expect(envOf(build(b).spec?.template.spec?.initContainers?.[0])).toMatchObject({
      GATE_ENGINE: 'sglang',
      GATE_MAX_IN_FLIGHT: '5',
    })
  })

  it.each([
    [{ [ANNOTATION_GATE_ENDPOINT_ENV]: '1BAD' }, EVAL, 'is not an environment variable name'],
    [{ [ANNOTATION_GATE_ENGINE]: 'tgi' }, EVAL, 'expected one of vllm, sglang, llamacpp, none'],
    [{ [ANNOTATION_GATE_MAX_IN_FLIGHT]: '0' }, EVAL, 'expected a whole number from 1 to 64'],
    [{ [ANNOTATION_GATE_MAX_IN_FLIGHT]: 'lots' }, EVAL, 'expected a whole number'],
    [{ [ANNOTATION_GATE_ENDPOINT_ENV]: 'MISSING' }, EVAL, 'no container sets MISSING'],
    [
      {},
      template([
        {
          name: 'e',
          image: 'e',
          env: [{ name: 'OPENAI_BASE_URL', valueFrom: { configMapKeyRef: { name: 'c', key: 'k' } } }],
        },
      ]),
      'by valueFrom',
    ],
    [{}, template([{ name: 'e', image: 'e', env: [{ name: 'OPENAI_BASE_URL', value: 'not a url' }] }]), 'is not a URL'],
    [
      {},
      template([{ name: 'e', image: 'e', env: [{ name: 'OPENAI_BASE_URL', value: 'grpc://x:1' }] }]),
      'http and https only',
    ],
    [
      {},
      template([{ name: 'e', image: 'e', env: [{ name: 'OPENAI_BASE_URL', value: 'http://u:p@x:1' }] }]),
      'credentials',
    ],
    [
      {},
      template([
        { name: 'a', image: 'a', env: [{ name: 'OPENAI_BASE_URL', value: 'http://x:1' }] },
        { name: 'b', image: 'b', env: [{ name: 'OPENAI_BASE_URL', value: 'http://y:1' }] },
      ]),
      'different URLs',
    ],
    [
      {},
      template([{ name: GATE_CONTAINER, image: 'e', env: [{ name: 'OPENAI_BASE_URL', value: 'http://x:1' }] }]),
      'reserved for the gate',
    ],
  ])('refuses %j with a specific reason, and builds no Job for it', (annotations, t, reason) => {
    const b = gated(annotations)
    expect(gateProblem(b, t, DEPLOYMENT)).toContain(reason)
    expect(() => build(b, t)).toThrow(reason)
  })

  it('blocks when the installation has no gate configured', () => {
    expect(gateProblem(gated(), EVAL, undefined)).toContain('not enabled in this installation')
    expect(() =>
      buildJob({ backfill: gated(), template: EVAL, name: NAME, node: NODE, maxRunDurationMs: 1000 }),
    ).toThrow()
  })

  it('a gate that cannot be built blocks the backfill with the reason (InvalidEnvironment), before any Job', () => {
    const template = {
      found: true as const,
      gpu: [],
      gate: 'no container sets MISSING, the endpoint the gate was asked to take over',
    }
    const d = decide(aWorld({ template }), { type: 'timer' }, T0)
    expect(d.state).toMatchObject({ phase: 'Blocked', reason: 'InvalidEnvironment' })
    expect(d.state?.message).toBe(`background gate: ${template.gate}`)
    expect(d.actions.some((a) => a.type === 'createJob')).toBe(false)
  })
})
