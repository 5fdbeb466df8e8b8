// The TypeScript client's model map against the shared cases (clients/conformance/model-map.json), which the
// Python and Go clients run too.
import { readFileSync } from 'node:fs'
import { parseModelMap, requestIsBackground, resolveModel } from '@flexinfer/gateway-emitter'
import { describe, expect, it } from 'vitest'

const data = JSON.parse(readFileSync('clients/conformance/model-map.json', 'utf8')) as {
  cases: { name: string; map: unknown; request: Parameters<typeof resolveModel>[1]; expect: unknown }[]
  invalid: { name: string; map: unknown; error: string }[]
  workloadClass: { name: string; headers: Record<string, string>; env: string | null; background: boolean }[]
}

describe('model map (clients/conformance/model-map.json)', () => {
  for (const c of data.cases)
    it(c.name, () => expect(resolveModel(parseModelMap(c.map), c.request) ?? null).toEqual(c.expect))
  for (const c of data.invalid) it(`refuses ${c.name}`, () => expect(() => parseModelMap(c.map)).toThrow(c.error))
  for (const c of data.workloadClass)
    it(`workload class: ${c.name}`, () =>
      expect(requestIsBackground(c.headers, c.env === null ? {} : { FLEXINFER_WORKLOAD_CLASS: c.env })).toBe(
        c.background,
      ))
})
