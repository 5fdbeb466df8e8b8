// `npm run demo` end to end against the test environment, as CI runs it: the scripted day plays out and the
// summary reports three attempts, a foreground and a gaming preemption with their latencies, one success with
// the repeat scheduled, and useful seconds from the KV state counters.
import { afterAll, expect, it } from 'vitest'
import { type DemoRun, runDemo } from '../../../dev/scripts/demo.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
let run: DemoRun | undefined

afterAll(async () => {
  await run?.stop()
})

it('plays the scripted day and prints the timeline and summary', async () => {
  const lines: string[] = []
  run = await runDemo({
    ci: true,
    namespace: env.namespace,
    environment: { kubeconfigPath: env.kubeconfigPath, natsUrl: env.natsUrl, natsMonitorUrl: env.natsMonitorUrl },
    print: (line) => lines.push(line),
  })
  const { summary } = run
  expect(summary.attempts).toBe(3)
  expect(summary.preemptions.map((p) => [p.reason, p.attempt])).toEqual([
    ['foreground', 1],
    ['gaming', 2],
  ])
  for (const p of summary.preemptions) expect(p.latencyMs).toBeLessThan(5_000)
  expect(summary.counters).toMatchObject({
    starts: 3,
    success: 1,
    failed: 0,
    preemptions: { foreground: 1, gaming: 1 },
  })
  expect(summary.counters.usefulSeconds).toBeGreaterThan(5)
  expect(summary.finalPhase).toBe('Succeeded/RepeatScheduled')
  expect(summary.nextRunTime).toBeTruthy()
  expect(summary.phases).toContain('Blocked/GamingIntent')
  expect(summary.phases).toContain('Cancelling/GamingIntent')
  expect(summary.durationMs).toBeLessThan(60_000)

  const output = lines.join('\n')
  expect(output).toMatch(/Running\s+JobRunning\s+attempt 3/)
  expect(output).toContain('Summary — ModelBackfill')
  expect(output).toMatch(/foreground\s+attempt 1: Job deleted \d+ ms after the trigger/)
  expect(output).toMatch(/useful seconds\s+\d+\.\d/)

  // The metrics endpoint the demo points the user to reports the same counters.
  const metrics = await (await fetch(run.metricsUrl as string)).text()
  const labels = `backfill="nightly-eval",namespace="${env.namespace}",model="llama-3-8b"`
  expect(metrics).toContain(`flexinfer_model_backfill_starts_total{${labels}} 3`)
  expect(metrics).toContain(`flexinfer_model_backfill_preemptions_total{${labels},reason="gaming"} 1`)
}, 120_000)
