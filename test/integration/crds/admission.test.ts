// CRD admission against the real kube-apiserver: the CEL rules and defaults in crds/modelbackfill.yaml (generated
// from pkg/core/api.ts) do what contract.md promises when a user runs `kubectl apply`, the printer columns show, the
// status subresource separates status from spec, and the test-only FlexInfer CRDs take objects shaped like real ones.
import { ApiextensionsV1Api, CustomObjectsApi } from '@kubernetes/client-node'
import { describe, expect, it } from 'vitest'
import { GROUP, VERSION } from '../../../pkg/core/api.js'
import { isApiError, useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()

// biome-ignore lint/suspicious/noExplicitAny: untyped custom objects
type Obj = any

const PLURAL = 'modelbackfills'
const api = () => env.kc.makeApiClient(CustomObjectsApi)

function backfill(name: string, spec: Record<string, unknown> | undefined): Obj {
  return { apiVersion: `${GROUP}/${VERSION}`, kind: 'ModelBackfill', metadata: { name }, ...(spec && { spec }) }
}

/** `kubectl apply` exactly as a user would, with the object on stdin. */
async function apply(obj: Obj) {
  return env.kubectl(['apply', '-n', env.namespace, '-f', '-'], { input: JSON.stringify(obj) })
}

async function get(plural: string, name: string): Promise<Obj> {
  return api().getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: env.namespace, plural, name })
}

async function exists(plural: string, name: string): Promise<boolean> {
  try {
    await get(plural, name)
    return true
  } catch (err) {
    if (isApiError(err, 404)) return false
    throw err
  }
}

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
const base = { modelRef: 'gemma4-26b', templateRef: 'model-eval-gauntlet' }
const envOf = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`VAR_${i}`, `v${i}`]))

describe('ModelBackfill admission', () => {
  it('accepts a minimal ModelBackfill and applies the defaults idleFor 10m, maxRunDuration 30m', async () => {
    const res = await apply(backfill('minimal', base))
    expect(res.stderr).toBe('')
    expect(res.code).toBe(0)
    expect(res.stdout).toContain('modelbackfill.ai.flexinfer/minimal created')
    const obj = await get(PLURAL, 'minimal')
    expect(obj.spec).toEqual({ ...base, idleFor: '10m', maxRunDuration: '30m' })
  })

  it("accepts the user guide's example as written", async () => {
    const spec = {
      modelRef: 'gemma4-26b-a4b-gptq-5930k',
      templateRef: 'model-eval-gauntlet',
      idleFor: '30m',
      maxRunDuration: '15m',
      repeatAfter: '24h',
      env: { MODELS: 'gemma4-26b-a4b-gptq-5930k=vllm', GAUNTLET_API: 'chat' },
    }
    const res = await apply(backfill('model-eval-gemma4-5930k', spec))
    expect(res.stderr).toBe('')
    expect(res.code).toBe(0)
    expect((await get(PLURAL, 'model-eval-gemma4-5930k')).spec).toEqual(spec)
  })

  // Boundaries the rules must NOT refuse.
  const accepted: [string, Record<string, unknown>][] = [
    ['repeatAfter 0 (one-shot)', { repeatAfter: '0' }],
    ['repeatAfter 0s', { repeatAfter: '0s' }],
    ['repeatAfter exactly 1m', { repeatAfter: '1m' }],
    ['repeatAfter 60s', { repeatAfter: '60s' }],
    ['compound and fractional durations', { idleFor: '1h30m', maxRunDuration: '1.5h', repeatAfter: '2h45m30s' }],
    ['zero idleFor and maxRunDuration', { idleFor: '0', maxRunDuration: '0s' }],
    ['exactly 32 env entries', { env: envOf(32) }],
    ['env names with underscores and lower case', { env: { _PRIVATE: 'a', lower_case: 'b', X1: 'c' } }],
    ['an empty env map', { env: {} }],
    ['suspend true', { suspend: true }],
  ]
  it.each(accepted.map(([label, extra], i) => [label, `ok-${i}`, extra] as const))(
    'accepts %s',
    async (_, name, extra) => {
      const res = await apply(backfill(name, { ...base, ...extra }))
      expect(res.stderr).toBe('')
      expect(res.code).toBe(0)
      expect((await get(PLURAL, name)).spec).toMatchObject(extra)
    },
  )

  // One case per rule (and a few per duration field): field path and the exact user-facing message.
  const refused: { label: string; spec: Record<string, unknown> | undefined; field: string; message: string }[] = [
    {
      label: 'more than 32 env entries',
      spec: { ...base, env: envOf(33) },
      field: 'spec.env',
      message: 'env may have at most 32 entries',
    },
    {
      label: 'an env name starting with a digit',
      spec: { ...base, env: { '1BAD': 'x' } },
      field: 'spec.env',
      message: 'env names must match ^[A-Za-z_][A-Za-z0-9_]*$ (letters, digits, underscore; not starting with a digit)',
    },
    {
      label: 'an env name with a dash',
      spec: { ...base, env: { OK: 'x', 'MY-VAR': 'y' } },
      field: 'spec.env',
      message: 'env names must match ^[A-Za-z_][A-Za-z0-9_]*$ (letters, digits, underscore; not starting with a digit)',
    },
    {
      label: 'the reserved FLEXINFER_WORKLOAD_CLASS',
      spec: { ...base, env: { FLEXINFER_WORKLOAD_CLASS: 'foreground' } },
      field: 'spec.env',
      message: 'FLEXINFER_WORKLOAD_CLASS is reserved: the controller always sets it to background',
    },
    {
      label: 'the reserved FLEXINFER_RUN_ID',
      spec: { ...base, env: { FLEXINFER_RUN_ID: 'mine' } },
      field: 'spec.env',
      message: "FLEXINFER_RUN_ID is reserved: the controller always sets it to the run's identity",
    },
    {
      label: 'the reserved FLEXINFER_ATTEMPT',
      spec: { ...base, env: { FLEXINFER_ATTEMPT: '1' } },
      field: 'spec.env',
      message: "FLEXINFER_ATTEMPT is reserved: the controller always sets it to the attempt's number within its run",
    },
    {
      label: 'a nonzero repeatAfter under 1m',
      spec: { ...base, repeatAfter: '30s' },
      field: 'spec.repeatAfter',
      message: 'repeatAfter must be 0 (one-shot) or at least 1m',
    },
    {
      label: 'repeatAfter just under 1m',
      spec: { ...base, repeatAfter: '59.999s' },
      field: 'spec.repeatAfter',
      message: 'repeatAfter must be 0 (one-shot) or at least 1m',
    },
    {
      label: 'a negative idleFor',
      spec: { ...base, idleFor: '-5m' },
      field: 'spec.idleFor',
      message: 'idleFor must not be negative',
    },
    {
      label: 'a negative maxRunDuration',
      spec: { ...base, maxRunDuration: '-1h' },
      field: 'spec.maxRunDuration',
      message: 'maxRunDuration must not be negative',
    },
    {
      label: 'a negative repeatAfter',
      spec: { ...base, repeatAfter: '-2h' },
      field: 'spec.repeatAfter',
      message: 'repeatAfter must not be negative',
    },
    {
      label: 'an unparsable idleFor',
      spec: { ...base, idleFor: 'ten minutes' },
      field: 'spec.idleFor',
      message: 'idleFor must be a duration such as 90s, 15m or 1h30m',
    },
    {
      label: 'a maxRunDuration without a unit',
      spec: { ...base, maxRunDuration: '5' },
      field: 'spec.maxRunDuration',
      message: 'maxRunDuration must be a duration such as 90s, 15m or 1h30m',
    },
    {
      label: 'a repeatAfter in days (not Go syntax)',
      spec: { ...base, repeatAfter: '1d' },
      field: 'spec.repeatAfter',
      message: 'repeatAfter must be a duration such as 90s, 15m or 1h30m',
    },
    {
      label: 'an idleFor too large for a Go duration',
      spec: { ...base, idleFor: '9999999999h' },
      field: 'spec.idleFor',
      message: 'idleFor must be a duration such as 90s, 15m or 1h30m',
    },
    {
      label: 'an empty modelRef',
      spec: { ...base, modelRef: '' },
      field: 'spec.modelRef',
      message: 'modelRef must name a Model in the same namespace',
    },
    {
      label: 'an empty templateRef',
      spec: { ...base, templateRef: '' },
      field: 'spec.templateRef',
      message: 'templateRef must name a CronJob in the same namespace',
    },
    {
      label: 'a missing templateRef',
      spec: { modelRef: base.modelRef },
      field: 'spec.templateRef',
      message: 'Required value',
    },
    { label: 'a missing spec', spec: undefined, field: 'spec', message: 'Required value' },
  ]
  it.each(refused.map((c, i) => [c.label, { ...c, name: `bad-${i}` }] as const))(
    'refuses %s',
    async (_, { name, spec, field, message }) => {
      const res = await apply(backfill(name, spec))
      expect(res.code, res.stdout).not.toBe(0)
      expect(res.stderr).toContain(`The ModelBackfill "${name}" is invalid`)
      expect(res.stderr).toMatch(new RegExp(`${escapeRe(field)}: [^\\n]*${escapeRe(message)}`))
      expect(await exists(PLURAL, name)).toBe(false)
    },
  )
})

describe('ModelBackfill printer columns and status subresource', () => {
  const split = (line: string | undefined) => (line ?? '').trim().split(/\s{2,}/)

  it('kubectl get mbf shows Model, Phase, Reason, Node, Job, Attempts, Age; -o wide adds Next Run', async () => {
    expect((await apply(backfill('shown', base))).code).toBe(0)
    const status = {
      phase: 'Succeeded',
      reason: 'RepeatScheduled',
      nodeName: 'node-a',
      jobName: 'shown-3-0123abcd',
      attempts: 3,
      nextRunTime: '2030-01-02T03:04:05Z',
    }
    const patched = await env.kubectl(
      [
        'patch',
        'mbf',
        'shown',
        '-n',
        env.namespace,
        '--subresource=status',
        '--type=merge',
        '-p',
        JSON.stringify({ status }),
      ],
      {},
    )
    expect(patched.stderr).toBe('')
    expect(patched.code).toBe(0)

    const plain = await env.kubectl(['get', 'mbf', 'shown', '-n', env.namespace], {})
    expect(plain.code, plain.stderr).toBe(0)
    const [header, row] = plain.stdout.trim().split('\n')
    expect(split(header)).toEqual(['NAME', 'MODEL', 'PHASE', 'REASON', 'NODE', 'JOB', 'ATTEMPTS', 'AGE'])
    expect(split(row).slice(0, 7)).toEqual([
      'shown',
      base.modelRef,
      'Succeeded',
      'RepeatScheduled',
      'node-a',
      'shown-3-0123abcd',
      '3',
    ])

    const wide = await env.kubectl(['get', 'modelbackfills', 'shown', '-n', env.namespace, '-o', 'wide'], {})
    expect(wide.code, wide.stderr).toBe(0)
    const [wideHeader, wideRow] = wide.stdout.trim().split('\n')
    expect(split(wideHeader)).toEqual([
      'NAME',
      'MODEL',
      'PHASE',
      'REASON',
      'NODE',
      'JOB',
      'ATTEMPTS',
      'NEXT RUN',
      'AGE',
    ])
    expect(split(wideRow).slice(0, 8)).toEqual([
      'shown',
      base.modelRef,
      'Succeeded',
      'RepeatScheduled',
      'node-a',
      'shown-3-0123abcd',
      '3',
      '2030-01-02T03:04:05Z',
    ])
  })

  it('the apiserver accepts both short names of the reference CRD (mbf, modelbackfill)', async () => {
    const names = await env.kubectl(
      ['get', 'crd', `${PLURAL}.${GROUP}`, '-o', 'jsonpath={.status.acceptedNames.shortNames}'],
      {},
    )
    expect(names.code, names.stderr).toBe(0)
    expect(JSON.parse(names.stdout)).toEqual(['mbf', 'modelbackfill'])
  })

  it('status written through /status does not change spec or generation; status on the main resource is ignored', async () => {
    expect((await apply(backfill('statusful', base))).code).toBe(0)
    const before = await get(PLURAL, 'statusful')

    // PUT /status carrying a different spec: the apiserver keeps the old spec and takes only the status.
    const body = {
      ...before,
      spec: { ...before.spec, modelRef: 'someone-else' },
      status: { phase: 'WaitingForIdle', reason: 'IdleWindow', idleSince: '2030-01-01T00:00:00Z', attempts: 0 },
    }
    const written: Obj = await api().replaceNamespacedCustomObjectStatus({
      group: GROUP,
      version: VERSION,
      namespace: env.namespace,
      plural: PLURAL,
      name: 'statusful',
      body,
    })
    expect(written.status).toMatchObject({ phase: 'WaitingForIdle', reason: 'IdleWindow', attempts: 0 })
    const after = await get(PLURAL, 'statusful')
    expect(after.spec).toEqual(before.spec)
    expect(after.metadata.generation).toBe(before.metadata.generation)
    expect(after.status.idleSince).toBe('2030-01-01T00:00:00Z')

    // And the reverse: a status in a write to the main resource is dropped, a spec change bumps generation.
    const main: Obj = await api().replaceNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: env.namespace,
      plural: PLURAL,
      name: 'statusful',
      body: { ...after, spec: { ...after.spec, suspend: true }, status: { phase: 'Blocked' } },
    })
    expect(main.spec.suspend).toBe(true)
    expect(main.status.phase).toBe('WaitingForIdle')
    expect(main.metadata.generation).toBe(before.metadata.generation + 1)
  })

  it('the status schema refuses a phase outside the contract vocabulary', async () => {
    expect((await apply(backfill('phased', base))).code).toBe(0)
    const res = await env.kubectl(
      [
        'patch',
        'mbf',
        'phased',
        '-n',
        env.namespace,
        '--subresource=status',
        '--type=merge',
        '-p',
        '{"status":{"phase":"Sleeping"}}',
      ],
      {},
    )
    expect(res.code).not.toBe(0)
    expect(res.stderr).toContain('status.phase: Unsupported value: "Sleeping"')
  })
})

describe('test/local-only FlexInfer CRDs', () => {
  it('are installed, marked test-only', async () => {
    const ext = env.kc.makeApiClient(ApiextensionsV1Api)
    for (const plural of ['models', 'gamingsessions', 'gpuleases']) {
      const crd = await ext.readCustomResourceDefinition({ name: `${plural}.${GROUP}` })
      expect(crd.metadata?.annotations?.['ai.flexinfer/test-only'], plural).toBe('true')
      expect(crd.spec.scope).toBe('Namespaced')
    }
  })

  it('Model: accepts a realistic object, keeps unknown fields, takes status through /status', async () => {
    const model = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'Model',
      metadata: { name: 'gemma4-26b' },
      spec: {
        backend: 'vllm',
        source: 'hf://google/gemma',
        nodeSelector: { 'kubernetes.io/hostname': 'node-a' },
        gpu: { shared: 'gpu-group-1', count: 1 },
      },
    }
    const res = await apply(model)
    expect(res.stderr).toBe('')
    expect(res.code).toBe(0)
    const created = await get('models', 'gemma4-26b')
    expect(created.spec).toEqual(model.spec)

    const status = {
      phase: 'Ready',
      gpu: { node: 'node-a', uuid: 'GPU-123' },
      lastActiveTime: '2030-01-01T00:00:00Z',
      endpoint: 'http://gemma:8000',
    }
    await api().replaceNamespacedCustomObjectStatus({
      group: GROUP,
      version: VERSION,
      namespace: env.namespace,
      plural: 'models',
      name: 'gemma4-26b',
      body: { ...created, status },
    })
    const after = await get('models', 'gemma4-26b')
    expect(after.status).toEqual(status)
    expect(after.spec).toEqual(model.spec)
  })

  it('GamingSession: accepts the example, defaults mode to gaming', async () => {
    const spec = { nodeName: 'node-a', expiresAt: '2030-01-01T00:00:00Z', requestedBy: 'steam' }
    const res = await apply({
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'GamingSession',
      metadata: { name: 'evening' },
      spec,
    })
    expect(res.stderr).toBe('')
    expect(res.code).toBe(0)
    expect((await get('gamingsessions', 'evening')).spec).toEqual({ ...spec, mode: 'gaming' })
  })

  it('GPULease: accepts the example as written', async () => {
    const spec = { group: 'gpu-group-1', node: 'node-a', expiresAt: '2030-01-01T00:00:00Z', holder: 'trainer' }
    const res = await apply({
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'GPULease',
      metadata: { name: 'training' },
      spec,
    })
    expect(res.stderr).toBe('')
    expect(res.code).toBe(0)
    expect((await get('gpuleases', 'training')).spec).toEqual(spec)
  })
})
