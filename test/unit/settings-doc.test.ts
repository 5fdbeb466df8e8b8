// The reference pages generated from their one source (dev/tools/docs/generate.ts): the committed pages are what the
// generator writes now, and every default the settings table shows is the one its parse gives.
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { loadConfig, SETTINGS } from '../../cmd/manager/config.js'
import { DEFAULT_CONSUMER_OWNERS } from '../../cmd/manager/provision.js'
import { ALERTS_PAGE, renderAlerts, renderSettings, SETTINGS_PAGE } from '../../dev/tools/docs/generate.js'
import { FUNCTION_NAMES } from '../../functions/registry.js'
import { DEFAULT_BODY_LIMIT, DEFAULT_REQUEST_TIMEOUT_MS } from '../../pkg/transport/http-adapter.js'

describe('docs/reference generated pages', () => {
  it('settings.md is up to date (run npm run gen:docs)', () => {
    expect(readFileSync(SETTINGS_PAGE, 'utf8'), 'docs/reference/settings.md is stale: npm run gen:docs').toBe(
      renderSettings(),
    )
  })

  it('alerts.md is up to date (run npm run gen:docs)', () => {
    expect(readFileSync(ALERTS_PAGE, 'utf8'), 'docs/reference/alerts.md is stale: npm run gen:docs').toBe(
      renderAlerts(),
    )
  })

  it('alerts.md lists every rule of deploy/monitoring/prometheusrule.yaml', () => {
    const rules = [...readFileSync('deploy/monitoring/prometheusrule.yaml', 'utf8').matchAll(/- alert: (\w+)/g)]
    expect(rules.length).toBeGreaterThan(10)
    for (const [, name] of rules) expect(renderAlerts()).toContain(`[\`${name}\`]`)
  })
})

describe('the defaults the settings table shows', () => {
  const parsed = loadConfig({}) as unknown as Record<string, unknown>

  it('are what an empty environment parses to', () => {
    const wrong: string[] = []
    for (const [key, s] of Object.entries(SETTINGS)) {
      if (!('shown' in s)) continue
      const shown: string = s.shown
      const v = parsed[key]
      if (typeof v === 'number' || (typeof v === 'boolean' && (shown === 'true' || shown === 'false'))) {
        if (String(v) !== shown) wrong.push(`${s.env}: shown ${s.shown}, parsed ${v}`)
      } else if (typeof v === 'string' && v !== shown) wrong.push(`${s.env}: shown ${s.shown}, parsed ${v}`)
    }
    expect(wrong).toEqual([])
  })

  it('name the defaults other modules hold', () => {
    expect(SETTINGS.provisionConsumers.shown).toBe(DEFAULT_CONSUMER_OWNERS.join(','))
    for (const name of FUNCTION_NAMES) expect(SETTINGS.function.doc).toContain(`\`${name}\``)
    expect(SETTINGS.httpRequestTimeoutMs.doc).toContain(`Default ${DEFAULT_REQUEST_TIMEOUT_MS}.`)
    expect(DEFAULT_BODY_LIMIT).toBe(1024 * 1024)
    expect(SETTINGS.httpBodyLimitBytes.doc).toContain('Default 1 MiB')
  })
})
