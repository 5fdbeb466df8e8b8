// The attempt's Job copied from the CronJob template, exactly as contract.md pins it, and the GPU guard.
import type { V1Container, V1CronJob } from '@kubernetes/client-node'
import { describe, expect, it } from 'vitest'
import { buildJob, gpuViolations } from '../../pkg/core/job.js'
import { attemptLabelValue, backfillLabelValue, jobName } from '../../pkg/core/names.js'
import { jobView } from '../../pkg/core/world.js'
import { aBackfill, BACKFILL, BACKFILL_UID, MINUTE, MODEL, NODE, NS } from './support/world.js'

const NAME = jobName(BACKFILL, 1)
const configMapRef = { configMapKeyRef: { name: 'gauntlet', key: 'models' } }

const cronJob = (containers: V1Container[], initContainers?: V1Container[]): V1CronJob => ({
  apiVersion: 'batch/v1',
  kind: 'CronJob',
  metadata: { name: 'model-eval-gauntlet', namespace: NS, labels: { cron: 'label' } },
  spec: {
    schedule: '0 3 * * *',
    jobTemplate: {
      metadata: {
        labels: { app: 'gauntlet', 'ai.flexinfer/model-backfill': 'from-template' },
        annotations: { team: 'evals' },
      },
      spec: {
        backoffLimit: 0,
        ttlSecondsAfterFinished: 3600,
        activeDeadlineSeconds: 99_999,
        template: {
          // Beyond the contract: the pods carry the backfill's label and name (lifecycle reads their termination
          // messages, pkg/core/pod-report.ts).
          metadata: {
            labels: { app: 'gauntlet-pod', 'ai.flexinfer/model-backfill': backfillLabelValue(BACKFILL) },
            annotations: { 'prometheus.io/scrape': 'false', 'ai.flexinfer/backfill': BACKFILL },
          },
          spec: { restartPolicy: 'Never', serviceAccountName: 'gauntlet', containers, initContainers },
        },
      },
    },
  },
})

const TEMPLATE = cronJob(
  [
    {
      name: 'main',
      image: 'ghcr.io/example/gauntlet:1',
      command: ['gauntlet', 'run'],
      env: [
        { name: 'MODELS', valueFrom: configMapRef },
        { name: 'GAUNTLET_API', value: 'completions' },
        { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'foreground' },
        { name: 'KEEP', value: 'kept' },
      ],
      resources: { requests: { cpu: '500m', memory: '1Gi' } },
    },
    { name: 'sidecar', image: 'busybox' },
  ],
  [
    {
      name: 'init',
      image: 'busybox',
      env: [
        { name: 'FLEXINFER_WORKLOAD_CLASS', valueFrom: configMapRef },
        { name: 'MODELS', value: 'init-models' },
      ],
    },
    { name: 'init-2', image: 'busybox' },
  ],
)

const BACKFILL_WITH_ENV = aBackfill({
  spec: { env: { ZETA: 'z', MODELS: 'gemma4-26b=vllm', ALPHA: 'a', GAUNTLET_API: 'chat' } },
})

const build = (maxRunDurationMs = 15 * MINUTE, template = TEMPLATE, backfill = BACKFILL_WITH_ENV) =>
  buildJob({ backfill, template, name: NAME, node: NODE, maxRunDurationMs })

describe('buildJob', () => {
  it("labels each admission's Job apart: same name, another admission time, another attempt label", () => {
    const at = (admittedAt: string) =>
      buildJob({
        backfill: BACKFILL_WITH_ENV,
        template: TEMPLATE,
        name: NAME,
        node: NODE,
        maxRunDurationMs: MINUTE,
        admittedAt,
      }).metadata?.labels?.['ai.flexinfer/attempt']
    expect(at('2026-01-01T00:00:00.000Z')).toMatch(/^[0-9a-f]{16}$/)
    expect(at('2026-01-01T00:00:00.000Z')).toBe(at('2026-01-01T00:00:00.000Z'))
    expect(at('2026-01-01T00:00:00.000Z')).not.toBe(at('2026-01-01T00:05:00.000Z'))
  })

  it('has the exact shape contract.md pins', () => {
    expect(build()).toEqual({
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: {
        name: NAME,
        namespace: NS,
        labels: {
          app: 'gauntlet',
          'ai.flexinfer/model-backfill': backfillLabelValue(BACKFILL),
          'ai.flexinfer/attempt': attemptLabelValue(BACKFILL_UID, NAME, ''),
        },
        annotations: {
          team: 'evals',
          'ai.flexinfer/backfill-model': MODEL,
          'ai.flexinfer/backfill-node': NODE,
        },
        ownerReferences: [
          {
            apiVersion: 'ai.flexinfer/v1alpha2',
            kind: 'ModelBackfill',
            name: BACKFILL,
            uid: BACKFILL_UID,
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
      },
      spec: {
        backoffLimit: 0,
        ttlSecondsAfterFinished: 3600,
        activeDeadlineSeconds: 900,
        template: {
          // Beyond the contract: the pods carry the backfill's label and name (lifecycle reads their termination
          // messages, pkg/core/pod-report.ts).
          metadata: {
            labels: { app: 'gauntlet-pod', 'ai.flexinfer/model-backfill': backfillLabelValue(BACKFILL) },
            annotations: { 'prometheus.io/scrape': 'false', 'ai.flexinfer/backfill': BACKFILL },
          },
          spec: {
            restartPolicy: 'Never',
            serviceAccountName: 'gauntlet',
            initContainers: [
              {
                name: 'init',
                image: 'busybox',
                env: [
                  { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' },
                  { name: 'MODELS', value: 'init-models' },
                ],
              },
              { name: 'init-2', image: 'busybox', env: [{ name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' }] },
            ],
            containers: [
              {
                name: 'main',
                image: 'ghcr.io/example/gauntlet:1',
                command: ['gauntlet', 'run'],
                env: [
                  { name: 'MODELS', value: 'gemma4-26b=vllm' },
                  { name: 'GAUNTLET_API', value: 'chat' },
                  { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' },
                  { name: 'KEEP', value: 'kept' },
                  { name: 'ALPHA', value: 'a' },
                  { name: 'ZETA', value: 'z' },
                ],
                resources: { requests: { cpu: '500m', memory: '1Gi' } },
              },
              {
                name: 'sidecar',
                image: 'busybox',
                env: [
                  { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' },
                  { name: 'ALPHA', value: 'a' },
                  { name: 'GAUNTLET_API', value: 'chat' },
                  { name: 'MODELS', value: 'gemma4-26b=vllm' },
                  { name: 'ZETA', value: 'z' },
                ],
              },
            ],
          },
        },
      },
    })
  })

  it('is what the adapter will recognise as this backfill’s Job', () => {
    const view = jobView(build())
    expect(view).toMatchObject({
      namespace: NS,
      name: NAME,
      backfillLabel: backfillLabelValue(BACKFILL),
      ownerUid: BACKFILL_UID,
      model: MODEL,
      node: NODE,
      deleting: false,
      started: false,
    })
    expect(view.outcome).toBeUndefined()
  })

  it.each([
    [500, 1],
    [999, 1],
    [0, 1],
    [1500, 1],
    [90_000, 90],
    [15 * MINUTE, 900],
    [30 * MINUTE, 1800],
  ])('maxRunDuration %d ms → activeDeadlineSeconds %d (whole seconds, at least 1)', (ms, seconds) => {
    expect(build(ms).spec?.activeDeadlineSeconds).toBe(seconds)
  })

  it('replaces a value or a valueFrom of FLEXINFER_WORKLOAD_CLASS in place, in every container', () => {
    const job = build(MINUTE, TEMPLATE, aBackfill())
    const pod = job.spec?.template.spec
    for (const c of [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])]) {
      const entries = (c.env ?? []).filter((e) => e.name === 'FLEXINFER_WORKLOAD_CLASS')
      expect(entries, c.name).toEqual([{ name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' }])
    }
    // In place: the position in the template is kept.
    expect(pod?.containers[0]?.env?.map((e) => e.name)).toEqual([
      'MODELS',
      'GAUNTLET_API',
      'FLEXINFER_WORKLOAD_CLASS',
      'KEEP',
    ])
    expect(pod?.initContainers?.[0]?.env?.[0]).toEqual({ name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' })
  })

  // Kubernetes uses the last entry of a duplicated name: forcing only the first would let a later `foreground` win.
  it('forces every duplicated FLEXINFER_WORKLOAD_CLASS entry to background, init containers too', () => {
    const dup = [
      { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' },
      { name: 'X', value: 'x' },
      { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'foreground' },
      { name: 'FLEXINFER_WORKLOAD_CLASS', valueFrom: configMapRef },
    ]
    const job = build(MINUTE, cronJob([{ name: 'main', image: 'x', env: dup }], [{ name: 'i', image: 'x', env: dup }]))
    const pod = job.spec?.template.spec
    for (const c of [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])]) {
      const entries = (c.env ?? []).filter((e) => e.name === 'FLEXINFER_WORKLOAD_CLASS')
      expect(entries, c.name).toEqual(Array(3).fill({ name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' }))
    }
  })

  it('a spec.env override applies to every entry of a duplicated name, not only the first', () => {
    const env = [
      { name: 'MODELS', value: 'a' },
      { name: 'MODELS', valueFrom: configMapRef },
      { name: 'KEEP', value: 'kept' },
    ]
    const job = build(
      MINUTE,
      cronJob([{ name: 'main', image: 'x', env }]),
      aBackfill({ spec: { env: { MODELS: 'b' } } }),
    )
    expect(job.spec?.template.spec?.containers[0]?.env).toEqual([
      { name: 'MODELS', value: 'b' },
      { name: 'MODELS', value: 'b' },
      { name: 'KEEP', value: 'kept' },
      { name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' },
    ])
  })

  it('applies spec.env to regular containers only (the guide: "every regular Job container")', () => {
    const pod = build().spec?.template.spec
    expect(pod?.initContainers?.[0]?.env).toContainEqual({ name: 'MODELS', value: 'init-models' })
    expect(pod?.initContainers?.flatMap((c) => c.env ?? []).some((e) => e.name === 'ZETA')).toBe(false)
  })

  it('an override replaces a valueFrom entry with a literal value (valueFrom dropped)', () => {
    const models = build().spec?.template.spec?.containers[0]?.env?.find((e) => e.name === 'MODELS')
    expect(models).toEqual({ name: 'MODELS', value: 'gemma4-26b=vllm' })
    expect(models).not.toHaveProperty('valueFrom')
  })

  it('does not mutate the template', () => {
    const before = structuredClone(TEMPLATE)
    build()
    build(MINUTE, TEMPLATE, aBackfill())
    expect(TEMPLATE).toEqual(before)
  })

  it('copes with a minimal template (no metadata, no env, no init containers)', () => {
    const job = build(MINUTE, cronJob([{ name: 'only', image: 'busybox' }]), aBackfill())
    expect(job.metadata?.labels).toEqual({
      app: 'gauntlet',
      'ai.flexinfer/model-backfill': backfillLabelValue(BACKFILL),
      'ai.flexinfer/attempt': attemptLabelValue(BACKFILL_UID, NAME, ''),
    })
    expect(job.spec?.template.spec?.containers).toEqual([
      { name: 'only', image: 'busybox', env: [{ name: 'FLEXINFER_WORKLOAD_CLASS', value: 'background' }] },
    ])
    expect(job.spec?.template.spec?.initContainers).toBeUndefined()
    const bare: V1CronJob = { spec: { schedule: '@daily', jobTemplate: { spec: { template: {} } } } }
    expect(build(MINUTE, bare, aBackfill()).spec?.template.spec?.containers).toEqual([])
  })
})

describe('gpuViolations', () => {
  const withResources = (
    resources: V1Container['resources'],
    where: 'containers' | 'initContainers' = 'containers',
  ): V1CronJob =>
    where === 'containers'
      ? cronJob([{ name: 'main', image: 'x', resources }])
      : cronJob([{ name: 'main', image: 'x' }], [{ name: 'init', image: 'x', resources }])

  it.each([
    ['nvidia.com/gpu', 'limits'],
    ['nvidia.com/gpu', 'requests'],
    ['amd.com/gpu', 'limits'],
    ['amd.com/gpu', 'requests'],
    ['example.com/GPU-shared', 'limits'],
    ['gpu.intel.com/i915', 'requests'],
    ['nvidia.com/mig-1g.5gb', 'limits'],
    ['nvidia.com/mig-3g.20gb', 'requests'],
  ] as const)('%s in %s is a violation', (resource, kind) => {
    expect(gpuViolations(withResources({ [kind]: { [resource]: '1' } }))).toEqual([
      { container: 'main', resource: `${kind}.${resource}`, quantity: '1' },
    ])
  })

  it.each([
    ['nvidia.com/MIG-2g.10gb', 'limits'],
    ['NVIDIA.COM/mig-1g.5gb', 'requests'],
    ['example.com/Gpu', 'limits'],
  ] as const)('resource names match case-insensitively: %s in %s', (resource, kind) => {
    expect(gpuViolations(withResources({ [kind]: { [resource]: '1' } }))).toEqual([
      { container: 'main', resource: `${kind}.${resource}`, quantity: '1' },
    ])
  })

  const withPod = (pod: Partial<NonNullable<V1Container['resources']>> | undefined, claims?: unknown[]): V1CronJob => {
    const t = cronJob([{ name: 'main', image: 'x' }])
    const podSpec = t.spec?.jobTemplate.spec?.template.spec as unknown as Record<string, unknown>
    if (pod) podSpec.resources = pod
    if (claims) podSpec.resourceClaims = claims
    return t
  }

  // Pod-level resources (Kubernetes 1.32+) and DRA claims reserve accelerators as surely as container limits do.
  it('pod-level resources are guarded (container is empty: the pod itself)', () => {
    expect(gpuViolations(withPod({ limits: { 'nvidia.com/gpu': '1' }, requests: { cpu: '2' } }))).toEqual([
      { container: '', resource: 'limits.nvidia.com/gpu', quantity: '1' },
    ])
    expect(gpuViolations(withPod({ requests: { 'amd.com/gpu': '0' } }))).toEqual([])
  })

  it('every pod resourceClaim (DRA) is a violation: a claim allocates a device the scheduler reserves', () => {
    expect(
      gpuViolations(
        withPod(undefined, [
          { name: 'gpu', resourceClaimTemplateName: 'single-gpu' },
          { name: 'shared', resourceClaimName: 'a-claim' },
        ]),
      ),
    ).toEqual([
      { container: '', resource: 'resourceClaims.gpu', quantity: 'resourceClaimTemplate single-gpu' },
      { container: '', resource: 'resourceClaims.shared', quantity: 'resourceClaim a-claim' },
    ])
    expect(gpuViolations(withPod(undefined, []))).toEqual([])
  })

  it('init containers are guarded too', () => {
    expect(gpuViolations(withResources({ limits: { 'nvidia.com/gpu': '2' } }, 'initContainers'))).toEqual([
      { container: 'init', resource: 'limits.nvidia.com/gpu', quantity: '2' },
    ])
  })

  it.each(['0', '0.0', '0m', '0Gi'])('a zero quantity (%s) is allowed', (quantity) => {
    expect(gpuViolations(withResources({ limits: { 'nvidia.com/gpu': quantity } }))).toEqual([])
  })

  it.each(['1', '500m', '0.5', '2Gi', '10'])('a non-zero quantity (%s) is a violation', (quantity) => {
    expect(gpuViolations(withResources({ requests: { 'amd.com/gpu': quantity } }))).toHaveLength(1)
  })

  it('cpu, memory and other resources are not', () => {
    expect(
      gpuViolations(
        withResources({
          requests: { cpu: '4', memory: '8Gi', 'ephemeral-storage': '1Gi' },
          limits: { cpu: '8', memory: '16Gi', 'example.com/fpga': '1' },
        }),
      ),
    ).toEqual([])
    expect(gpuViolations(cronJob([{ name: 'main', image: 'x' }]))).toEqual([])
    expect(gpuViolations({})).toEqual([])
  })

  it('lists every violation, init containers first', () => {
    const template = cronJob(
      [
        {
          name: 'main',
          image: 'x',
          resources: { requests: { 'nvidia.com/gpu': '1' }, limits: { 'nvidia.com/gpu': '1' } },
        },
      ],
      [{ name: 'init', image: 'x', resources: { limits: { 'nvidia.com/mig-1g.5gb': '1' } } }],
    )
    expect(gpuViolations(template)).toEqual([
      { container: 'init', resource: 'limits.nvidia.com/mig-1g.5gb', quantity: '1' },
      { container: 'main', resource: 'requests.nvidia.com/gpu', quantity: '1' },
      { container: 'main', resource: 'limits.nvidia.com/gpu', quantity: '1' },
    ])
  })
})
