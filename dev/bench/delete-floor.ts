// The control plane's floor for a preemption burst: how long this machine's kube-apiserver, etcd and
// controller-manager take to delete N running attempts' Jobs and pods when nothing of ours stands before the DELETEs
// — no NATS, no demand, no cancel handler, no bookkeeping, no watch but the measuring one. The Jobs are made as admit
// makes them (our labels, a controller-made pod each; no kubelet, so the pods stay Pending and go at once when
// deleted), then deleted all at once, alternating two ways per round:
//
//   batcher  cancel's own DELETE machinery (functions/cancel/batch.ts DeleteBatcher over pkg/kube/client.ts, 32 places),
//            every attempt handed to it at the same instant: what a burst costs once every cancel has arrived;
//   one      one DELETE of the Job collection and one of the pod collection (a label every Job and pod of the round
//            carries): the fewest requests Kubernetes allows, each deleted by the apiserver one after another.
//
// Deleted is as the benchmark sees it (dev/bench/deletion-watch.ts, in a process of its own): the Job's deletionTimestamp,
// every pod's deletionTimestamp or removal. A goal below this floor is one no change of ours reaches on this machine.
//
// `npm run bench:floor -- [N=500] [rounds=2]`; one JSON line on stdout (dev/bench/results/delete-floor.json),
// progress and the servers' logs in dev/bench/results/delete-floor.log. Run it alone and read the load it prints.
import { openSync, writeFileSync, writeSync } from 'node:fs'
import { mkdir } from 'node:fs/promises'
import { cpus, loadavg } from 'node:os'
import { join } from 'node:path'
import { BatchV1Api, CoreV1Api, KubeConfig } from '@kubernetes/client-node'
import { DeleteBatcher } from '../../functions/cancel/batch.js'
import { backfillLabelValue, LABEL_ATTEMPT, LABEL_BACKFILL } from '../../pkg/core/names.js'
import { Kube } from '../../pkg/kube/client.js'
import { Lane } from '../../pkg/lib/lane.js'
import { repoRoot } from '../../test/env/binaries.js'
import { startEnvironment, stopEnvironment } from '../../test/env/environment.js'
import { inParallel, sleep, waitFor } from '../../test/env/exec.js'
import { RemoteDeletionWatch } from './deletion-watch-process.js'
import { percentile } from './percentile.js'
import { apiserverRequestsVia, formatCpu, formatRequests, type PhaseSpend, phaseSpend } from './scale/measure.js'

const N = Number(process.argv[2] ?? 500)
const ROUNDS = Number(process.argv[3] ?? 2)
/**
 * cancel's DELETE places and Jobs per collection DELETE (functions/cancel/index.ts DELETE_WIDTH, batch.ts BATCH_MAX);
 * FLOOR_WIDTH and FLOOR_BATCH try others.
 */
const DELETE_WIDTH = Number(process.env.FLOOR_WIDTH ?? 32)
const BATCH_MAX = Number(process.env.FLOOR_BATCH ?? 8)
const ROUND_LABEL = 'bench.flexinfer.ai/floor-round'
const ALL_MODES = ['batcher', 'one'] as const
type Mode = (typeof ALL_MODES)[number]
/** FLOOR_MODES=batcher (or one): that way alone. */
const MODES = ALL_MODES.filter((m) => (process.env.FLOOR_MODES ?? ALL_MODES.join(',')).split(',').includes(m))

await mkdir(join(repoRoot, 'dev/bench/results'), { recursive: true })
const logFd = openSync(join(repoRoot, 'dev/bench/results/delete-floor.log'), 'w')
const log = (line: string) => writeSync(logFd, `[floor ${new Date().toISOString()}] ${line}\n`)
const load = () =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')

const environment = await startEnvironment({ log })
const kc = new KubeConfig()
kc.loadFromFile(environment.kubeconfigPath)
const core = kc.makeApiClient(CoreV1Api)
const batch = kc.makeApiClient(BatchV1Api)
const kube = new Kube(kc)
const apiserverRequests = apiserverRequestsVia(environment.binaries.kubectl, environment.kubeconfigPath)

/** A namespace takes Jobs once its default ServiceAccount exists. */
async function serviceAccount(namespace: string) {
  await waitFor('the default ServiceAccount', () => core.readNamespacedServiceAccount({ name: 'default', namespace }), {
    timeoutMs: 30_000,
  })
}

const results: Record<string, number | string> = {
  n: N,
  rounds: ROUNDS,
  width: DELETE_WIDTH,
  batch: BATCH_MAX,
  cores: cpus().length,
  load_before: load(),
}
const samples: Record<Mode, { jobs: number[]; pods: number[]; last: number[] }> = {
  batcher: { jobs: [], pods: [], last: [] },
  one: { jobs: [], pods: [], last: [] },
}
const cpuSums: Record<Mode, Record<string, number>> = { batcher: {}, one: {} }
const requestSums: Record<Mode, Record<string, number>> = { batcher: {}, one: {} }

try {
  let round = 0
  for (let r = 0; r < ROUNDS; r++) {
    // Alternating which goes first, as bench:ab does.
    const order: Mode[] = r % 2 === 0 ? [...MODES] : [...MODES].reverse()
    for (const mode of order) {
      round++
      const namespace = `floor-${round}`
      await core.createNamespace({ body: { metadata: { name: namespace } } })
      await serviceAccount(namespace)
      const watch = await RemoteDeletionWatch.start(repoRoot, environment.kubeconfigPath, namespace, logFd)
      try {
        const made = await makeJobs(namespace, String(round))
        const pods = new Map<string, string[]>()
        await waitFor(
          `a pod for each of ${N} Jobs`,
          async () => {
            for (const j of made) {
              if (pods.has(j.name)) continue
              const p = await watch.podsNow(j.name, 0)
              if (p.length) pods.set(j.name, p)
            }
            return pods.size === N ? true : undefined
          },
          // The Job controller makes ~7 pods a second here: 2,000 take about 5 minutes.
          { timeoutMs: Math.max(300_000, N * 400), intervalMs: 20 },
        )
        // Let the Job controller's own status writes for the new pods settle before the clock starts.
        await sleep(3000)
        log(`round ${round} (${mode}): ${N} Jobs with pods; load ${load()}`)
        const spend = phaseSpend(apiserverRequests)
        spend.begin()
        const at = Date.now()
        await deleteAll(mode, namespace, String(round), made)
        const sent = Date.now() - at
        await waitFor(
          'every Job and pod deleted',
          () =>
            made.every(
              (j) => watch.jobDeletedAt.has(j.name) && watch.podsDeletedAt(pods.get(j.name) ?? []) !== undefined,
            )
              ? true
              : undefined,
          { timeoutMs: 300_000, intervalMs: 20 },
        )
        const wall = Date.now() - at
        const { cpu, requests } = spend.end() as PhaseSpend
        const jobMs = made.map((j) => (watch.jobDeletedAt.get(j.name) as number) - at)
        const podMs = made.map((j) => (watch.podsDeletedAt(pods.get(j.name) ?? []) as number) - at)
        samples[mode].jobs.push(...jobMs)
        samples[mode].pods.push(...podMs)
        samples[mode].last.push(Math.max(...podMs))
        for (const [k, v] of Object.entries(cpu)) cpuSums[mode][k] = (cpuSums[mode][k] ?? 0) + v
        for (const [k, v] of Object.entries(requests)) requestSums[mode][k] = (requestSums[mode][k] ?? 0) + v
        log(
          `round ${round} (${mode}): requests answered after ${sent} ms, all gone after ${wall} ms; pods p50 ${percentile(podMs, 50)} / p99 ${percentile(podMs, 99)} ms; ${formatCpu(cpu)}; apiserver requests ${formatRequests(requests)}; load ${load()}`,
        )
      } finally {
        await watch.stop()
        await core.deleteNamespace({ name: namespace }).catch(() => undefined)
      }
    }
  }
  for (const mode of MODES) {
    const s = samples[mode]
    results[`${mode}_job_ms_p50`] = percentile(s.jobs, 50)
    results[`${mode}_job_ms_p99`] = percentile(s.jobs, 99)
    results[`${mode}_pod_ms_p50`] = percentile(s.pods, 50)
    results[`${mode}_pod_ms_p99`] = percentile(s.pods, 99)
    results[`${mode}_last_pod_ms`] = s.last.join(' / ')
    // CPU per round of every process (this one and its watch are `node`): the floor's cost on this machine.
    for (const [k, v] of Object.entries(cpuSums[mode])) {
      results[`${mode}_cpu_s_per_round_${k}`] = Math.round((v / ROUNDS) * 100) / 100
    }
    results[`${mode}_apiserver_requests_per_round`] = formatRequests(
      Object.fromEntries(Object.entries(requestSums[mode]).map(([verb, c]) => [verb, Math.round(c / ROUNDS)])),
    )
  }
  results.load_after = load()
  const line = JSON.stringify(results)
  writeFileSync(join(repoRoot, 'dev/bench/results/delete-floor.json'), `${line}\n`)
  process.stdout.write(`${line}\n`)
} finally {
  kube.close()
  await stopEnvironment(environment)
}

/** N Jobs in `namespace` labelled as admit labels an attempt's Job (and with the round's label, pods included). */
async function makeJobs(namespace: string, round: string) {
  const made: { name: string; uid: string; backfillValue: string; attemptValue: string }[] = []
  await inParallel(N, 8, async (i) => {
    const name = `floor-${i}-1`
    const backfillValue = backfillLabelValue(`floor-${i}`)
    const attemptValue = `a${i}`
    const labels = { [LABEL_BACKFILL]: backfillValue, [LABEL_ATTEMPT]: attemptValue, [ROUND_LABEL]: round }
    const job = await batch.createNamespacedJob({
      namespace,
      body: {
        metadata: { name, labels },
        spec: {
          backoffLimit: 0,
          template: {
            metadata: { labels },
            spec: { restartPolicy: 'Never', containers: [{ name: 'eval', image: 'busybox' }] },
          },
        },
      },
    })
    made.push({ name, uid: job.metadata?.uid as string, backfillValue, attemptValue })
  })
  return made
}

async function deleteAll(mode: Mode, namespace: string, round: string, made: Awaited<ReturnType<typeof makeJobs>>) {
  if (mode === 'one') {
    const labelSelector = `${ROUND_LABEL}=${round}`
    await Promise.all([
      batch.deleteCollectionNamespacedJob({
        namespace,
        labelSelector,
        propagationPolicy: 'Background',
        body: { propagationPolicy: 'Background' },
      }),
      core.deleteCollectionNamespacedPod({ namespace, labelSelector }),
    ])
    return
  }
  const batcher = new DeleteBatcher(kube, new Lane(DELETE_WIDTH), {
    deletePods: true,
    perNamespace: DELETE_WIDTH,
    max: BATCH_MAX,
  })
  await Promise.all(
    made.map((j) =>
      batcher.delete({
        namespace,
        jobName: j.name,
        uid: j.uid,
        backfillValue: j.backfillValue,
        attemptValue: j.attemptValue,
      }),
    ),
  )
}
