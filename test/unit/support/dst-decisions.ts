// The per-decision oracle of the deterministic simulation (support/dst.ts) when the driver runs it event by event
// (support/dst-driven.ts): told of every decision the real handlers act on (AdmissionDeps.decided), before it is acted
// on, it checks the contract's invariants on that decision — never admit inside an idle window (nor within idleFor
// of a cancelled Job being gone); Failed is left only by a generation bump; attempts = distinct Job names POSTed; a
// completed Job observed with a cancel condition yields Succeeded and no preemption; every reason belongs to its
// phase; the finalizer goes only after the Job; deciding again on the result is a no-op. And, once an event has run
// out, on the settled world: the claims bucket holds exactly the live attempts' claims, and each status shows its
// state.
import { claimKeys } from '../../../pkg/admission/claims.js'
import { checkSpec, REASONS } from '../../../pkg/core/api.js'
import { decide, sameState } from '../../../pkg/core/decide.js'
import type { Decision, Observed, Trigger } from '../../../pkg/core/decision.js'
import { type BackfillState, type Claim, parseClaim, parseEntry } from '../../../pkg/core/state.js'
import { type JobView, jobView } from '../../../pkg/core/world.js'
import type { DrivenSimulation } from './dst-world.js'
import type { StoredJob } from './memory-ports.js'
import { iso } from './world.js'

const CANCEL_REASONS = REASONS.Cancelling as readonly string[]
/** The phases of an attempt that holds its claims. */
const LIVE: readonly string[] = ['Starting', 'Running', 'Cancelling']

export class InvariantViolation extends Error {}

export class DecisionOracle {
  decisions = 0
  /** How often each phase/reason was decided, and each action issued: shows what the histories exercised. */
  readonly seen = new Map<string, number>()
  /** Newest foreground signal per model, whoever carried it (a request, lastActiveTime). */
  private readonly lastForeground = new Map<string, number>()
  /** Job names a decision deleted for a cancel reason, or a cancel request ended. */
  private readonly cancelled = new Set<string>()
  /** When the last Job of each backfill deleted for a cancel reason was observed gone. */
  private readonly cancelledJobGoneAt = new Map<string, number>()
  /** The first violation (thrown inside a handler, where the handler's caller would swallow it). */
  violation: InvariantViolation | undefined

  constructor(
    private readonly sim: () => DrivenSimulation,
    private readonly namespace: string,
  ) {}

  noteForeground(model: string, at: number) {
    this.lastForeground.set(model, Math.max(this.lastForeground.get(model) ?? Number.NEGATIVE_INFINITY, at))
  }

  /** Job `j` is gone from the apiserver. */
  jobGone(j: StoredJob) {
    const name = j.job.metadata?.name ?? ''
    const owner = j.job.metadata?.ownerReferences?.[0]?.name
    if (owner && this.cancelled.has(name)) this.cancelledJobGoneAt.set(owner, this.sim().now)
  }

  /** Distinct Job names POSTed for `backfill` (every POST takes effect: no faults). */
  created(backfill: string): Set<string> {
    const names = new Set<string>()
    for (const j of this.sim().jobs.created)
      if (j.job.metadata?.ownerReferences?.[0]?.name === backfill) names.add(j.job.metadata?.name ?? '')
    return names
  }

  fail(message: string): never {
    const v = new InvariantViolation(`${message}\n--- schedule ---\n${this.sim().scheduleText}`)
    this.violation ??= v
    throw v
  }

  /** Told by reconcile of every decision it acts on, before it does. */
  decided(o: Observed, trigger: Trigger, d: Decision) {
    const name = o.backfill?.metadata.name ?? o.state?.name ?? d.state?.name
    if (!name) return
    this.decisions++
    for (const key of [
      d.state ? `${d.state.phase}/${d.state.reason}` : 'gone',
      ...d.actions.map((a) => `action:${a.type}${'why' in a ? `:${a.why}` : ''}`),
    ]) {
      this.seen.set(key, (this.seen.get(key) ?? 0) + 1)
    }
    this.check(name, o, trigger, d)
    for (const a of d.actions)
      if (a.type === 'deleteJob' && CANCEL_REASONS.includes(a.why)) this.cancelled.add(a.jobName)
    // A cancel request the cancel function carried out (it deleted the Job first): a cancel only when the decision
    // says so (a Job that completed meanwhile is a success, whatever deleted it).
    if (trigger.type === 'cancel' && d.state?.phase === 'Cancelling' && o.state?.jobName && o.job)
      this.cancelled.add(o.state.jobName)
  }

  private check(name: string, o: Observed, trigger: Trigger, d: Decision) {
    const sim = this.sim()
    const now = sim.now
    const prior = o.state
    const out = d.state
    const generation = o.backfill?.metadata.generation ?? 1
    const deleting = Boolean(o.backfill?.metadata.deletionTimestamp)
    const created = this.created(name)

    // Every status.reason belongs to its phase's list.
    if (
      d.status &&
      !(REASONS[d.status.phase ?? 'WaitingForIdle'] as readonly string[]).includes(d.status.reason ?? '')
    ) {
      this.fail(`reason ${d.status.reason} is not one of phase ${d.status.phase}`)
    }

    const creates = d.actions.filter((a) => a.type === 'createJob')
    for (const create of creates) {
      if (created.has(create.jobName)) continue // the same attempt's Job, re-asked for: not an admission
      // Never admit inside an idle window.
      const spec = o.backfill ? checkSpec(o.backfill.spec) : null
      const idleForMs = spec && 'resolved' in spec ? spec.resolved.idleForMs : Number.NaN
      const windowFrom = Math.max(
        Date.parse(out?.windowStart ?? '') || Number.NEGATIVE_INFINITY,
        Date.parse(prior?.windowStart ?? '') || Number.NEGATIVE_INFINITY,
        this.lastForeground.get(o.backfill?.spec.modelRef ?? '') ?? Number.NEGATIVE_INFINITY,
      )
      if (!(now >= windowFrom + idleForMs)) {
        this.fail(`admitted ${create.jobName} at ${iso(now)} inside the idle window from ${iso(windowFrom)}`)
      }
      // After a cancel, a fresh full window counted from when the cancelled Job was gone.
      const goneAt = this.cancelledJobGoneAt.get(name)
      if (goneAt !== undefined && now < goneAt + idleForMs) {
        this.fail(`admitted ${create.jobName} less than idleFor after the cancelled Job was gone`)
      }
      // Failed never repeats without a spec change.
      if (prior?.phase === 'Failed' && prior.generation === generation) this.fail('admitted from Failed')
    }

    // Failed is left only through a generation bump (or the object going away).
    if (prior?.phase === 'Failed' && out && out.phase !== 'Failed' && prior.generation === generation && !deleting) {
      this.fail(`left Failed for ${out.phase} without a spec change`)
    }

    // A completed Job wins over a coincident cancel signal: Succeeded, no preemption counted for it.
    const inFlight = prior && LIVE.includes(prior.phase)
    if (inFlight && o.job?.outcome === 'Complete' && !deleting && out) {
      if (out.phase !== 'Succeeded') this.fail(`a completed Job yielded ${out.phase}/${out.reason}`)
      if (total(out.counters.preemptions) > total(prior.counters.preemptions)) {
        this.fail('a completed Job was counted as a preemption')
      }
    }

    // Attempts equals the number of distinct Job names ever asked for.
    if (out) {
      const names = new Set([...created, ...creates.map((c) => c.jobName)])
      if (out.attempts !== names.size) this.fail(`attempts ${out.attempts} but ${names.size} distinct Job names`)
    }

    // Deleting the ModelBackfill: the Job goes before the finalizer.
    if (d.actions.some((a) => a.type === 'removeFinalizer')) {
      for (const j of sim.jobs.jobs.values()) {
        const v = jobView(j.job)
        if (j.job.metadata?.ownerReferences?.[0]?.name === name && !v.deleting && !v.outcome)
          this.fail('finalizer removed while the Job is still active')
      }
    }

    // Idempotent: deciding again on the result, same world, same trigger, converges and admits nothing new.
    if (out && !knownNonIdempotent(o, out)) {
      // Same world: only the Job decide looks at follows the state's jobName (actions are not applied yet).
      const stored = sim.job(out.jobName ?? '')
      const job: JobView | null = out.jobName === prior?.jobName ? o.job : stored ? jobView(stored.job) : null
      // Copies of what this decision hands on (decide copies the state it works on and changes nothing it is given).
      const again = decide({ ...o, state: structuredClone(out), job: structuredClone(job) }, trigger, now)
      if (!sameState(out, again.state)) {
        this.fail(
          `not idempotent:\n first  ${JSON.stringify(out)}\n second ${JSON.stringify(again.state)}\n actions ${JSON.stringify(again.actions)}`,
        )
      }
      const newCreate = again.actions.find((a) => a.type === 'createJob' && a.jobName !== out.jobName)
      if (newCreate) this.fail(`deciding again creates another Job: ${JSON.stringify(newCreate)}`)
    }
  }

  /**
   * The world once an event has run out: the claims bucket holds exactly the live attempts (each claim names an
   * attempt its backfill's state calls Starting, Running or Cancelling, and each such attempt holds its model's and
   * its node's claims); the status shows the state (phase, reason, attempts).
   */
  checkSettled(backfills: readonly string[]) {
    const sim = this.sim()
    for (const key of sim.claims.keys()) {
      const claim = readClaim(sim.claims.peek(key))
      if (!claim) continue
      const s = sim.state(claim.backfill)
      if (s?.jobName !== claim.jobName || !LIVE.includes(s.phase)) {
        this.fail(`claim ${key} held by ${claim.jobName}, an attempt that is not live (${s?.phase}/${s?.jobName})`)
      }
    }
    for (const name of backfills) {
      const s = sim.state(name)
      if (s?.jobName && s.nodeName && LIVE.includes(s.phase)) {
        for (const key of Object.values(claimKeys(this.namespace, s.model, s.nodeName))) {
          const holder = readClaim(sim.claims.peek(key))?.jobName
          if (holder !== s.jobName)
            this.fail(`live attempt ${s.jobName} (${s.phase}) without its claim ${key} (${holder})`)
        }
      }
      const object = sim.backfill(name)
      const st = object?.status
      if (s && object && (st?.phase !== s.phase || st.reason !== s.reason || (st.attempts ?? 0) !== s.attempts)) {
        this.fail(
          `status of ${name} shows ${st?.phase}/${st?.reason} (${st?.attempts}), its state is ${s.phase}/${s.reason} (${s.attempts})`,
        )
      }
    }
  }
}

const parsedClaims = new WeakMap<object, Claim | null>()

/** The claim an entry holds: parsed once per entry (entries are immutable). */
function readClaim(entry: { operation: string; text: string } | null): Claim | null {
  if (entry?.operation !== 'PUT') return null
  let claim = parsedClaims.get(entry)
  if (claim === undefined) {
    const r = parseEntry(entry.text, parseClaim)
    claim = r.ok ? r.value : null
    parsedClaims.set(entry, claim)
  }
  return claim
}

const total = (p: Partial<Record<string, number>>) => Object.values(p).reduce<number>((s, n) => s + (n ?? 0), 0)

/**
 * Two places where deciding twice on the same world is known not to converge in one step; everything else must be
 * idempotent.
 */
function knownNonIdempotent(o: Observed, out: BackfillState): boolean {
  const b = o.backfill
  // 1. Deletion while the Job is active and not yet seen deleting: the "other" preemption is counted per decision.
  if (b?.metadata.deletionTimestamp && o.job && !o.job.outcome && !o.job.deleting) return true
  // 2. A terminal outcome concluded for an older generation: the next decision clears it and starts over.
  if ((out.phase === 'Succeeded' || out.phase === 'Failed') && out.generation !== (b?.metadata.generation ?? 1)) {
    return true
  }
  return false
}
