// Generates crds/modelbackfill.yaml from the zod schemas in pkg/core/api.ts (`npm run gen:crds`).
// The zod schema is the single source of truth: the functions validate with it, the apiserver with this CRD.
// z.toJSONSchema gives JSON Schema 2020-12; Kubernetes wants a *structural* OpenAPI v3 subset, so `toStructural`
// keeps what the apiserver understands and fails loudly on anything it cannot express (anyOf, not, …) rather
// than silently producing a looser schema.
import { writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { stringify } from 'yaml'
import { z } from 'zod'
import { GROUP, ModelBackfillSpec, ModelBackfillStatus, VERSION } from '../pkg/core/api.js'

export const KIND = 'ModelBackfill'
export const PLURAL = 'modelbackfills'
export const SINGULAR = 'modelbackfill'
// Both of the FlexInfer reference controller's short names, so scripts written against it keep working.
export const SHORT_NAMES = ['mbf', 'modelbackfill']
export const CATEGORIES = ['flexinfer']
export const CRD_FILE = join(dirname(fileURLToPath(import.meta.url)), 'modelbackfill.yaml')

type JsonSchema = Record<string, unknown>

/** Keys a structural schema may carry, copied as they are (after recursing where they hold schemas). */
const PASS_THROUGH = new Set([
  'type',
  'format',
  'description',
  'enum',
  'default',
  'minimum',
  'maximum',
  'minLength',
  'maxLength',
  'pattern',
  'minItems',
  'maxItems',
  'uniqueItems',
  'minProperties',
  'maxProperties',
  'multipleOf',
  'nullable',
  'required',
  'x-kubernetes-validations',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-map-type',
  'x-kubernetes-preserve-unknown-fields',
  'x-kubernetes-int-or-string',
  'x-kubernetes-embedded-resource',
])
/** JSON Schema bookkeeping with no meaning for the apiserver. */
const DROP = new Set(['$schema', '$id', 'id', '$defs', 'definitions', 'propertyNames', 'title'])

/** z.number().int() bounds itself to the safe-integer range; Kubernetes integers are int64, so drop those bounds. */
const SAFE_INT_BOUNDS = new Set([Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER])

/**
 * Converts z.toJSONSchema output to a Kubernetes structural schema: `$ref`s inlined, `$schema` /
 * `additionalProperties: false` / `propertyNames` dropped, maps kept as `additionalProperties: {schema}`,
 * 2020-12 numeric exclusive bounds turned into OpenAPI v3 booleans, integers given `format: int64`.
 */
export function toStructural(node: JsonSchema, defs: Record<string, JsonSchema> = {}, path = '#'): JsonSchema {
  const ownDefs = { ...defs, ...((node.$defs as Record<string, JsonSchema> | undefined) ?? {}) }
  let source = node
  if (typeof node.$ref === 'string') {
    const name = node.$ref.replace(/^#\/(\$defs|definitions)\//, '')
    const target = ownDefs[name]
    if (!target) throw new Error(`${path}: cannot resolve ${node.$ref}`)
    const { $ref: _ref, ...rest } = node
    source = { ...target, ...rest }
  }
  const out: JsonSchema = {}
  for (const [key, value] of Object.entries(source)) {
    if (DROP.has(key)) continue
    switch (key) {
      case 'properties': {
        const props: JsonSchema = {}
        for (const [name, sub] of Object.entries(value as Record<string, JsonSchema>)) {
          props[name] = toStructural(sub, ownDefs, `${path}.${name}`)
        }
        out.properties = props
        break
      }
      case 'items':
        out.items = toStructural(value as JsonSchema, ownDefs, `${path}[]`)
        break
      case 'additionalProperties':
        if (value === false) break // closed object: Kubernetes prunes unknown fields anyway
        if (value === true) {
          out['x-kubernetes-preserve-unknown-fields'] = true
          break
        }
        out.additionalProperties = toStructural(value as JsonSchema, ownDefs, `${path}{}`)
        break
      case 'const':
        out.enum = [value]
        break
      case 'exclusiveMinimum':
        out.minimum = value
        out.exclusiveMinimum = true
        break
      case 'exclusiveMaximum':
        out.maximum = value
        out.exclusiveMaximum = true
        break
      case 'minimum':
      case 'maximum':
        if (source.type === 'integer' && SAFE_INT_BOUNDS.has(value as number)) break
        out[key] = value
        break
      default:
        if (!PASS_THROUGH.has(key)) {
          throw new Error(`${path}: "${key}" has no structural-schema equivalent; change the zod schema`)
        }
        out[key] = value
    }
  }
  if (out.type === 'integer' && out.format === undefined) out.format = 'int64'
  if (out.type === undefined && out['x-kubernetes-preserve-unknown-fields'] !== true) {
    throw new Error(`${path}: structural schemas need a type`)
  }
  if (out.type !== undefined && typeof out.type !== 'string') {
    throw new Error(`${path}: type ${JSON.stringify(out.type)} is a union; structural schemas need one type`)
  }
  if (Array.isArray(out.required) && out.required.length === 0) delete out.required
  return ordered(out)
}

/** A stable, readable key order for the YAML: type first, nested schemas after the scalars, extensions last. */
const KEY_ORDER = [
  'type',
  'format',
  'description',
  'default',
  'enum',
  'nullable',
  'minimum',
  'exclusiveMinimum',
  'maximum',
  'exclusiveMaximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'pattern',
  'minItems',
  'maxItems',
  'uniqueItems',
  'minProperties',
  'maxProperties',
  'required',
  'properties',
  'items',
  'additionalProperties',
]
function ordered(schema: JsonSchema): JsonSchema {
  const rank = (key: string) => {
    const i = KEY_ORDER.indexOf(key)
    return i === -1 ? KEY_ORDER.length : i
  }
  const keys = Object.keys(schema).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b))
  return Object.fromEntries(keys.map((k) => [k, schema[k]]))
}

function zodToStructural(schema: z.ZodType): JsonSchema {
  // io: 'input' — fields with a default are optional for the user (the apiserver applies the default).
  return toStructural(z.toJSONSchema(schema, { io: 'input', unrepresentable: 'throw' }) as JsonSchema)
}

/** The ModelBackfill CustomResourceDefinition as a plain object. */
export function buildModelBackfillCRD(): JsonSchema {
  const spec = zodToStructural(ModelBackfillSpec)
  const status = zodToStructural(ModelBackfillStatus)
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: {
      name: `${PLURAL}.${GROUP}`,
      labels: { 'app.kubernetes.io/part-of': 'model-backfill' },
    },
    spec: {
      group: GROUP,
      names: {
        kind: KIND,
        listKind: `${KIND}List`,
        plural: PLURAL,
        singular: SINGULAR,
        shortNames: SHORT_NAMES,
        categories: CATEGORIES,
      },
      scope: 'Namespaced',
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: 'Model', type: 'string', jsonPath: '.spec.modelRef' },
            { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
            // Why it is waiting, blocked or cancelling, without `kubectl describe`.
            { name: 'Reason', type: 'string', jsonPath: '.status.reason' },
            { name: 'Node', type: 'string', jsonPath: '.status.nodeName' },
            { name: 'Job', type: 'string', jsonPath: '.status.jobName' },
            { name: 'Attempts', type: 'integer', jsonPath: '.status.attempts' },
            // string, not date: the apiserver renders a date column as an age, and a future time (nextRunTime
            // always is while it is shown) as "<invalid>" (apimachinery duration.HumanDuration).
            { name: 'Next Run', type: 'string', jsonPath: '.status.nextRunTime', priority: 1 },
            { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
          ],
          schema: {
            openAPIV3Schema: {
              description:
                'ModelBackfill runs a CPU-side Job copied from a same-namespace CronJob while a warm model is ' +
                'foreground-idle, and cancels it when foreground demand or gaming intent appears.',
              type: 'object',
              required: ['spec'],
              properties: {
                apiVersion: { type: 'string', description: 'APIVersion of this object (ai.flexinfer/v1alpha2).' },
                kind: { type: 'string', description: 'Kind of this object (ModelBackfill).' },
                metadata: { type: 'object' },
                spec,
                status,
              },
            },
          },
        },
      ],
    },
  }
}

export const HEADER =
  '# GENERATED by `npm run gen:crds` (crds/generate.ts) from the zod schemas in core/api.ts. Do not edit.\n'

/** The exact text of crds/modelbackfill.yaml. */
export function renderModelBackfillCRD(): string {
  return `${HEADER}${stringify(buildModelBackfillCRD(), { lineWidth: 0, singleQuote: false })}`
}

const invokedDirectly = process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)
if (invokedDirectly) {
  writeFileSync(CRD_FILE, renderModelBackfillCRD())
  console.log(`wrote ${CRD_FILE}`)
}
