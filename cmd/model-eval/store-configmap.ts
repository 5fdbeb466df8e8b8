// The stores that need nothing installed, only a namespaced Role (get, create, update, delete on configmaps):
// - the run's progress, without PostgreSQL: the ConfigMap `flexinfer-eval-run-<run id>`, one key per recorded item
//   and the attempts that started, updated by compare-and-set on its resourceVersion (the first record of an item
//   wins, a second is a duplicate), deleted once the artifact is written;
// - the latest value: the ConfigMap `flexinfer-benchmarks-<model>`, replaced by each run (history is PostgreSQL's).
// A ConfigMap holds at most 1 MiB: the progress keeps at most MAX_PROGRESS_BYTES of records; past it, records are
// kept in this process only (logged once): the run still completes, but an item recorded past the limit is done
// again if the attempt is preempted.
import type { CoreV1Api, V1ConfigMap } from '@kubernetes/client-node'
import { statusCode } from '../../pkg/kube/errors.js'
import { type ModelArtifact, modelArtifacts } from './artifact.js'
import type { ArtifactSink, ProgressStore } from './attempt.js'
import type { AssembledRun, ItemRecord } from './items.js'
import type { Settings } from './settings.js'

export const MAX_PROGRESS_BYTES = 900 * 1024
const MAX_CAS_TRIES = 8
const MANAGED = { 'app.kubernetes.io/managed-by': 'model-eval' }

export const progressName = (runId: string) => `flexinfer-eval-run-${runId}`
export const benchmarkName = (model: string) => `flexinfer-benchmarks-${model}`
/** ConfigMap keys allow [-._a-zA-Z0-9]; model names have no `_`, so `_` for the id's `/` is unambiguous. */
const itemKey = (id: string) => `item_${id.replaceAll('/', '_')}`

const sizeOf = (data: Record<string, string>) =>
  Object.entries(data).reduce((n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(v), 0)

function parseProgress(cm: V1ConfigMap | null) {
  const data = cm?.data ?? {}
  const records: ItemRecord[] = []
  for (const [k, v] of Object.entries(data)) {
    if (!k.startsWith('item_')) continue
    try {
      records.push(JSON.parse(v) as ItemRecord)
    } catch {
      // A key someone edited by hand: that item is done again, which is safe.
    }
  }
  let attempts: number[] = []
  try {
    attempts = JSON.parse(data.attempts ?? '[]')
  } catch {}
  return { records, attempts }
}

export class ConfigMapStores implements ProgressStore {
  private readonly overflow: ItemRecord[] = []
  private warned = false

  constructor(
    private readonly core: CoreV1Api,
    private readonly namespace: string,
    private readonly settings: Settings,
    private readonly log: (line: string) => void,
    private readonly maxProgressBytes = MAX_PROGRESS_BYTES,
  ) {}

  private async read(name: string): Promise<V1ConfigMap | null> {
    try {
      return await this.core.readNamespacedConfigMap({ name, namespace: this.namespace })
    } catch (err) {
      if (statusCode(err) === 404) return null
      throw err
    }
  }

  /** Read, change, write back on the same resourceVersion; a conflict reads again (bounded). */
  private async update<T>(
    name: string,
    change: (data: Record<string, string>) => T | undefined,
  ): Promise<T | undefined> {
    for (let i = 0; i < MAX_CAS_TRIES; i++) {
      const cm = await this.read(name)
      const data = { ...(cm?.data ?? {}) }
      const out = change(data)
      if (out === undefined) return undefined
      try {
        if (cm) {
          await this.core.replaceNamespacedConfigMap({
            name,
            namespace: this.namespace,
            body: { ...cm, data },
          })
        } else {
          await this.core.createNamespacedConfigMap({
            namespace: this.namespace,
            body: { metadata: { name, namespace: this.namespace, labels: MANAGED }, data },
          })
        }
        return out
      } catch (err) {
        if (statusCode(err) === 409) continue
        throw err
      }
    }
    throw new Error(`ConfigMap ${this.namespace}/${name}: still conflicting after ${MAX_CAS_TRIES} tries`)
  }

  async begin(runId: string, attempt: number) {
    await this.update(progressName(runId), (data) => {
      const { attempts } = parseProgress({ data })
      if (attempts.includes(attempt)) return undefined
      data.runId = runId
      data.attempts = JSON.stringify([...attempts, attempt].sort((a, b) => a - b))
      return true
    })
    const { records, attempts } = await this.records(runId)
    return { records, attempts, published: await this.hasPublished(runId) }
  }

  /** Every model's benchmark ConfigMap holds this run: its artifact is written. */
  async hasPublished(runId: string): Promise<boolean> {
    for (const m of this.settings.models)
      if ((await this.read(benchmarkName(m.name)))?.data?.runId !== runId) return false
    return true
  }

  async record(runId: string, record: ItemRecord): Promise<boolean> {
    const key = itemKey(record.id)
    const value = JSON.stringify(record)
    let full = false
    const added = await this.update(progressName(runId), (data) => {
      if (key in data) return false
      if (sizeOf(data) + key.length + Buffer.byteLength(value) > this.maxProgressBytes) {
        full = true
        return undefined
      }
      data[key] = value
      return true
    })
    if (!full) return added ?? false
    if (!this.warned) {
      this.warned = true
      this.log(
        `the progress ConfigMap ${progressName(runId)} reached ${this.maxProgressBytes} bytes: further items are kept in this attempt only and are done again after a preemption (configure DATABASE_URL to keep them all)`,
      )
    }
    if (this.overflow.some((r) => r.id === record.id)) return false
    this.overflow.push(record)
    return true
  }

  async records(runId: string) {
    const { records, attempts } = parseProgress(await this.read(progressName(runId)))
    return { records: [...records, ...this.overflow.filter((o) => !records.some((r) => r.id === o.id))], attempts }
  }

  async finish(runId: string): Promise<void> {
    try {
      await this.core.deleteNamespacedConfigMap({ name: progressName(runId), namespace: this.namespace })
    } catch (err) {
      if (statusCode(err) !== 404) throw err
    }
  }

  /** The latest value per model: replaced unless it already holds this run. */
  benchmarkSink(): ArtifactSink {
    return {
      name: 'configmap',
      publish: async (run: AssembledRun) => {
        let wrote = false
        for (const artifact of modelArtifacts(run, this.settings)) {
          const out = await this.update(benchmarkName(artifact.model), (data) => {
            if (data.runId === run.runId) return undefined
            for (const k of Object.keys(data)) delete data[k]
            Object.assign(data, benchmarkData(artifact))
            return true
          })
          wrote ||= out === true
        }
        return wrote
      },
    }
  }
}

/** The benchmark ConfigMap's keys: the headline figures readable with kubectl, and the whole artifact as JSON. */
export function benchmarkData(a: ModelArtifact): Record<string, string> {
  return {
    runId: a.runId,
    model: a.model,
    engine: a.engine,
    finishedAt: a.finishedAt,
    probeSetVersion: a.probeSetVersion,
    verdict: a.verdict.pass ? 'pass' : 'fail',
    ttftP50Ms: String(a.benchmark.ttftMs.p50),
    ttftP99Ms: String(a.benchmark.ttftMs.p99),
    outputTokensPerSecond: String(a.benchmark.outputTokensPerSecond),
    latencyP50Ms: String(a.benchmark.latencyMs.p50),
    latencyP99Ms: String(a.benchmark.latencyMs.p99),
    attempts: String(a.attempts.length),
    concurrency: String(a.concurrency.configured),
    ...(a.concurrency.gateMaxInFlight === null ? {} : { gateMaxInFlight: String(a.concurrency.gateMaxInFlight) }),
    'result.json': JSON.stringify(a),
  }
}
