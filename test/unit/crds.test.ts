// The committed CRDs: crds/modelbackfill.yaml must be exactly what `npm run gen:crds` produces from pkg/core/api.ts,
// and have the shape contract.md pins. No servers here; test/integration/crds proves the apiserver agrees.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import { z } from 'zod'
import { buildModelBackfillCRD, CRD_FILE, renderModelBackfillCRD, toStructural } from '../../crds/generate.js'
import {
  DEFAULT_IDLE_FOR,
  DEFAULT_MAX_RUN_DURATION,
  GROUP,
  MAX_ENV,
  RESERVED_ENV,
  VERSION,
} from '../../pkg/core/api.js'
import { parseDuration } from '../../pkg/core/duration.js'

// biome-ignore lint/suspicious/noExplicitAny: walking untyped YAML
type Any = any
const CRDS_DIR = join(import.meta.dirname, '../../crds')

const crd: Any = buildModelBackfillCRD()
const version: Any = crd.spec.versions[0]
const root: Any = version.schema.openAPIV3Schema
const spec: Any = root.properties.spec
const status: Any = root.properties.status
const rules = (field: Any): { rule: string; message: string }[] => field['x-kubernetes-validations'] ?? []
const messages = (field: Any) => rules(field).map((r) => r.message)

/** Every node of a schema tree, with its path. */
function* walk(node: Any, path = '$'): Generator<[string, Any]> {
  yield [path, node]
  for (const [name, child] of Object.entries(node.properties ?? {})) yield* walk(child, `${path}.${name}`)
  if (node.items) yield* walk(node.items, `${path}[]`)
  if (node.additionalProperties && typeof node.additionalProperties === 'object') {
    yield* walk(node.additionalProperties, `${path}{}`)
  }
}

describe('crds/modelbackfill.yaml', () => {
  it('is up to date with pkg/core/api.ts', () => {
    const committed = readFileSync(CRD_FILE, 'utf8')
    expect(committed, 'crds/modelbackfill.yaml is stale: run npm run gen:crds and commit the result').toBe(
      renderModelBackfillCRD(),
    )
  })

  it('parses back to the generated object', () => {
    expect(parse(readFileSync(CRD_FILE, 'utf8'))).toEqual(crd)
  })
})

describe('ModelBackfill CRD', () => {
  it('names, scope, version and status subresource', () => {
    expect(crd.metadata.name).toBe(`modelbackfills.${GROUP}`)
    expect(crd.spec.group).toBe(GROUP)
    expect(crd.spec.scope).toBe('Namespaced')
    expect(crd.spec.names).toMatchObject({
      kind: 'ModelBackfill',
      plural: 'modelbackfills',
      singular: 'modelbackfill',
      // Both short names the FlexInfer reference controller's CRD registers, so scripts written for it keep working.
      shortNames: ['mbf', 'modelbackfill'],
    })
    expect(crd.spec.versions).toHaveLength(1)
    expect(version).toMatchObject({ name: VERSION, served: true, storage: true, subresources: { status: {} } })
  })

  it('printer columns: Model, Phase, Reason, Node, Job, Attempts, Next Run (wide only), Age', () => {
    expect(version.additionalPrinterColumns).toEqual([
      { name: 'Model', type: 'string', jsonPath: '.spec.modelRef' },
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'Reason', type: 'string', jsonPath: '.status.reason' },
      { name: 'Node', type: 'string', jsonPath: '.status.nodeName' },
      { name: 'Job', type: 'string', jsonPath: '.status.jobName' },
      { name: 'Attempts', type: 'integer', jsonPath: '.status.attempts' },
      { name: 'Next Run', type: 'string', jsonPath: '.status.nextRunTime', priority: 1 },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ])
  })

  it('spec: required refs, defaults, map env, descriptions', () => {
    expect(root.required).toEqual(['spec'])
    expect(spec.type).toBe('object')
    expect(spec.required).toEqual(['modelRef', 'templateRef'])
    expect(spec.properties.idleFor.default).toBe(DEFAULT_IDLE_FOR)
    expect(spec.properties.idleFor.default).toBe('10m')
    expect(spec.properties.maxRunDuration.default).toBe(DEFAULT_MAX_RUN_DURATION)
    expect(spec.properties.maxRunDuration.default).toBe('30m')
    expect(spec.properties.repeatAfter.default).toBeUndefined()
    expect(spec.properties.env).toMatchObject({ type: 'object', additionalProperties: { type: 'string' } })
    expect(spec.properties.suspend.type).toBe('boolean')
    for (const field of ['modelRef', 'templateRef', 'idleFor', 'maxRunDuration', 'repeatAfter', 'env', 'suspend']) {
      expect(spec.properties[field].description, field).toMatch(/\w/)
    }
  })

  it('status: every contract field, times as date-time, conditions keyed by type', () => {
    expect(Object.keys(status.properties).sort()).toEqual(
      [
        'phase',
        'reason',
        'message',
        'observedGeneration',
        'nodeName',
        'jobName',
        'idleSince',
        'startedAt',
        'completionTime',
        'nextRunTime',
        'attempts',
        'conditions',
        // Additions to the contract's status (docs/differences.md): the run identity and the attempt within it.
        'runId',
        'runAttempt',
        // And the run's progress as its attempts' termination messages reported it.
        'runDone',
        'runTotal',
        'runDiscarded',
      ].sort(),
    )
    for (const t of ['idleSince', 'startedAt', 'completionTime', 'nextRunTime']) {
      expect(status.properties[t], t).toMatchObject({ type: 'string', format: 'date-time' })
    }
    expect(status.properties.attempts).toMatchObject({ type: 'integer', format: 'int64' })
    expect(status.properties.conditions).toMatchObject({
      type: 'array',
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['type'],
    })
    expect(status.properties.conditions.items.properties.lastTransitionTime.format).toBe('date-time')
  })

  it('every status field, conditions included, has a description for kubectl explain', () => {
    for (const [path, node] of walk(status)) {
      expect(node.description, `${path} has no description`).toMatch(/\w{3}/)
    }
  })

  it('is structural: every node typed, no JSON Schema leftovers', () => {
    for (const [path, node] of walk(root)) {
      expect(node.type, `${path} has no type`).toBeTypeOf('string')
      for (const key of ['$schema', '$ref', '$defs', 'propertyNames', 'anyOf', 'oneOf', 'allOf', 'not', 'const']) {
        expect(node, `${path} carries ${key}`).not.toHaveProperty(key)
      }
      expect(node.additionalProperties, `${path} additionalProperties: false`).not.toBe(false)
      if (node.type === 'integer') {
        expect(node.minimum, `${path}: zod's safe-integer bound leaked`).toBeUndefined()
      }
      // Strings CEL reads must be bounded for the cost estimator.
      if (node.type === 'string' && rules(node).length) expect(node.maxLength, path).toBeGreaterThan(0)
    }
  })

  it('CEL rules carry user-facing messages for each refusal the contract lists', () => {
    const p = spec.properties
    expect(messages(p.modelRef)).toEqual(['modelRef must name a Model in the same namespace'])
    expect(messages(p.templateRef)).toEqual(['templateRef must name a CronJob in the same namespace'])
    for (const field of ['idleFor', 'maxRunDuration', 'repeatAfter']) {
      expect(messages(p[field]), field).toEqual(
        expect.arrayContaining([
          `${field} must be a duration such as 90s, 15m or 1h30m`,
          `${field} must not be negative`,
        ]),
      )
    }
    expect(messages(p.repeatAfter)).toContain('repeatAfter must be 0 (one-shot) or at least 1m')
    expect(messages(p.env)).toEqual([
      `env may have at most ${MAX_ENV} entries`,
      'env names must match ^[A-Za-z_][A-Za-z0-9_]*$ (letters, digits, underscore; not starting with a digit)',
      `${RESERVED_ENV} is reserved: the controller always sets it to background`,
      "FLEXINFER_RUN_ID is reserved: the controller always sets it to the run's identity",
      "FLEXINFER_ATTEMPT is reserved: the controller always sets it to the attempt's number within its run",
    ])
    // Every rule that calls duration() is guarded by the syntax match (an unguarded one would surface an
    // evaluation error instead of the message).
    for (const field of ['idleFor', 'maxRunDuration', 'repeatAfter']) {
      for (const { rule } of rules(p[field])) {
        if (rule.includes('duration(self)')) expect(rule, `${field}: ${rule}`).toMatch(/self\.matches\('[^']+'\)/)
      }
    }
  })

  it('the CEL duration syntax agrees with pkg/core/duration.ts on what it accepts', () => {
    const rule = rules(spec.properties.idleFor)[0]?.rule ?? ''
    const source = /self\.matches\('([^']+)'\)/.exec(rule)?.[1]
    expect(source).toBeDefined()
    const re = new RegExp(source as string, 'u')
    for (const ok of ['0', '+0', '90s', '15m', '1h30m', '1.5h', '.5h', '300ms', '5us', '5µs', '5μs', '10ns', '1h1h']) {
      expect(re.test(ok), ok).toBe(true)
      expect(() => parseDuration(ok), ok).not.toThrow()
    }
    for (const bad of ['', '5', '5 minutes', 'm', '1d', '1w', '5m5', 'h1', '--5m', 'P1D']) {
      expect(re.test(bad), bad).toBe(false)
      expect(() => parseDuration(bad), bad).toThrow()
    }
    expect(re.test('-5m')).toBe(true) // syntax ok; the "must not be negative" rule refuses it
  })
})

describe('toStructural', () => {
  it('inlines $ref, turns exclusive bounds into OpenAPI v3 booleans, keeps open maps', () => {
    const Port = z.number().int().gt(0).lt(65536)
    const json = z.toJSONSchema(z.object({ a: Port, b: Port, labels: z.record(z.string(), z.string()) }), {
      reused: 'ref',
    })
    expect(JSON.stringify(json)).toContain('$ref')
    const out: Any = toStructural(json as Any)
    expect(out.properties.a).toEqual({
      type: 'integer',
      format: 'int64',
      minimum: 0,
      exclusiveMinimum: true,
      maximum: 65536,
      exclusiveMaximum: true,
    })
    expect(out.properties.b).toEqual(out.properties.a)
    expect(out.properties.labels).toEqual({ type: 'object', additionalProperties: { type: 'string' } })
    expect(JSON.stringify(out)).not.toContain('$')
  })

  it('refuses what a structural schema cannot express instead of loosening it', () => {
    const scalars = z.toJSONSchema(z.object({ x: z.union([z.string(), z.number()]) }))
    expect(() => toStructural(scalars as Any)).toThrow(/#\.x: type \["string","number"\] is a union/)
    const objects = z.toJSONSchema(z.object({ x: z.union([z.object({ a: z.string() }), z.object({ b: z.string() })]) }))
    expect(() => toStructural(objects as Any)).toThrow(/#\.x: "anyOf" has no structural-schema equivalent/)
  })
})

describe('test/local-only CRDs', () => {
  const load = (file: string): Any => parse(readFileSync(join(CRDS_DIR, file), 'utf8'))
  const cases = [
    { file: 'model.yaml', plural: 'models', kind: 'Model' },
    { file: 'gamingsession.yaml', plural: 'gamingsessions', kind: 'GamingSession' },
    { file: 'gpulease.yaml', plural: 'gpuleases', kind: 'GPULease' },
  ]

  it.each(cases)('$kind is ai.flexinfer/v1alpha2, namespaced, and marked test-only', ({ file, plural, kind }) => {
    const doc = load(file)
    expect(doc.kind).toBe('CustomResourceDefinition')
    expect(doc.metadata.name).toBe(`${plural}.${GROUP}`)
    expect(doc.metadata.annotations['ai.flexinfer/test-only']).toBe('true')
    expect(doc.spec).toMatchObject({ group: GROUP, scope: 'Namespaced', names: { kind, plural } })
    expect(doc.spec.versions.map((v: Any) => v.name)).toEqual([VERSION])
    const schema = doc.spec.versions[0].schema.openAPIV3Schema
    expect(schema.description).toMatch(/TEST\/LOCAL-ONLY/)
    expect(schema.properties.spec['x-kubernetes-preserve-unknown-fields']).toBe(true)
    expect(readFileSync(join(CRDS_DIR, 'README.md'), 'utf8')).toContain(`\`${file}\``)
  })

  it('carry the fields contract.md lists', () => {
    const model = load('model.yaml').spec.versions[0]
    const m = model.schema.openAPIV3Schema.properties
    expect(model.subresources).toEqual({ status: {} })
    expect(m.spec.properties.nodeSelector.additionalProperties).toEqual({ type: 'string' })
    expect(m.spec.properties.gpu.properties.shared.type).toBe('string')
    expect(m.status.properties.phase.type).toBe('string')
    expect(m.status.properties.gpu.properties.node.type).toBe('string')
    expect(m.status.properties.lastActiveTime).toMatchObject({ type: 'string', format: 'date-time' })

    const g = load('gamingsession.yaml').spec.versions[0].schema.openAPIV3Schema.properties.spec.properties
    expect(g.nodeName.type).toBe('string')
    expect(g.mode).toMatchObject({ type: 'string', default: 'gaming' })
    expect(g.expiresAt).toMatchObject({ type: 'string', format: 'date-time' })

    const l = load('gpulease.yaml').spec.versions[0].schema.openAPIV3Schema.properties.spec.properties
    expect(l.group.type).toBe('string')
    expect(l.node.type).toBe('string')
    expect(l.expiresAt).toMatchObject({ type: 'string', format: 'date-time' })
  })

  it('crds/ holds exactly these four CRDs, one per file', () => {
    const files = readdirSync(CRDS_DIR)
      .filter((f) => f.endsWith('.yaml'))
      .sort()
    expect(files).toEqual(['gamingsession.yaml', 'gpulease.yaml', 'model.yaml', 'modelbackfill.yaml'])
  })
})
