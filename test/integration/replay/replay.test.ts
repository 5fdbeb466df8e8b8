// The short replay in `npm test`: a tiny seeded synthetic trace (two models, twelve minutes of trace at 60x) replayed
// against the real servers with every function running; the oracle (its own Job and pod watches, the publish log)
// finds no Job admitted inside an idle window and no Job a request left running, and the report and its PNG are
// written. The full-size run is `npm run replay` (replay/README in docs/operating.md).
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, expect, it } from 'vitest'
import { runReplay } from '../../../dev/replay/replay.js'
import { generateTrace, parseTrace } from '../../../dev/replay/trace.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
let out: string | undefined
afterAll(async () => {
  if (out) await rm(out, { recursive: true, force: true })
})

it('replays a tiny trace: no admission inside a window, every exposure bounded, report and PNG written', async () => {
  out = await mkdtemp(join(tmpdir(), 'mbf-replay-'))
  const minutes = 12
  const trace = parseTrace(
    generateTrace({
      seed: 5,
      models: 2,
      durationMs: minutes * 60_000,
      dayMs: minutes * 60_000,
      requestGapMeanMs: 8_000,
    }),
  )
  expect(trace.requests.length).toBeGreaterThan(10)
  const lines: string[] = []
  const result = await runReplay({
    trace,
    speed: 60,
    idleForTraceMs: 60_000,
    kubeconfigPath: env.kubeconfigPath,
    natsUrl: env.natsUrl,
    outDir: out,
    source: 'test trace',
    log: (line) => lines.push(line),
  })
  const r = result.report
  expect(result.idleForMs).toBe(1000)
  expect(r.admissionsInsideWindow, JSON.stringify(r.insideWindow)).toBe(0)
  expect(r.unresolved, JSON.stringify(r.unresolved)).toEqual([])
  expect(r.requests).toBe(trace.requests.length)
  expect(r.jobs).toBeGreaterThan(0)
  expect(r.harvest.harvestedMs).toBeGreaterThan(0)
  for (const e of r.exposure.items) expect(e.exposureMs).toBeLessThan(10_000)
  const json = JSON.parse(await readFile(result.files.json, 'utf8'))
  expect(json.admissionsInsideWindow).toBe(0)
  expect(await readFile(result.files.markdown, 'utf8')).toContain('Jobs admitted inside an idle window: **0**')
  const png = await readFile(result.files.png)
  expect(png.subarray(1, 4).toString()).toBe('PNG')
  console.log(
    `replay: ${r.requests} requests, ${r.jobs} Jobs, exposure p50 ${r.exposure.p50Ms} ms p99 ${r.exposure.p99Ms} ms ` +
      `max ${r.exposure.maxMs} ms over ${r.exposure.count}, harvest ${((r.harvest.fraction ?? 0) * 100).toFixed(1)}%`,
  )
}, 120_000)
