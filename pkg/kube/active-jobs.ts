// admit's contender gate asks, on every admission, which live backfill Jobs share the model or the node it is about
// to use (pkg/reconcile/observe.ts). Walking the watched copy of every backfill Job for that would make a
// burst of admissions quadratic in the running attempts (the scale profile in dev/bench/README.md). This index keeps the live ones by model, by node and by backfill label, updated by
// the watch's own events, so the question is three map lookups.
import { isActiveJob, jobView } from '../core/world.js'

/** One watch event: the object as it now is, or as it was when it went (`removed`). */
export type Change<T> = (object: T, removed: boolean) => void

interface Entry<T> {
  raw: T
  /** Order of first sight (a Job removed and seen again counts from then): near() answers in it. */
  seq: number
  buckets: string[]
}

const key = (namespace: string, name: string) => `${namespace}/${name}`
/** The three ways a Job can matter to an admission, one bucket key each (written by change(), read by near()). */
const onModel = (namespace: string, model: string) => `m\0${namespace}\0${model}`
const onNode = (node: string) => `n\0${node}`
const withLabel = (namespace: string, label: string) => `l\0${namespace}\0${label}`

export class ActiveJobs<T extends object> {
  private readonly entries = new Map<string, Entry<T>>()
  private readonly buckets = new Map<string, Set<string>>()
  /** Order of first sight per Job, kept while the Job exists in the copy (bounded by it). */
  private readonly seqOf = new Map<string, number>()
  private nextSeq = 0

  /** Feeds the index; pass it to the watch as its change listener. */
  readonly change: Change<T> = (object, removed) => {
    const v = jobView(object)
    if (!v.namespace || !v.name) return
    const k = key(v.namespace, v.name)
    const old = this.entries.get(k)
    if (old) {
      for (const b of old.buckets) this.unbucket(b, k)
      this.entries.delete(k)
    }
    if (removed) {
      this.seqOf.delete(k)
      return
    }
    let seq = this.seqOf.get(k)
    if (seq === undefined) {
      seq = this.nextSeq++
      this.seqOf.set(k, seq)
    }
    if (!isActiveJob(v)) return
    const buckets: string[] = []
    if (v.model) buckets.push(onModel(v.namespace, v.model))
    if (v.node) buckets.push(onNode(v.node))
    if (v.backfillLabel) buckets.push(withLabel(v.namespace, v.backfillLabel))
    for (const b of buckets) {
      let set = this.buckets.get(b)
      if (!set) {
        set = new Set()
        this.buckets.set(b, set)
      }
      set.add(k)
    }
    this.entries.set(k, { raw: object, seq, buckets })
  }

  private unbucket(bucket: string, k: string) {
    const set = this.buckets.get(bucket)
    if (!set) return
    set.delete(k)
    if (set.size === 0) this.buckets.delete(bucket)
  }

  /**
   * The live Jobs that could matter to an admission of backfill `label` in `namespace` on `model` (and the model's
   * `node`): those on the same model of the namespace, on the node, or carrying the backfill's label — in the order
   * first seen, as the watched copy lists the Jobs of one namespace (decide() names the first contender in its
   * message). Every Job observe() would pick as a contender or a stray from the whole list is among them; it applies
   * the same tests to these.
   */
  near(namespace: string, model: string | undefined, node: string | undefined, label: string | undefined): T[] {
    const keys = new Set<string>()
    const add = (b: string) => {
      for (const k of this.buckets.get(b) ?? []) keys.add(k)
    }
    if (model) add(onModel(namespace, model))
    if (node) add(onNode(node))
    if (label) add(withLabel(namespace, label))
    const found = [...keys].map((k) => this.entries.get(k) as Entry<T>)
    found.sort((a, b) => a.seq - b.seq)
    return found.map((e) => e.raw)
  }

  /** Live Jobs indexed (tests, metrics). */
  get size() {
    return this.entries.size
  }
}
