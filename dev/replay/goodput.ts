// Goodput of a backfill workload made of items, over the windows it was given the model, under two semantics: resumable
// (an attempt that starts finds the items its run already completed and does only the rest: this project) and
// restart-from-scratch (a preempted attempt loses its run's items and the next attempt starts the run again:
// FlexInfer's semantics). Pure.
//
// The workload: runs of `itemsPerRun` items of `itemMs` each, back to back (a finished run is followed at once by the
// next, under both semantics alike, so the comparison is about preemption alone). Every attempt first spends
// `attemptStartMs` (container start, finding its run's progress) before its first item. An item is done only when
// whole: the one in flight when a preemption comes is thrown away under both semantics.
//
// Every window's time ends up in exactly one bucket: kept (item-seconds still usable at the end: recorded items for
// resumable, items of completed runs for restart), thrown (lost to a preemption), open (in the attempt still running
// at the end, not yet kept: the item in flight, and for restart the unfinished run's items) or overhead (attempt
// starts). So kept + thrown + open + overhead = the windows' total.

export interface Window {
  start: number
  end: number
  /** Ended by a preemption (false: still running when the trace ended). */
  preempted: boolean
}

export interface Workload {
  itemMs: number
  itemsPerRun: number
  /** Spent by every attempt before its first item (default 0). */
  attemptStartMs?: number
}

export interface Goodput {
  /** Whole runs completed. */
  runs: number
  /** Items completed, counted once each (for restart, also those later thrown away with their run). */
  items: number
  keptMs: number
  thrownMs: number
  openMs: number
  overheadMs: number
  /** The windows' total: kept + thrown + open + overhead. */
  windowMs: number
}

export interface GoodputComparison {
  workload: Required<Workload>
  windows: number
  preemptions: number
  resumable: Goodput
  restart: Goodput
}

/** A workload's settings checked: clear errors for what cannot be modelled. */
export function checkWorkload(w: Workload): Required<Workload> {
  const attemptStartMs = w.attemptStartMs ?? 0
  if (!Number.isFinite(w.itemMs) || w.itemMs <= 0) throw new Error(`item duration must be positive (got ${w.itemMs})`)
  if (!Number.isInteger(w.itemsPerRun) || w.itemsPerRun < 1) {
    throw new Error(`items per run must be a whole number of at least 1 (got ${w.itemsPerRun})`)
  }
  if (!Number.isFinite(attemptStartMs) || attemptStartMs < 0) {
    throw new Error(`attempt start must be zero or more (got ${attemptStartMs})`)
  }
  return { itemMs: w.itemMs, itemsPerRun: w.itemsPerRun, attemptStartMs }
}

const empty = (): Goodput => ({ runs: 0, items: 0, keptMs: 0, thrownMs: 0, openMs: 0, overheadMs: 0, windowMs: 0 })

/** One window's split: the time before the first item, the whole items that fit, the part of an item in flight. */
function split(win: Window, w: Required<Workload>) {
  const length = Math.max(0, win.end - win.start)
  const overheadMs = Math.min(length, w.attemptStartMs)
  const working = length - overheadMs
  const items = Math.floor(working / w.itemMs)
  return { length, overheadMs, items, inFlightMs: working - items * w.itemMs }
}

/** Resumable: every completed item is recorded under the run's identity and counts towards the run across attempts. */
export function resumable(windows: readonly Window[], workload: Workload): Goodput {
  const w = checkWorkload(workload)
  const g = empty()
  for (const win of windows) {
    const s = split(win, w)
    g.windowMs += s.length
    g.overheadMs += s.overheadMs
    g.items += s.items
    g.keptMs += s.items * w.itemMs
    if (win.preempted) g.thrownMs += s.inFlightMs
    else g.openMs += s.inFlightMs
  }
  g.runs = Math.floor(g.items / w.itemsPerRun)
  return g
}

/** Restart-from-scratch: an attempt keeps only the runs it completed itself; a preemption throws away the rest. */
export function restart(windows: readonly Window[], workload: Workload): Goodput {
  const w = checkWorkload(workload)
  const runMs = w.itemMs * w.itemsPerRun
  const g = empty()
  for (const win of windows) {
    const s = split(win, w)
    const runs = Math.floor(s.items / w.itemsPerRun)
    const lost = (s.items - runs * w.itemsPerRun) * w.itemMs + s.inFlightMs
    g.windowMs += s.length
    g.overheadMs += s.overheadMs
    g.items += s.items
    g.runs += runs
    g.keptMs += runs * runMs
    if (win.preempted) g.thrownMs += lost
    else g.openMs += lost
  }
  return g
}

/** Both semantics over the same windows and workload. */
export function compareGoodput(windows: readonly Window[], workload: Workload): GoodputComparison {
  return {
    workload: checkWorkload(workload),
    windows: windows.length,
    preemptions: windows.filter((x) => x.preempted).length,
    resumable: resumable(windows, workload),
    restart: restart(windows, workload),
  }
}

/**
 * Where the kept part of one window ends under each semantics (it is always the window's first stretch after the
 * attempt start): what the figure draws as kept, the rest of the window being thrown away or open.
 */
export function keptUntil(win: Window, workload: Workload): { resumable: number; restart: number; workFrom: number } {
  const w = checkWorkload(workload)
  const s = split(win, w)
  const workFrom = win.start + s.overheadMs
  const runs = Math.floor(s.items / w.itemsPerRun)
  return {
    workFrom,
    resumable: workFrom + s.items * w.itemMs,
    restart: workFrom + runs * w.itemsPerRun * w.itemMs,
  }
}

/** Nearest-rank median of window lengths (null when none): what a run's length is compared with. */
export function medianWindowMs(windows: readonly Window[]): number | null {
  const sorted = windows.map((x) => Math.max(0, x.end - x.start)).sort((a, b) => a - b)
  if (!sorted.length) return null
  return sorted[Math.max(0, Math.ceil(sorted.length / 2) - 1)] as number
}
