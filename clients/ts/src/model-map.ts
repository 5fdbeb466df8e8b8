// Which Model a gateway request is for: a small declarative mapping, one JSON format for every client
// (clients/model-map.md). Rules are tried in order, the first match wins; no rule matching, the OpenAI `model` is
// the Model's name in `defaultNamespace` (as FlexInfer's gateway serves a Model under its own name). A request the
// mapping cannot name (no model, or a name that is no Kubernetes name) maps to undefined: nothing is published.
import { readFileSync } from 'node:fs'
import { invalidTarget, isBackground, WORKLOAD_CLASS_ENV, WORKLOAD_CLASS_HEADER } from './contract.js'

export interface ModelMapRule {
  match: {
    /** The OpenAI `model` field, exactly. */
    model?: string
    /** A request path prefix, e.g. `/teams/b/` (a route). */
    route?: string
    /** A request header (case-insensitive name) that is present — with `value`, that has exactly this value. */
    header?: string
    value?: string
  }
  /**
   * `namespace/model`; `namespace/*` keeps the request's own `model`. Absent (header rules only): the header's
   * value is the target, `namespace/model` or a model in `defaultNamespace`.
   */
  to?: string
}

export interface ModelMap {
  defaultNamespace: string
  rules?: ModelMapRule[]
}

export interface GatewayRequest {
  /** The OpenAI `model` of the request body. */
  model?: string
  /** The request path. */
  route?: string
  /** Request headers (names in any case). */
  headers?: Record<string, string | string[] | undefined>
}

export interface Target {
  namespace: string
  model: string
}

/** The default mapping: no rules, the namespace FlexInfer installs into. */
export const DEFAULT_MODEL_MAP: ModelMap = { defaultNamespace: 'flexinfer-system', rules: [] }

/** Rules kept at most (a mapping is configuration, not data). */
export const MAX_RULES = 10_000

/** Checks a parsed mapping; throws an Error naming the first thing wrong (at start, never per request). */
export function parseModelMap(value: unknown): ModelMap {
  const fail = (why: string): never => {
    throw new Error(`model map: ${why}`)
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail('not a JSON object')
  const v = value as Record<string, unknown>
  for (const key of Object.keys(v)) if (key !== 'defaultNamespace' && key !== 'rules') fail(`unknown field "${key}"`)
  const ns = v.defaultNamespace ?? DEFAULT_MODEL_MAP.defaultNamespace
  const bad = invalidTarget(ns, 'x')
  if (bad) fail(`defaultNamespace: ${bad}`)
  const rules = v.rules ?? []
  if (!Array.isArray(rules)) fail('rules is not a list')
  if ((rules as unknown[]).length > MAX_RULES) fail(`more than ${MAX_RULES} rules`)
  ;(rules as unknown[]).forEach((rule, i) => {
    const at = `rules[${i}]`
    if (typeof rule !== 'object' || rule === null) fail(`${at} is not an object`)
    const r = rule as Record<string, unknown>
    for (const key of Object.keys(r)) if (key !== 'match' && key !== 'to') fail(`${at}: unknown field "${key}"`)
    const m = r.match as Record<string, unknown> | undefined
    if (typeof m !== 'object' || m === null) fail(`${at}.match is missing`)
    const match = m as Record<string, unknown>
    for (const key of Object.keys(match))
      if (!['model', 'route', 'header', 'value'].includes(key)) fail(`${at}.match: unknown field "${key}"`)
    const kinds = ['model', 'route', 'header'].filter((k) => match[k] !== undefined)
    if (kinds.length !== 1) fail(`${at}.match needs exactly one of model, route, header`)
    for (const k of ['model', 'route', 'header', 'value'])
      if (match[k] !== undefined && (typeof match[k] !== 'string' || match[k] === ''))
        fail(`${at}.match.${k} is not a non-empty string`)
    if (match.value !== undefined && match.header === undefined) fail(`${at}.match.value needs header`)
    if (r.to === undefined) {
      if (match.header === undefined)
        fail(`${at}.to is missing (only a header rule may take its target from the header)`)
    } else {
      if (typeof r.to !== 'string') fail(`${at}.to is not a string`)
      const [tns, tmodel, ...rest] = (r.to as string).split('/')
      if (rest.length > 0 || tmodel === undefined) fail(`${at}.to ${JSON.stringify(r.to)} is not namespace/model`)
      const why = invalidTarget(tns, tmodel === '*' ? 'x' : tmodel)
      if (why) fail(`${at}.to: ${why}`)
    }
  })
  return { defaultNamespace: ns as string, rules: rules as ModelMapRule[] }
}

/** Reads and checks a mapping file (JSON). */
export function loadModelMap(file: string): ModelMap {
  let parsed: unknown
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'))
  } catch (err) {
    throw new Error(`model map ${file}: ${(err as Error).message}`)
  }
  try {
    return parseModelMap(parsed)
  } catch (err) {
    throw new Error(`${file}: ${(err as Error).message}`)
  }
}

function header(headers: GatewayRequest['headers'], name: string): string | undefined {
  if (!headers) return undefined
  const want = name.toLowerCase()
  for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === want) return Array.isArray(v) ? v[0] : v
  return undefined
}

function target(spec: string, defaultNamespace: string, requestModel: string | undefined): Target | undefined {
  const slash = spec.indexOf('/')
  const namespace = slash < 0 ? defaultNamespace : spec.slice(0, slash)
  let model = slash < 0 ? spec : spec.slice(slash + 1)
  if (model === '*') {
    if (requestModel === undefined) return undefined
    model = requestModel
  }
  return invalidTarget(namespace, model) ? undefined : { namespace, model }
}

/** The Model a request is for, or undefined when the mapping cannot name one. Never throws. */
export function resolveModel(map: ModelMap, request: GatewayRequest): Target | undefined {
  for (const rule of map.rules ?? []) {
    const m = rule.match
    if (m.model !== undefined && request.model !== m.model) continue
    if (m.route !== undefined && !request.route?.startsWith(m.route)) continue
    if (m.header !== undefined) {
      const value = header(request.headers, m.header)
      if (value === undefined || (m.value !== undefined && value !== m.value)) continue
      if (rule.to === undefined) return target(value.trim(), map.defaultNamespace, request.model)
    }
    return target(rule.to as string, map.defaultNamespace, request.model)
  }
  if (request.model === undefined || request.model.includes('/')) return undefined
  return target(request.model, map.defaultNamespace, undefined)
}

/**
 * Whether a request is background class: the `X-FlexInfer-Workload-Class: background` header, or a gateway (or
 * workload) that runs with FLEXINFER_WORKLOAD_CLASS=background. Background requests are never foreground.
 */
export function requestIsBackground(headers: GatewayRequest['headers'], env: NodeJS.ProcessEnv = process.env): boolean {
  return isBackground(header(headers, WORKLOAD_CLASS_HEADER)) || isBackground(env[WORKLOAD_CLASS_ENV])
}
