// model-eval (cmd/model-eval) as its Job runs it, against the simulated engine (dev/bench/engine-sim: no model, so
// the probes fail, which is a verdict like any other), the real apiserver for the ConfigMaps (with the example
// template's Role and nothing more) and a real PostgreSQL: a run preempted by SIGTERM twice mid-run, finished by its
// third attempt, leaves one row with all items and attempts=3, every item done once, the verdict with its evidence;
// and the same without PostgreSQL, resumed from the ConfigMap of the run, which is gone once the artifact is written.
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { CoreV1Api } from '@kubernetes/client-node'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { PROBE_SET_VERSION, probeSet } from '../../../cmd/model-eval/probes.js'
import { EngineSim } from '../../../dev/bench/engine-sim/engine.js'
import { repoRoot } from '../../env/binaries.js'
import { waitFor } from '../../env/exec.js'
import { isApiError, useTestEnv } from '../../env/fixture.js'
import { type PostgresInfo, startPostgres } from '../../env/postgres.js'
import { Reaper } from '../../env/supervisor.js'
import { CountingProxy } from '../../support/counting-proxy.js'

const env = useTestEnv()
const ITEMS = 1 + probeSet('READY').length + 3
const MAIN = join(repoRoot, 'cmd/model-eval/main.ts')

let sim: EngineSim
let proxy: CountingProxy
let base: string
let pg: PostgresInfo
let sql: postgres.Sql
let reaper: Reaper
let dir: string
let kubeconfig: string

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'model-eval-'))
  reaper = new Reaper()
  reaper.removeDir(dir)
  sim = new EngineSim({ maxNumSeqs: 8 })
  proxy = new CountingProxy(await sim.listen())
  const pgStarted = startPostgres({ dir, reaper })
  base = `${await proxy.listen()}/v1`
  pg = (await pgStarted).info
  sql = postgres(pg.url, { max: 2, onnotice: () => {} })
  // The example template's Role, bound to the workload's ServiceAccount: the ConfigMaps need nothing more.
  const example = await readFile(join(repoRoot, 'deploy/examples/model-eval-gauntlet.yaml'), 'utf8')
  const rbac = example
    .split(/^---$/m)
    .filter((doc) => /^kind: (Role|RoleBinding|ServiceAccount)$/m.test(doc))
    .join('\n---\n')
    .replaceAll('namespace: flexinfer-system', `namespace: ${env.namespace}`)
  const applied = await env.kubectl(['-n', env.namespace, 'apply', '-f', '-'], { input: rbac })
  expect(applied.code, applied.stderr).toBe(0)
  const kc = await env.saKubeConfig('model-eval')
  kubeconfig = join(dir, 'kubeconfig')
  await writeFile(kubeconfig, kc.exportConfig())
}, 120_000)

afterAll(async () => {
  await sql?.end({ timeout: 2 })
  await proxy?.stop()
  await sim?.stop()
  await reaper?.reap()
  await rm(dir, { recursive: true, force: true })
})

interface Attempt {
  child: ChildProcess
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>
  log: () => string
  termination: string
}

function startAttempt(runId: string, attempt: number, extra: Record<string, string>): Attempt {
  const termination = join(dir, `termination-${runId}-${attempt}`)
  let log = ''
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN], {
    cwd: repoRoot,
    env: {
      PATH: process.env.PATH,
      OPENAI_BASE_URL: base,
      MODELS: 'sim=vllm',
      GAUNTLET_API: 'chat',
      BATCH_SIZE: '4',
      ITERS: '3',
      MIN_DURATION: '1500ms',
      BENCH_MAX_TOKENS: '16',
      FLEXINFER_WORKLOAD_CLASS: 'background',
      FLEXINFER_RUN_ID: runId,
      FLEXINFER_ATTEMPT: String(attempt),
      KUBECONFIG: kubeconfig,
      POD_NAMESPACE: env.namespace,
      TERMINATION_MESSAGE_PATH: termination,
      ...extra,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  child.stdout?.on('data', (d) => (log += d))
  child.stderr?.on('data', (d) => (log += d))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal, at: Date.now() })),
  )
  return { child, exited, log: () => log, termination }
}

/** Sends SIGTERM once `ready()` holds, and checks the process is gone within a second with its progress left. */
async function preempt(a: Attempt, ready: () => Promise<boolean>) {
  await waitFor('the attempt to get mid-run', ready, { timeoutMs: 60_000, intervalMs: 50 })
  const sent = Date.now()
  a.child.kill('SIGTERM')
  const { code, at } = await a.exited
  expect(at - sent, a.log()).toBeLessThan(1000)
  expect(code, a.log()).toBe(143)
  return JSON.parse(await readFile(a.termination, 'utf8')) as { runId: string; done: number; total: number }
}

const itemCount = async (runId: string) =>
  (await sql<{ n: number }[]>`select count(*)::int as n from model_eval_items where run_id = ${runId}`)[0]?.n ?? 0

describe('model-eval', () => {
  it('survives two preemptions: the third attempt finishes; one row, every item once, the verdict with evidence', async () => {
    const runId = `run-${randomBytes(4).toString('hex')}`
    const withPg = { DATABASE_URL: pg.url }
    proxy.answered.clear()

    const first = startAttempt(runId, 1, withPg)
    // Mid-probes: some items recorded, most not.
    const t1 = await preempt(first, async () => (await itemCount(runId).catch(() => 0)) >= 3)
    expect(t1.runId).toBe(runId)
    expect(t1.total).toBe(ITEMS)
    expect(t1.done).toBe(await itemCount(runId))
    expect(t1.done).toBeLessThan(ITEMS)

    const second = startAttempt(runId, 2, withPg)
    // Mid-benchmark: the iteration in flight is thrown away.
    const before2 = t1.done
    const t2 = await preempt(second, async () => {
      const n = await itemCount(runId)
      return n > before2 && n >= ITEMS - 2
    })
    expect(t2.done).toBe(await itemCount(runId))
    expect(t2.done).toBeLessThan(ITEMS)

    const third = startAttempt(runId, 3, withPg)
    const end = await third.exited
    expect(end.code, third.log()).toBe(0)
    expect(JSON.parse(await readFile(third.termination, 'utf8'))).toEqual({ runId, done: ITEMS, total: ITEMS })

    const rows = await sql`select * from model_eval_runs where run_id = ${runId}`
    expect(rows).toHaveLength(1)
    const row = rows[0] as Record<string, unknown>
    expect(row).toMatchObject({
      model: 'sim',
      engine: 'vllm',
      attempts: 3,
      attempt_numbers: [1, 2, 3],
      items_total: ITEMS,
      probe_set_version: PROBE_SET_VERSION,
    })
    expect((row.reported as { reported: { id: string } }).reported.id).toBe('sim')
    const byAttempt = row.items_by_attempt as Record<string, number>
    expect(Object.values(byAttempt).reduce((a, b) => a + b, 0)).toBe(ITEMS)
    for (const a of ['1', '2', '3']) expect(byAttempt[a]).toBeGreaterThan(0)
    // The verdict, whatever it is, with each probe's prompt, expectation and answer.
    const probes = row.probes as { probe: string; answer?: string; pass: boolean; expected: string }[]
    expect(probes.map((p) => p.probe)).toEqual(probeSet('READY').map((p) => p.id))
    for (const p of probes) expect(typeof p.answer).toBe('string')
    expect(row.verdict_pass).toBe(probes.every((p) => p.pass))
    const bench = row.benchmark as { iterations: { iteration: number; requests: number; concurrency: number }[] }
    expect(bench.iterations.map((i) => i.iteration)).toEqual([1, 2, 3])
    for (const i of bench.iterations) expect(i.concurrency).toBe(4)
    // Each item recorded once, and each probe answered once by the engine across the three attempts.
    expect(await itemCount(runId)).toBe(ITEMS)
    for (const p of probeSet('READY')) expect(proxy.answered.get(p.chat), p.id).toBe(1)
    expect([...proxy.classes]).toEqual(['background'])

    // The latest value: the benchmark ConfigMap holds this run.
    const core = env.kc.makeApiClient(CoreV1Api)
    const cm = await core.readNamespacedConfigMap({ name: 'flexinfer-benchmarks-sim', namespace: env.namespace })
    expect(cm.data?.runId).toBe(runId)
    expect(cm.data?.attempts).toBe('3')
    expect(JSON.parse(cm.data?.['result.json'] ?? '{}').probes).toHaveLength(probes.length)
  }, 180_000)

  it('without PostgreSQL resumes from the ConfigMap of the run, removed once the artifact is written', async () => {
    const runId = `run-${randomBytes(4).toString('hex')}`
    const core = env.kc.makeApiClient(CoreV1Api)
    const progress = async () => {
      try {
        const cm = await core.readNamespacedConfigMap({ name: `flexinfer-eval-run-${runId}`, namespace: env.namespace })
        return Object.keys(cm.data ?? {}).filter((k) => k.startsWith('item_')).length
      } catch (err) {
        if (isApiError(err, 404)) return 0
        throw err
      }
    }
    const first = startAttempt(runId, 1, {})
    const t1 = await preempt(first, async () => (await progress()) >= 4)
    expect(t1.done).toBe(await progress())
    const second = startAttempt(runId, 2, {})
    const end = await second.exited
    expect(end.code, second.log()).toBe(0)
    expect(await progress()).toBe(0)
    await expect(
      core.readNamespacedConfigMap({ name: `flexinfer-eval-run-${runId}`, namespace: env.namespace }),
    ).rejects.toMatchObject({ code: 404 })
    const cm = await core.readNamespacedConfigMap({ name: 'flexinfer-benchmarks-sim', namespace: env.namespace })
    expect(cm.data?.runId).toBe(runId)
    const result = JSON.parse(cm.data?.['result.json'] ?? '{}')
    expect(result.attempts).toEqual([1, 2])
    expect(result.items.total).toBe(ITEMS)
    expect(result.items.byAttempt['1']).toBe(t1.done)
    // A late duplicate of a finished run does nothing again.
    const late = startAttempt(runId, 2, {})
    expect((await late.exited).code, late.log()).toBe(0)
    const again = await core.readNamespacedConfigMap({ name: 'flexinfer-benchmarks-sim', namespace: env.namespace })
    expect(again.metadata?.resourceVersion).toBe(cm.metadata?.resourceVersion)
    await expect(
      core.readNamespacedConfigMap({ name: `flexinfer-eval-run-${runId}`, namespace: env.namespace }),
    ).rejects.toMatchObject({ code: 404 })
  }, 120_000)
})
