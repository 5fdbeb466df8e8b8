// One count per series: the contract's four families (and the phase and dead-letter series) come from KV state every
// process mirrors, so `sum by (…)` over the pods a PodMonitor scrapes must still equal the state — at any replica
// count, and through the exporter going away (pkg/observability/exporter-lease.ts). Deployed shape on the real servers:
// two cancel processes and two demand processes, the rest in one, each with its own /metrics, scraped as the
// PodMonitor does; the sums are compared with the KV state. The PodMonitor scrapes every function whatever its
// transport, so the Knative overlay's processes are scraped too: source, admit and lifecycle served over HTTP
// (pkg/transport/http-adapter.ts) and the gateway ingress, each with its process metrics and never a contract series.
// Then the exporting process stops (a scale-down, a rolling update): no scrape ever shows a series twice, and the
// other cancel takes over after the handover.

import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, expect, it, vi } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { INGRESS_TYPES, ingressFunction } from '../../../functions/ingress/index.js'
import { loadFunction } from '../../../functions/registry.js'
import { type HttpFunction, startHttpFunction } from '../../../pkg/transport/http-adapter.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner, testInstance } from '../support/runner.js'

const SAVED = vi.hoisted(() => {
  const saved = process.env.METRICS_HANDOVER_MS
  process.env.METRICS_HANDOVER_MS = '2000'
  return saved
})

const env = useTestEnv()
const instance = testInstance()
const runners: Runner[] = []
/** The Knative overlay's HTTP-served functions and the ingress (they only need to be up and scraped here). */
const served: HttpFunction[] = []
let world: BackfillWorld

beforeAll(async () => {
  runners.push(await startTestRunner(env, { instance, functions: ['source', 'admit', 'lifecycle'], httpPort: 0 }))
  for (const functions of [['cancel'], ['cancel'], ['demand'], ['demand']]) {
    runners.push(await startTestRunner(env, { instance, functions, watch: false, httpPort: 0 }))
  }
  const token = `metrics-${randomUUID()}`
  for (const name of ['source', 'admit', 'lifecycle']) {
    const factory = (await loadFunction(name)) as NonNullable<Awaited<ReturnType<typeof loadFunction>>>
    const common = { natsUrl: env.natsUrl, kubeconfig: env.kc, namespaces: [env.namespace], port: 0, token }
    served.push(await startHttpFunction(factory(), common))
  }
  served.push(
    await startHttpFunction(ingressFunction(), { natsUrl: env.natsUrl, port: 0, token, acceptTypes: INGRESS_TYPES }),
  )
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  world?.close()
  for (const f of served) await f.stop().catch(() => {})
  for (const r of runners) await r.stop().catch(() => {})
  if (SAVED === undefined) delete process.env.METRICS_HANDOVER_MS
  else process.env.METRICS_HANDOVER_MS = SAVED
})

const CONTRACT =
  /^(flexinfer_model_backfill_(?:starts|completions|preemptions|useful_running_seconds)_total)\{(.*)\} (\S+)$/

/** Every scraped pod's contract series, summed by series (what `sum by (every label)` computes). */
async function scrape(targets: Runner[]) {
  const sums = new Map<string, number>()
  const exporters = new Set<number>()
  const urls = [...targets.map((r) => r.httpUrl), ...served.map((f) => f.url)]
  for (const [i, url] of urls.entries()) {
    const text = await (await fetch(`${url}/metrics`)).text()
    for (const line of text.split('\n')) {
      const m = CONTRACT.exec(line)
      if (!m?.[2]?.includes(`namespace="${env.namespace}"`)) continue
      exporters.add(i)
      const key = `${m[1]}{${m[2]}}`
      sums.set(key, (sums.get(key) ?? 0) + Number(m[3]))
    }
    // Every function exports its own process metrics.
    expect(text, `pod ${i}`).toMatch(/^process_cpu_seconds_total /m)
    expect(text, `pod ${i}`).toMatch(/^flexinfer_model_backfill_nats_up 1$/m)
  }
  return { sums, exporters }
}

/** The same series computed from the KV state of the test's backfills. */
async function truth(names: string[]) {
  const out = new Map<string, number>()
  for (const name of names) {
    const s = await world.state(name)
    if (!s) continue
    const l = `backfill="${name}",namespace="${env.namespace}",model="${s.model}"`
    out.set(`flexinfer_model_backfill_starts_total{${l}}`, s.counters.starts)
    out.set(`flexinfer_model_backfill_completions_total{${l},result="success"}`, s.counters.success)
    out.set(`flexinfer_model_backfill_completions_total{${l},result="failure"}`, s.counters.failed)
    for (const [reason, n] of Object.entries(s.counters.preemptions)) {
      if (n) out.set(`flexinfer_model_backfill_preemptions_total{${l},reason="${reason}"}`, n)
    }
    out.set(`flexinfer_model_backfill_useful_running_seconds_total{${l}}`, s.counters.usefulSeconds)
  }
  return out
}

it('sum over every scraped pod equals the KV state, with one exporter at a time, also through a handover', {
  timeout: 90_000,
}, async () => {
  const names = ['one', 'two']
  await world.template('tpl')
  for (const name of names) {
    await world.model(`m-${name}`, { node: `node-${name}` })
    await world.backfill(name, { modelRef: `m-${name}`, templateRef: 'tpl', idleFor: '1s' })
  }
  for (const name of names) await world.waitFor(name, 'Running', 'JobRunning')
  // A preemption (suspended: the state then stays put), then a completion: every family has a non-zero series.
  await world.patchBackfillSpec('one', { suspend: true })
  await world.waitFor('one', 'Suspended', 'Suspended')
  await world.finishJob((await world.getBackfill('two'))?.status?.jobName as string, 'Succeeded')
  await world.waitFor('two', 'Succeeded', 'JobComplete')

  const scraped = runners.filter((r) => r.httpUrl) // with `served`: what the PodMonitor selects, every function
  const want = await truth(names)
  const first = await waitUntil('the scraped sums to equal the KV state', async () => {
    const got = await scrape(scraped)
    return JSON.stringify([...got.sums].sort()) === JSON.stringify([...want].sort()) ? got : undefined
  })
  expect(first.exporters.size).toBe(1)
  const holder = [...first.exporters][0] as number
  expect(scraped[holder]?.functions.map((f) => f.name)).toEqual([`cancel-${instance}`])

  // The exporter goes away; until the other cancel takes over, the series may be missing, never doubled.
  const [gone] = scraped.splice(holder, 1)
  await gone?.stop()
  runners.splice(runners.indexOf(gone as Runner), 1)
  const after = await waitUntil(
    'the other cancel to export the same sums',
    async () => {
      const got = await scrape(scraped)
      expect(got.exporters.size).toBeLessThanOrEqual(1)
      for (const [series, v] of got.sums) expect(v, series).toBeLessThanOrEqual(want.get(series) ?? 0)
      return got.exporters.size === 1 ? got : undefined
    },
    30_000,
  )
  expect([...after.sums].sort()).toEqual([...want].sort())
})
