// A run's work as a list of items, and the bookkeeping that lets it survive preemption — pure, no I/O. Every item has
// a stable id (the same in every attempt of a run); a completed item is recorded once, the first record winning, so
// a duplicate attempt or a retried write cannot count it twice; an attempt does only the items its run has not
// recorded; the artifact is assembled from the records alone (never from the clock or the attempt that assembles
// it), so any attempt that assembles it assembles the same one and the stores can take the first write and ignore
// the rest.

export type ItemKind = 'info' | 'probe' | 'bench'

export interface ItemSpec {
  /** `<model>/info`, `<model>/probe/<probe id>`, `<model>/bench/<n>`: stable across the attempts of a run. */
  id: string
  model: string
  kind: ItemKind
  /** The probe's id or the iteration's number. */
  key: string
}

export interface ItemRecord {
  id: string
  /** The attempt that completed it. */
  attempt: number
  /** ISO time the item started and its duration: the timings of the run. */
  startedAt: string
  ms: number
  result: unknown
}

/** The items of a run in the order they are done: per model its info, its probes, then its benchmark iterations. */
export function planItems(models: readonly string[], probeIds: readonly string[], iters: number): ItemSpec[] {
  const out: ItemSpec[] = []
  for (const model of models) {
    out.push({ id: `${model}/info`, model, kind: 'info', key: 'info' })
    for (const p of probeIds) out.push({ id: `${model}/probe/${p}`, model, kind: 'probe', key: p })
    for (let i = 1; i <= iters; i++) out.push({ id: `${model}/bench/${i}`, model, kind: 'bench', key: String(i) })
  }
  return out
}

/** What the records already hold, by id, the first record of an id winning (a later one is a duplicate). */
export function byId(records: readonly ItemRecord[]): Map<string, ItemRecord> {
  const out = new Map<string, ItemRecord>()
  for (const r of records) if (!out.has(r.id)) out.set(r.id, r)
  return out
}

/** The items of the plan the run has not recorded, in plan order. */
export function remaining(plan: readonly ItemSpec[], records: readonly ItemRecord[]): ItemSpec[] {
  const done = byId(records)
  return plan.filter((i) => !done.has(i.id))
}

/** Adds a record unless its id is recorded: `added` false means a duplicate, and the records are unchanged. */
export function addRecord(
  records: readonly ItemRecord[],
  record: ItemRecord,
): { records: ItemRecord[]; added: boolean } {
  if (records.some((r) => r.id === record.id)) return { records: [...records], added: false }
  return { records: [...records, record], added: true }
}

export function isComplete(plan: readonly ItemSpec[], records: readonly ItemRecord[]): boolean {
  return remaining(plan, records).length === 0
}

export interface AssembledRun {
  runId: string
  /** The plan's items with their records, in plan order. */
  items: (ItemSpec & { record: ItemRecord })[]
  /** The attempts that started for the run, ascending (each once). */
  attempts: number[]
  /** The earliest item start and the latest item end: when the run's work happened. */
  startedAt: string
  finishedAt: string
  /** Item counts by the attempt that completed them. */
  itemsByAttempt: Record<string, number>
}

/**
 * The run's items joined with their records, or undefined while any is missing. Deterministic in its inputs: the
 * same records and attempts give the same value whichever attempt assembles it.
 */
export function assemble(
  runId: string,
  plan: readonly ItemSpec[],
  records: readonly ItemRecord[],
  attempts: readonly number[],
): AssembledRun | undefined {
  const done = byId(records)
  const items: AssembledRun['items'] = []
  for (const spec of plan) {
    const record = done.get(spec.id)
    if (!record) return undefined
    items.push({ ...spec, record })
  }
  let start = Number.POSITIVE_INFINITY
  let end = Number.NEGATIVE_INFINITY
  const itemsByAttempt: Record<string, number> = {}
  for (const { record } of items) {
    const t = Date.parse(record.startedAt)
    start = Math.min(start, t)
    end = Math.max(end, t + record.ms)
    itemsByAttempt[record.attempt] = (itemsByAttempt[record.attempt] ?? 0) + 1
  }
  const seen = new Set(attempts)
  for (const { record } of items) seen.add(record.attempt)
  const iso = (t: number) => new Date(Number.isFinite(t) ? t : 0).toISOString()
  return {
    runId,
    items,
    attempts: [...seen].sort((a, b) => a - b),
    startedAt: iso(start),
    finishedAt: iso(end),
    itemsByAttempt,
  }
}
