// admit's and lifecycle's watched copies (pkg/kube/shared-caches.ts SharedCaches) as the simulation keeps them, so that the
// simulation decides on the path production runs: admit decides on its copies of the ModelBackfill and the CronJob
// (checked against fresh GETs before it commits: pkg/admission/copies-unchanged.ts), takes its contenders from the live-Jobs
// index, and reads the claims ahead when its copy of the Model names the node; lifecycle reads its own Jobs from the
// copy. A copy is told of each change by a watch event a moment after the apiserver made it, and misses it when that
// event is lost (a watch restarting) until the watch's relist, seconds later.
import type { KubernetesObject, V1CronJob, V1Job } from '@kubernetes/client-node'
import type { ModelBackfill } from '../../../pkg/core/api.js'
import { ActiveJobs } from '../../../pkg/kube/active-jobs.js'
import { fakeCaches } from './deps.js'

type Watched = ModelBackfill & KubernetesObject
type Listener<T> = (object: T, removed: boolean) => void
type Named = { metadata?: { namespace?: string; name?: string } }

/** One watched kind (an ObjectCache): what the watch events applied so far say, not what the apiserver has now. */
export class SimCopy<T extends Named> {
  private readonly items = new Map<string, T>()
  private readonly listeners: Listener<T>[] = []

  /**
   * `truth`: the apiserver's object now, to count reads of the copy that are behind it (`behind`): the simulation
   * shows it generates them.
   */
  constructor(
    initial: readonly T[] = [],
    private readonly truth?: (key: string) => T | null,
    private readonly behind?: () => void,
  ) {
    for (const o of initial) this.items.set(keyOf(o), o)
  }

  async start() {}
  async stop() {}
  list(): T[] {
    return [...this.items.values()]
  }
  get(namespace: string, name: string): T | null {
    const key = `${namespace}/${name}`
    const copy = this.items.get(key) ?? null
    if (this.truth && this.behind && copy !== this.truth(key)) this.behind()
    return copy
  }
  onChange(listener: Listener<T>) {
    this.listeners.push(listener)
    for (const o of this.items.values()) listener(o, false)
  }

  /** A watch event: `key`'s object as the apiserver had it when the event was sent (null: deleted). */
  apply(key: string, object: T | null) {
    const old = this.items.get(key)
    if (object) this.items.set(key, object)
    else this.items.delete(key)
    if (object) for (const l of this.listeners) l(object, false)
    else if (old) for (const l of this.listeners) l(old, true)
  }

  /** A relist after a watch restarted: the copy made equal to what the apiserver has. */
  relist(all: readonly T[]) {
    const now = new Map(all.map((o) => [keyOf(o), o]))
    for (const key of [...this.items.keys()]) if (!now.has(key)) this.apply(key, null)
    for (const [key, o] of now) if (this.items.get(key) !== o) this.apply(key, o)
  }
}

const keyOf = (o: Named) => `${o.metadata?.namespace}/${o.metadata?.name}`

/** The copies admit and lifecycle share in one process (functions/lifecycle/caches.ts), as SharedCaches. */
export function simCaches(o: {
  backfills: readonly ModelBackfill[]
  templates: readonly V1CronJob[]
  models: readonly Named[]
  /** The apiserver's ModelBackfill now, and what to call when admit reads its copy behind it. */
  backfill: (key: string) => ModelBackfill | null
  behind: () => void
}) {
  const jobs = new SimCopy<V1Job>()
  const activeJobs = new ActiveJobs<V1Job>()
  jobs.onChange(activeJobs.change)
  const caches = {
    jobs,
    activeJobs,
    models: new SimCopy(o.models),
    gamingSessions: new SimCopy(),
    gpuLeases: new SimCopy(),
    backfills: new SimCopy<ModelBackfill>(o.backfills, o.backfill, o.behind),
    templates: new SimCopy<V1CronJob>(o.templates),
  }
  // Production's copy is typed ModelBackfill & KubernetesObject (the client's metadata, its timestamps Dates); the
  // simulation's holds the same JSON typed as the API's ModelBackfill (timestamps strings). The one member cast.
  const backfills = caches.backfills as unknown as SimCopy<Watched>
  return { copies: caches, caches: fakeCaches({ ...caches, backfills }) }
}
