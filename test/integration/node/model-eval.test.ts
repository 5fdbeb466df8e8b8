// Useful work end to end, on the real node: a ModelBackfill referencing the example model-eval-gauntlet template (as
// shipped, only its namespace and image changed) runs the release image's model-eval in a pod on the pod network,
// through the background gate the controller injects, against the real engine (llama.cpp serving the
// instruction-tuned SmolLM2 over chat), with PostgreSQL reachable from the pod. Foreground requests preempt it twice
// mid-run; the third attempt finishes the run. Checked against what the engine was sent (a counting relay in front
// of it, trusting nothing of the workload's): one row for the run with every item and the three attempts, the
// verdict with its evidence whatever it is (a 135M model may fail probes), the benchmark's concurrency beside the
// gate's cap, the benchmark ConfigMap holding the run, and no probe answered twice.
import { randomBytes } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createUser } from '@nats-io/nkeys'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAllDocuments } from 'yaml'
import { type Runner, startRunner } from '../../../cmd/manager/runner.js'
import { probeSet } from '../../../cmd/model-eval/probes.js'
import {
  ANNOTATION_GATE_ENDPOINT_ENV,
  ANNOTATION_GATE_ENGINE,
  ANNOTATION_GATE_MAX_IN_FLIGHT,
  GATE_SECRET,
  GATE_SECRET_KEY,
} from '../../../pkg/core/gate.js'
import { repoRoot } from '../../env/binaries.js'
import { runOk } from '../../env/exec.js'
import { nodeUnavailableReason } from '../../env/node.js'
import { CountingProxy } from '../../support/counting-proxy.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { type NodeEnv, startNodeEnv } from './node-support.js'

const unavailable = nodeUnavailableReason()
const TEMPLATE = 'model-eval-gauntlet'
const BACKFILL = 'eval-smollm2'
const MODEL = 'smollm2'
const ITERS = 3
const ITEMS = 1 + probeSet('READY').length + ITERS
const BATCH_SIZE = 4
const GATE_CAP = 2

/** The columns of model_eval_runs this test reads (cmd/model-eval/store-postgres.ts). */
interface RunRow {
  run_id: string
  reported: { reported: { id: string }; props: { model_path?: unknown } }
  gate: unknown
  items_by_attempt: Record<string, number>
  probes: { probe: string; answer?: string; pass: boolean; error?: string }[]
  verdict_pass: boolean
  benchmark: { outputTokensPerSecond: number; iterations: { iteration: number; requests: number; failed: number }[] }
}

/** The parts of the example's documents the test rewrites. */
interface ExampleDoc {
  metadata: { namespace?: string }
  subjects?: { namespace?: string }[]
  spec?: { jobTemplate?: { spec?: { template?: { spec?: { containers?: Record<string, unknown>[] } } } } }
}

describe.skipIf(unavailable)('model-eval on the real node, through the gate, preempted twice', () => {
  let ne: NodeEnv
  let runner: Runner
  let world: BackfillWorld
  let proxy: CountingProxy
  let sql: postgres.Sql
  let served: string

  beforeAll(async () => {
    ne = await startNodeEnv(`t-model-eval-${randomBytes(3).toString('hex')}`, {
      appImage: true,
      postgres: true,
      engine: { apis: ['chat'] },
    })
    const app = ne.node.images.app
    if (!app) throw new Error('no project image: deploy/images/build.sh --app (npm run images) has not been run')
    const chat = ne.env.engine?.servers.find((s) => s.api === 'chat')
    const pg = ne.env.postgres
    if (!chat || !pg?.nodeUrl || !ne.env.natsNodeUrl)
      throw new Error('the environment lacks its engine, PostgreSQL or NATS relay')
    served = chat.model
    sql = postgres(pg.url, { max: 2, onnotice: () => {} })
    // The relay the pods' requests go through to the engine: on the bridge address, where pods reach the machine.
    proxy = new CountingProxy(chat.url)
    const proxyUrl = await proxy.listen(ne.node.hostIp)
    const natsAt = new URL(ne.env.natsNodeUrl)
    runner = await startRunner({
      natsUrl: ne.env.natsUrl,
      kubeconfig: ne.kc,
      watch: true,
      namespaces: [ne.namespace],
      instance: `t${randomBytes(4).toString('hex')}`,
      // As the chart's gate.enabled sets it: this release's image, NATS as the user's namespace reaches it.
      gate: { image: app.ref, natsUrl: `nats://gate@${natsAt.host}` },
    })
    world = new BackfillWorld(ne.kc, ne.namespace, ne.nc)

    // The example template as shipped; only its namespace, and the image (imported into the node, not pulled).
    const example = await readFile(join(repoRoot, 'deploy/examples/model-eval-gauntlet.yaml'), 'utf8')
    const docs = parseAllDocuments(example).map((d) => d.toJS() as ExampleDoc)
    for (const doc of docs) {
      doc.metadata.namespace = ne.namespace
      for (const s of doc.subjects ?? []) s.namespace = ne.namespace
      const container = doc.spec?.jobTemplate?.spec?.template?.spec?.containers?.[0]
      if (container) Object.assign(container, { image: app.ref, imagePullPolicy: 'Never' })
    }
    const kubectl = (args: string[], input?: string) =>
      runOk(ne.env.binaries.kubectl, ['--kubeconfig', ne.env.kubeconfigPath, '-n', ne.namespace, ...args], { input })
    await kubectl(['apply', '-f', '-'], docs.map((d) => JSON.stringify(d)).join('\n'))
    // The gate's NATS identity (an NKey seed; this environment's NATS takes any) and the workload's PostgreSQL.
    await kubectl([
      'create',
      'secret',
      'generic',
      GATE_SECRET,
      `--from-literal=${GATE_SECRET_KEY}=${new TextDecoder().decode(createUser().getSeed())}`,
    ])
    await kubectl(['create', 'secret', 'generic', 'model-eval-postgres', `--from-literal=url=${pg.nodeUrl}`])

    await world.model(MODEL, { node: ne.node.name })
    await world.backfill(
      BACKFILL,
      {
        modelRef: MODEL,
        templateRef: TEMPLATE,
        idleFor: '2s',
        // The guide's way to specialise the template: the endpoint, the model as the engine serves it, small settings.
        env: {
          OPENAI_BASE_URL: `${proxyUrl}/v1`,
          MODELS: `${served}=llamacpp`,
          GAUNTLET_API: 'chat',
          BATCH_SIZE: String(BATCH_SIZE),
          ITERS: String(ITERS),
          MIN_DURATION: '3s',
          BENCH_MAX_TOKENS: '16',
        },
      },
      {
        [ANNOTATION_GATE_ENDPOINT_ENV]: 'OPENAI_BASE_URL',
        [ANNOTATION_GATE_ENGINE]: 'llamacpp',
        [ANNOTATION_GATE_MAX_IN_FLIGHT]: String(GATE_CAP),
      },
    )
  }, 300_000)

  afterAll(async () => {
    world?.close()
    await runner?.stop()
    await sql?.end({ timeout: 2 })
    await proxy?.stop()
    await ne?.stop()
  }, 120_000)

  const recorded = async (attempt?: number) =>
    (
      await sql<{ n: number }[]>`select count(*)::int as n from model_eval_items
        where ${attempt === undefined ? sql`true` : sql`attempt = ${attempt}`}`.catch(() => [{ n: 0 }])
    )[0]?.n ?? 0

  /** Once `attempt` has recorded `items` (and the run is not done), one foreground request; then the attempt ends. */
  async function preemptAfter(attempt: number, items: number) {
    await waitUntil(
      `attempt ${attempt} to record ${items} item(s)`,
      async () => ((await recorded(attempt)) >= items ? true : undefined),
      120_000,
    )
    expect(await recorded()).toBeLessThan(ITEMS)
    await world.foreground(MODEL)
    await world.waitForStatus(
      BACKFILL,
      `attempt ${attempt} cancelled by foreground demand`,
      (s) => (s.attempts ?? 0) >= attempt && s.phase !== 'Running',
    )
  }

  it('the third attempt finishes the run: one row with every item and its attempts, each probe answered once', {
    timeout: 300_000,
  }, async () => {
    await preemptAfter(1, 2)
    await preemptAfter(2, 1)
    const done = await world.waitForStatus(BACKFILL, 'the run done', (s) => s.phase === 'Succeeded', 180_000)
    expect(done.status?.attempts).toBe(3)
    const state = await world.state(BACKFILL)
    expect(state?.counters.preemptions).toEqual({ foreground: 2 })

    const rows = await sql`select * from model_eval_runs`
    expect(rows).toHaveLength(1)
    const row = rows[0] as unknown as RunRow
    expect(row).toMatchObject({
      model: served,
      engine: 'llamacpp',
      attempts: 3,
      attempt_numbers: [1, 2, 3],
      items_total: ITEMS,
      concurrency: BATCH_SIZE,
      gate_max_in_flight: GATE_CAP,
    })
    expect(row.gate).toMatchObject({ engine: 'llamacpp', maxInFlight: GATE_CAP })
    // The model as the engine reports it, and llama.cpp's model file.
    expect(row.reported.reported.id).toBe(served)
    expect(String(row.reported.props.model_path)).toMatch(/\.gguf$/)
    const byAttempt = row.items_by_attempt
    expect(Object.values(byAttempt).reduce((a, b) => a + b, 0)).toBe(ITEMS)
    for (const a of ['1', '2', '3']) expect(byAttempt[a], JSON.stringify(byAttempt)).toBeGreaterThan(0)
    // The verdict, whatever it is, with each probe's evidence; no probe recorded as a failure of the closing gate.
    const probes = row.probes
    expect(probes.map((p) => p.probe)).toEqual(probeSet('READY').map((p) => p.id))
    for (const p of probes) {
      expect(typeof p.answer, JSON.stringify(p)).toBe('string')
      expect(p.error).toBeUndefined()
    }
    expect(row.verdict_pass).toBe(probes.every((p) => p.pass))
    const bench = row.benchmark
    expect(bench.iterations.map((i) => i.iteration)).toEqual([1, 2, 3])
    for (const i of bench.iterations) {
      expect(i.requests).toBeGreaterThan(0)
      expect(i.failed, JSON.stringify(i)).toBe(0)
    }
    // Every item once in the store; every probe answered once by the engine across the three attempts.
    expect(await recorded()).toBe(ITEMS)
    for (const p of probeSet('READY')) expect(proxy.answered.get(p.chat), p.id).toBe(1)
    expect([...proxy.classes]).toEqual(['background'])

    // The latest value: the benchmark ConfigMap holds this run.
    const cm = await world.core.readNamespacedConfigMap({
      name: `flexinfer-benchmarks-${served}`,
      namespace: ne.namespace,
    })
    expect(cm.data).toMatchObject({
      runId: row.run_id,
      attempts: '3',
      concurrency: String(BATCH_SIZE),
      gateMaxInFlight: String(GATE_CAP),
    })
    const status = await world.getBackfill(BACKFILL)
    console.log(
      `[model-eval] run ${row.run_id}: ${ITEMS} items by attempt ${JSON.stringify(byAttempt)}, verdict ${row.verdict_pass ? 'pass' : 'fail'} ` +
        `(${probes.filter((p) => p.pass).length}/${probes.length} probes), ${JSON.stringify(row.benchmark.outputTokensPerSecond)} tokens/s ` +
        `at concurrency ${BATCH_SIZE} through a gate of ${GATE_CAP}; status: ${status?.status?.message}`,
    )
  })
})
