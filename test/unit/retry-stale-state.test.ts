// A retry of a Starting attempt must not create its Job on a state read that a cancel or another try has moved on
// from (pkg/reconcile/reconcile.ts: "A decision to create a Job commits its state even when unchanged"; mutant
// `retry-posts-on-stale-state` in test/sim/mutants.ts). The simulation no longer reaches this race (not within 80,000
// seeds, docs/development.md), so it is built here directly: the real reconcile() for admit, lifecycle and cancel
// over the in-memory ports, each delivery in its own context so that a gate can hold one try back at one call while
// the others run to their end. No faults but the ones named, no randomness: every run is the same schedule.
//
// The retry (admit#2, a redelivered or duplicated timer) reads the attempt as Starting at revision R with its Job
// missing, decides to create it, and takes the attempt's claims (replacing the other try's, as a retry does). Held
// right there, before it writes anything to the state, the attempt is ended under it and its claims given back by
// Job name:
//   1. by another try of the same attempt (seed 76916): admit#3 creates the Job, its read after the POST fails, so it
//      deletes the Job and records Cancelling (ForegroundUnobservable); the Job gone, lifecycle ends the attempt;
//   2. by a cancel: the first try's POST lands after the retry saw no Job, a GPU lease then holds the node, lifecycle
//      records Cancelling and publishes the cancel, the cancel function deletes the Job and — the Job gone — its
//      reconcile ends the attempt.
// (Ended before the retry took the claims, the retry would take them afresh: its Job claimed, but still no attempt's.)
// No foreground request is involved: a request would be caught by the retry's own reads around its POST
// (pkg/admission/protocol.ts), which is why only the state's compare-and-set stops these. With it, the retry's write on
// revision R conflicts, it reads again and creates nothing. Without it (`const creates = false`), the retry's unchanged
// state is not written and its POST stands on R: the Job is created after the attempt was ended, with no claim (demand
// finds nothing to cancel; in case 2 on the node a GPU lease holds) and no state naming it. Seen failing so with the
// fix undone (`const creates = false` in pkg/reconcile/reconcile.ts), both cases, at the oracle's check:
//   AssertionError: expected [ …(2) ] to deeply equal []
//   + "live Job bf-1-04e5ddb5 without its claims (model: -, node: -)",
//   + "live Job bf-1-04e5ddb5 not its backfill's attempt (state WaitingForIdle/IdleWindow, Job -)",
import { AsyncLocalStorage } from 'node:async_hooks'
import { describe, expect, it } from 'vitest'
import { claimKeys } from '../../pkg/admission/claims.js'
import { type CancelReason, FINALIZER, type ModelBackfill, type ModelBackfillStatus } from '../../pkg/core/api.js'
import type { Trigger } from '../../pkg/core/decision.js'
import { backfillKey } from '../../pkg/core/names.js'
import { type BackfillState, type Claim, parseBackfillState, parseClaim, parseEntry } from '../../pkg/core/state.js'
import type { Bus } from '../../pkg/jetstream/bus.js'
import { PLURALS } from '../../pkg/kube/resources.js'
import type { AdmissionDeps } from '../../pkg/reconcile/deps.js'
import { reconcile } from '../../pkg/reconcile/reconcile.js'
import type { Role } from '../../pkg/reconcile/roles.js'
import { fakeKube } from './support/kube-fake.js'
import {
  type Gate,
  MemoryJobs,
  MemoryKv,
  MemoryRequests,
  memoryPorts,
  SimulatedFault,
  type Verdict,
} from './support/memory-ports.js'
import { aBackfill, aCronJob, iso, MINUTE, MODEL, NODE, NS, silentLogger, T0, TEMPLATE } from './support/world.js'

const BF = 'bf'

const template = aCronJob(TEMPLATE, 'uid-tpl')

const model = { metadata: { namespace: NS, name: MODEL }, status: { phase: 'Ready', gpu: { node: NODE } } }

/** Which delivery a port call comes from: each runs in its own context, so a gate can tell the tries apart. */
const delivery = new AsyncLocalStorage<string>()

/** A delivery's answers to its port calls (`ok` unless it says otherwise); it may hold a call back. */
type Hook = (op: string) => Verdict | Promise<Verdict>

function deferred<T>() {
  let resolve: (v: T) => void = () => {}
  const promise = new Promise<T>((r) => {
    resolve = r
  })
  return { promise, resolve }
}

/** One backfill on a Ready model, its window 10 minutes, over the in-memory ports and a small apiserver and bus. */
function world() {
  let now = T0
  const clock = { now: () => now }
  const hooks = new Map<string, Hook>()
  const trace: string[] = []
  const gate: Gate = async (op, detail) => {
    const who = delivery.getStore() ?? '?'
    trace.push(`${who} ${op}${detail ? ` ${detail()}` : ''}`)
    return (await hooks.get(who)?.(op)) ?? 'ok'
  }
  const claims = new MemoryKv('claims', gate)
  const states = new MemoryKv('backfills', gate)
  const idle = new MemoryKv('idle', gate)
  const requests = new MemoryRequests(idle, clock, gate)
  const jobs = new MemoryJobs(clock, gate)
  const leases: unknown[] = []
  let backfill: ModelBackfill = aBackfill({ name: BF, spec: { idleFor: '10m' } })
  backfill.metadata.resourceVersion = '1'
  const change = (next: ModelBackfill) => {
    const resourceVersion = String(Number(backfill.metadata.resourceVersion) + 1)
    backfill = { ...next, metadata: { ...next.metadata, resourceVersion } }
  }
  const published: { type: string; data: Record<string, string> }[] = []
  const kube = fakeKube({
    // A copy, as a GET returns: reconcile's objects are its own.
    getBackfill: async () => structuredClone(backfill),
    getModel: async () => model,
    getCronJob: async () => template,
    getJob: (ns: string, name: string) => jobs.get(ns, name),
    listAll: async (plural: string) => (plural === PLURALS.gpuLeases ? [...leases] : []),
    listOwnJobs: async (_ns: string, name: string) =>
      (await jobs.list()).filter((j) => j.metadata?.ownerReferences?.[0]?.name === name),
    listBackfillJobs: () => jobs.list(),
    setFinalizer: async (_b: ModelBackfill, present: boolean) =>
      change({ ...backfill, metadata: { ...backfill.metadata, finalizers: present ? [FINALIZER] : [] } }),
    recordEvent: async () => {},
    writeStatus: async (b: ModelBackfill, status: ModelBackfillStatus) => {
      if (b.metadata.resourceVersion !== backfill.metadata.resourceVersion) return false
      change({ ...backfill, status: structuredClone(status) })
      return true
    },
    deleteJob: (ns: string, name: string, uid?: string) => jobs.delete(ns, name, uid),
  })
  const armed = new Map<string, string>()
  const bus = {
    kv: { backfills: states, idle, claims },
    // Recorded, delivered by the test (a cancel goes to the cancel driver below).
    publish: async (type: string, data: Record<string, string>) => {
      published.push({ type, data })
      return { seq: 0 }
    },
    armTimer: async (_ns: string, name: string, at: string) => {
      armed.set(name, at)
    },
    cancelTimer: async (_ns: string, name: string) => {
      armed.delete(name)
    },
    timerArmed: async (_ns: string, name: string) => armed.has(name),
    jsm: { streams: { getMessage: () => Promise.reject(new Error('no message found')) } },
  }
  const deps: AdmissionDeps = {
    kube,
    bus: bus as unknown as Bus,
    log: silentLogger,
    now: clock.now,
    admission: memoryPorts({ claims, states, requests, jobs, clock, log: silentLogger }),
  }
  /** One delivery of an event to `role`, named `name`, its port calls answered by `hook`. */
  const deliver = (name: string, role: Role, trigger: Trigger, hook?: Hook) => {
    if (hook) hooks.set(name, hook)
    return delivery.run(name, () => reconcile(deps, role, NS, BF, trigger))
  }
  /** The cancel function (functions/cancel): the named Job's DELETE first (by its UID), then its reconcile. */
  const deliverCancel = (name: string, data: Record<string, string>) =>
    delivery.run(name, async () => {
      const job = await jobs.get(NS, data.jobName as string)
      const deleted = job ? await jobs.delete(NS, data.jobName as string, job.metadata?.uid) : 'absent'
      // Its pods gone (the cancel function deletes them with the Job): the apiserver removes it.
      jobs.remove(NS, data.jobName as string)
      await reconcile(deps, 'cancel', NS, BF, {
        type: 'cancel',
        reason: data.reason as CancelReason,
        at: data.at as string,
      })
      return deleted
    })
  const state = (): BackfillState | null => {
    const e = states.peek(backfillKey(NS, BF))
    if (e?.operation !== 'PUT') return null
    const r = parseEntry(e.text, parseBackfillState)
    return r.ok ? r.value : null
  }
  const claim = (key: string): Claim | null => {
    const e = claims.peek(key)
    if (e?.operation !== 'PUT') return null
    const r = parseEntry(e.text, parseClaim)
    return r.ok ? r.value : null
  }
  const keys = claimKeys(NS, MODEL, NODE)
  const live = () => [...jobs.jobs.values()].filter((j) => j.deletedAt === undefined && !j.outcome)
  /**
   * The oracle, on the world alone (the Jobs, the claims bucket, the stored state), not on what the functions
   * returned: every live Job holds both its claims (demand finds the attempt to cancel by them, and no other attempt
   * may take its node) and is its backfill's current attempt.
   */
  const violations = () => {
    const out: string[] = []
    for (const j of live()) {
      const name = j.job.metadata?.name
      const m = claim(keys.model)?.jobName
      const n = claim(keys.node)?.jobName
      if (m !== name || n !== name)
        out.push(`live Job ${name} without its claims (model: ${m ?? '-'}, node: ${n ?? '-'})`)
      const s = state()
      if (s?.jobName !== name || !['Starting', 'Running'].includes(s?.phase ?? ''))
        out.push(
          `live Job ${name} not its backfill's attempt (state ${s?.phase}/${s?.reason}, Job ${s?.jobName ?? '-'})`,
        )
    }
    return out
  }
  return {
    jobs,
    leases,
    published,
    trace,
    deliver,
    deliverCancel,
    state,
    claim,
    keys,
    live,
    violations,
    now: clock.now,
    tick: (ms: number) => {
      now += ms
    },
  }
}

type World = ReturnType<typeof world>

/**
 * The retry: admit#2, a timer delivered again. Its port calls run as usual until it holds the attempt's claims; at
 * its next call (the idle-state read after the fence), before any write to the state, `race` runs to its end, and
 * every call of the retry from there on waits for it. What the world looked like when `race` was done is returned
 * with the retry's own outcome.
 */
async function retryAround(w: World, race: () => Promise<void>) {
  let claimed = false
  let racing: Promise<void> | undefined
  let ended: { state: BackfillState | null; model: Claim | null; node: Claim | null; live: number } | undefined
  const run = async () => {
    await race()
    ended = { state: w.state(), model: w.claim(w.keys.model), node: w.claim(w.keys.node), live: w.live().length }
  }
  const decision = await w.deliver('admit#2', 'admit', { type: 'timer' }, async (op): Promise<Verdict> => {
    if (op === 'claims.update' || op === 'claims.writeTogether' || op === 'claims.create') claimed = true
    else if (claimed && !racing) racing = run()
    if (racing) await racing
    return 'ok'
  })
  return { decision, ended }
}

/** The retry's calls on the backfill states, in order: `get`, `update`, … */
const stateCalls = (w: World) =>
  w.trace.flatMap((l) => (l.startsWith('admit#2 backfills.') ? [l.split(' ')[1]?.slice('backfills.'.length)] : []))

/**
 * The attempt was over (its only Job deleted, its claims given back, its state naming no Job) while the retry was still
 * on its way to the POST; the retry's write on the revision it had read then conflicted, it read again and created
 * nothing: no live Job the claims and the state do not name — the oracle, on the node a lease holds too.
 */
function endedUnderTheRetryNoJob(w: World, ended: Awaited<ReturnType<typeof retryAround>>['ended']) {
  expect(w.jobs.created[0]?.deletedAt).toBeDefined()
  expect(ended).toMatchObject({ model: null, node: null, live: 0 })
  expect(ended?.state?.jobName).toBeUndefined()
  expect(ended?.state?.phase).toBe('WaitingForIdle')
  expect(w.violations()).toEqual([])
  expect(stateCalls(w)).toEqual(['get', 'update', 'get'])
  expect(w.jobs.created).toHaveLength(1)
  expect(w.state()).toMatchObject({ phase: 'WaitingForIdle', attempts: 1 })
}

describe('a retry of a Starting attempt ended under it', () => {
  it('by another try (its read after the POST failed, lifecycle then ended the attempt) creates no Job', async () => {
    const w = world()
    await w.deliver('lifecycle#1', 'lifecycle', { type: 'resource' })
    w.tick(11 * MINUTE)
    // The window over, the timer's first delivery admits the attempt (Starting, both claims) and its POST fails.
    await expect(
      w.deliver('admit#1', 'admit', { type: 'timer' }, (op) => (op === 'jobs.create' ? 'failBefore' : 'ok')),
    ).rejects.toBeInstanceOf(SimulatedFault)
    const job = w.state()?.jobName as string
    expect(w.state()?.phase).toBe('Starting')
    expect([w.claim(w.keys.model)?.jobName, w.claim(w.keys.node)?.jobName]).toEqual([job, job])
    expect(w.jobs.created).toHaveLength(0)
    // Redelivered twice after the ack wait: the retry (admit#2) and another try of it (admit#3).
    w.tick(2_000)
    const { ended } = await retryAround(w, async () => {
      let posted = false
      await w.deliver('admit#3', 'admit', { type: 'timer' }, (op) => {
        if (op === 'jobs.create') posted = true
        else if (posted && op === 'requests.newest') {
          // The read after its POST: no answer. It deletes the Job at once and records the attempt as cancelled.
          posted = false
          return 'failBefore'
        }
        return 'ok'
      })
      // The deleted Job's pods are gone; its watch event wakes lifecycle, which ends the attempt.
      w.jobs.remove(NS, job)
      await w.deliver('lifecycle#2', 'lifecycle', { type: 'resource' })
    })
    // The race did happen: the other try created the Job and deleted it, and the attempt was over, its claims given
    // back, while the retry was still on its way to the POST.
    endedUnderTheRetryNoJob(w, ended)
    expect(w.state()?.counters.preemptions).toEqual({ other: 1 })
  })

  it('by a cancel (a GPU lease took the node once the first try had created the Job) creates no Job', async () => {
    const w = world()
    await w.deliver('lifecycle#1', 'lifecycle', { type: 'resource' })
    w.tick(11 * MINUTE)
    // The timer's first delivery admits the attempt; its POST is slow, still on the wire when the retry reads.
    const post = deferred<Verdict>()
    const posting = deferred<void>()
    const first = w.deliver('admit#1', 'admit', { type: 'timer' }, (op) => {
      if (op !== 'jobs.create') return 'ok'
      posting.resolve()
      return post.promise
    })
    await posting.promise
    const job = w.state()?.jobName as string
    expect(w.state()?.phase).toBe('Starting')
    // A duplicate delivery of the timer: the retry reads Starting and no Job yet.
    let created = 0
    let cancel: (typeof w.published)[number] | undefined
    const { ended } = await retryAround(w, async () => {
      // The first try's POST lands; its reads around it see no request: the Job stands.
      post.resolve('ok')
      await first
      created = w.live().length
      // A GPU lease takes the node: lifecycle records Cancelling and publishes the cancel for the Job.
      w.tick(1_000)
      w.leases.push({
        metadata: { namespace: NS, name: 'lease' },
        spec: { node: NODE, expiresAt: iso(w.now() + 10 * MINUTE) },
      })
      await w.deliver('lifecycle#2', 'lifecycle', { type: 'resource' })
      cancel = w.published.find((m) => m.type === 'ai.flexinfer.backfill.cancel')
      // The cancel function: the Job's DELETE, its pods gone, then its reconcile ends the attempt and gives the
      // claims back by Job name (the retry's, which replaced the first try's).
      if (cancel) await w.deliverCancel('cancel#1', cancel.data)
    })
    // The race did happen: the first try's Job was live, cancelled and deleted, and the attempt was over, its claims
    // given back, while the retry was still on its way to the POST.
    expect(created).toBe(1)
    expect(cancel?.data).toMatchObject({ jobName: job, reason: 'GPULeaseActive' })
    endedUnderTheRetryNoJob(w, ended)
    expect(w.state()?.counters.preemptions).toEqual({ gpu_lease: 1 })
  })
})
