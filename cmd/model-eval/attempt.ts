// One attempt of a run: find what the run already did, do only the rest, record each item the moment it completes,
// and assemble the run's artifact once every item is recorded. A stop (SIGTERM) ends the item in flight unrecorded
// — its partial result is what a preemption throws away — and nothing after it starts. The stores are behind a
// small port so the property test drives this same code against a model of them with crashes injected anywhere.
import { type AssembledRun, assemble, type ItemRecord, type ItemSpec, remaining } from './items.js'

/** Where a run's progress lives between its attempts (the ConfigMap of the run, or PostgreSQL's items table). */
export interface ProgressStore {
  /**
   * Notes that `attempt` started and returns what the run holds: its records, the attempts that started (this one
   * included) and whether its artifact is already written.
   */
  begin(runId: string, attempt: number): Promise<{ records: ItemRecord[]; attempts: number[]; published: boolean }>
  /** Records an item unless it is recorded: true when this call added it. */
  record(runId: string, record: ItemRecord): Promise<boolean>
  /** Re-reads the records (another attempt of the run may have recorded some). */
  records(runId: string): Promise<{ records: ItemRecord[]; attempts: number[] }>
  /** After every sink has the artifact: drop what only resumption needed (the ConfigMap of the run). */
  finish(runId: string): Promise<void>
}

/** Where the artifact goes: the benchmark ConfigMap (latest value), PostgreSQL's row per run. */
export interface ArtifactSink {
  readonly name: string
  /** Writes the run's artifact unless this sink has it: true when this call wrote it. */
  publish(run: AssembledRun): Promise<boolean>
}

export interface AttemptResult {
  done: number
  total: number
  /** Items this attempt completed and recorded. */
  recordedHere: number
  /** Items that completed here but another attempt had recorded first. */
  duplicates: number
  stopped: boolean
  /** The sinks this attempt wrote the artifact to (empty when another attempt had, or the run is not done). */
  published: string[]
  complete: boolean
}

export interface AttemptDeps {
  runId: string
  attempt: number
  plan: readonly ItemSpec[]
  progress: ProgressStore
  sinks: readonly ArtifactSink[]
  /** Runs one item; a stop rejects it (the item is then not recorded). */
  execute(item: ItemSpec, done: ReadonlyMap<string, ItemRecord>): Promise<unknown>
  signal: AbortSignal
  now?: () => number
  /** After each item this attempt records: what a stop reports without another round trip to a store. */
  onProgress?(done: number, total: number): void
}

export async function runAttempt(d: AttemptDeps): Promise<AttemptResult> {
  const now = d.now ?? Date.now
  const begun = await d.progress.begin(d.runId, d.attempt)
  const done = new Map(begun.records.map((r) => [r.id, r]))
  const result: AttemptResult = {
    done: d.plan.filter((i) => done.has(i.id)).length,
    total: d.plan.length,
    recordedHere: 0,
    duplicates: 0,
    stopped: false,
    published: [],
    complete: false,
  }
  // Published already (a crash came between the sinks, or a duplicate attempt started late): no item is done again;
  // the sinks that lack the artifact get it below from the records, where they are still kept.
  for (const item of begun.published ? [] : remaining(d.plan, begun.records)) {
    if (d.signal.aborted) break
    const started = now()
    let value: unknown
    try {
      value = await d.execute(item, done)
    } catch (err) {
      if (d.signal.aborted) break
      throw err
    }
    // A result that came back after the stop may be cut short by it: thrown away like the item in flight.
    if (d.signal.aborted) break
    const record: ItemRecord = {
      id: item.id,
      attempt: d.attempt,
      startedAt: new Date(started).toISOString(),
      ms: Math.max(0, Math.round(now() - started)),
      result: value,
    }
    if (await d.progress.record(d.runId, record)) {
      result.recordedHere++
      done.set(item.id, record)
    } else result.duplicates++
    result.done = d.plan.filter((i) => done.has(i.id)).length
    d.onProgress?.(result.done, result.total)
  }
  result.stopped = d.signal.aborted
  const latest = await d.progress.records(d.runId)
  for (const r of latest.records) if (!done.has(r.id)) done.set(r.id, r)
  result.done = d.plan.filter((i) => done.has(i.id)).length
  if (result.stopped) return result
  const run = assemble(d.runId, d.plan, [...done.values()], latest.attempts)
  if (!run) {
    if (!begun.published) return result
    // A late attempt of a finished run: whatever its begin left for resumption goes again.
    await d.progress.finish(d.runId)
    return Object.assign(result, { complete: true, done: result.total })
  }
  for (const sink of d.sinks) if (await sink.publish(run)) result.published.push(sink.name)
  await d.progress.finish(d.runId)
  result.complete = true
  return result
}
