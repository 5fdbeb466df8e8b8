// Claims: at most one live attempt per model and per node, even with admit replicas and retries racing. An attempt
// holds both keys of the claims bucket (`model.<ns>.<model>`, `node.<node>`) with a Claim naming its Job, its window
// start and when this admission took it; demand finds the attempt to cancel by the model key.

import { randomUUID } from 'node:crypto'
import type { Contender } from '../core/decision.js'
import { backfillKey, claimKeys } from '../core/names.js'
import { type BackfillState, type Claim, parseBackfillState, parseClaim, parseEntry, toKv } from '../core/state.js'
import type { Logger } from '../observability/log.js'
import { type ClaimStore, type Clock, type Entry, isCasConflict, type StateReader } from './ports.js'

/** A claim younger than this is live even before its holder's state names it (admission in flight). */
export const CLAIM_GRACE_MS = 30_000

export type ClaimKeys = ReturnType<typeof claimKeys>
export { claimKeys }

/** What the claim functions need: the bucket, the states (to judge staleness), a clock and a log. */
export interface ClaimPorts {
  claims: ClaimStore
  states: StateReader
  clock: Clock
  log: Logger
}

export interface Claimed {
  keys?: ClaimKeys
  /** The claim taken (both keys hold it). */
  claim?: Claim
  /** Key → the claim of another try of the same Job that this one replaced (put back if this one gives up). */
  replaced?: Record<string, string>
  contender?: Contender
}

/** A claim as stored, or null: absent, released, or unreadable (logged; nobody can prove a hold with it). */
export function readClaimEntry(log: Logger, key: string, entry: Entry | null): Claim | null {
  if (entry?.operation !== 'PUT') return null
  const r = parseEntry(entry.text, parseClaim)
  if (r.ok) return r.value
  log.error({ key, revision: entry.revision, error: r.error }, 'unreadable claim ignored; it is replaced when taken')
  return null
}

export async function readStateEntry(
  p: ClaimPorts,
  namespace: string,
  backfill: string,
): Promise<BackfillState | null> {
  const key = backfillKey(namespace, backfill)
  const entry = await p.states.get(key)
  if (entry?.operation !== 'PUT') return null
  const r = parseEntry(entry.text, parseBackfillState)
  if (r.ok) return r.value
  p.log.error({ key, revision: entry.revision, error: r.error }, 'unreadable backfill state ignored')
  return null
}

/**
 * Takes both claims for `claim`, or none: the first one held by someone else is reported as the contender. Both keys
 * are read at once first, so a free key is taken with a compare-and-set on what was read: a key given back before
 * (the usual case: its delete marker is its newest entry) would otherwise cost the KV client's create three round
 * trips — a create that fails on the marker, a read, the update. Two free keys are taken together (writeTogether);
 * otherwise one after the other, model first: two admissions racing for one model and node then cannot each end up
 * holding one key and both give up.
 */
export async function takeClaimKeys(
  p: ClaimPorts,
  keys: ClaimKeys,
  claim: Claim,
  ahead?: ClaimReads,
): Promise<Claimed> {
  const taken: string[] = []
  const replaced: Record<string, string> = {}
  let read = await readBoth(p, keys, claim, ahead)
  // The usual case, both keys free (given back, or never written): both taken by one atomic compare-and-set, one
  // round trip; neither is ever held alone. One that moved since it was read fails the batch, nothing taken: both
  // are read again and judged one by one, below.
  if (p.claims.writeTogether && read.every((e) => e?.operation !== 'PUT')) {
    const value = toKv(claim)
    try {
      const written = await p.claims.writeTogether([
        { key: keys.model, value, revision: read[0]?.revision ?? 0 },
        { key: keys.node, value, revision: read[1]?.revision ?? 0 },
      ])
      if (written) return { keys, claim }
    } catch (err) {
      if (!isCasConflict(err)) throw err
      read = await Promise.all([p.claims.get(keys.model), p.claims.get(keys.node)])
    }
  }
  const ons = [
    ['model', keys.model, read[0]],
    ['node', keys.node, read[1]],
  ] as const
  for (const [on, key, entry] of ons) {
    const { holder, sameJob } = await takeClaim(p, key, claim, entry)
    if (holder) {
      for (const k of taken) await releaseClaimKeys(p, { model: k, node: k }, claim, replaced)
      return { contender: { namespace: holder.namespace, backfill: holder.backfill, jobName: holder.jobName, on } }
    }
    if (sameJob !== undefined) replaced[key] = sameJob
    taken.push(key)
  }
  return Object.keys(replaced).length ? { keys, claim, replaced } : { keys, claim }
}

/**
 * Both keys read ahead, with the admission's first reads (before it decided), when its caches knew the model's node:
 * one round trip fewer on the admission's path.
 */
export interface ClaimReads {
  keys: ClaimKeys
  entries: Promise<[Entry | null, Entry | null]>
}

/** Reads the claims of `keys` ahead; never an unhandled rejection (a failed read is read again when needed). */
export function readClaimsAhead(p: Pick<ClaimPorts, 'claims'>, keys: ClaimKeys): ClaimReads {
  const entries = Promise.all([p.claims.get(keys.model), p.claims.get(keys.node)])
  entries.catch(() => {})
  return { keys, entries }
}

/**
 * Both keys' entries to start the compare-and-sets from. An entry read ahead is as good as a fresh one when it shows
 * the key free or held for this Job: a write on it is a compare-and-set, which fails and reads again if the key moved
 * since. One showing someone else's hold is read again: that holder may have given it back since, and an admission
 * must not stand down on an old read.
 */
async function readBoth(p: ClaimPorts, keys: ClaimKeys, claim: Claim, ahead?: ClaimReads) {
  const early =
    ahead && ahead.keys.model === keys.model && ahead.keys.node === keys.node
      ? await ahead.entries.catch(() => undefined)
      : undefined
  const usable = (key: string, entry: Entry | null | undefined): entry is Entry | null =>
    entry !== undefined && (entry?.operation !== 'PUT' || readClaimEntry(p.log, key, entry)?.jobName === claim.jobName)
  const one = (key: string, entry: Entry | null | undefined) => (usable(key, entry) ? entry : p.claims.get(key))
  return Promise.all([one(keys.model, early?.[0]), one(keys.node, early?.[1])])
}

/**
 * Takes `key` for `claim`, starting from `read`, its entry as last read; `holder`: the live holder when someone else
 * has it; `sameJob`: the claim of another try of this Job that was replaced. Every write is a compare-and-set on the
 * entry read: one that lost reads the key again and judges afresh.
 */
async function takeClaim(
  p: ClaimPorts,
  key: string,
  claim: Claim,
  read: Entry | null,
): Promise<{ holder?: Claim; sameJob?: string }> {
  const body = toKv(claim)
  let entry = read
  for (let i = 0; i < 4; i++) {
    try {
      if (entry?.operation !== 'PUT') {
        // Free: never written (a create), or given back (an update of its delete marker, as the KV client's create
        // does after its failed first try).
        if (entry) await p.claims.update(key, body, entry.revision)
        else await p.claims.create(key, body)
        return {}
      }
      const holder = readClaimEntry(p.log, key, entry)
      const ours = holder?.jobName === claim.jobName
      // Ours and naming this very admission (a retry, a second replica): nothing to write.
      if (ours && sameTry(holder, claim) && holder?.idleSince === claim.idleSince) return {}
      // Someone else's live hold stands.
      if (holder && !ours && !(await isStale(p, holder))) return { holder }
      // Replaced by compare-and-set on what was read: an unreadable claim (nobody can prove a hold with it), a stale
      // holder's, or ours left by a try that failed after taking it — it must name this admission (its window start,
      // and its time, by which demand remembers the cancel it sent): left as it was, a request after this admission
      // counted as already cancelled and the Job this one creates stayed up.
      // That try may be alive and its Job created: should this one give up, it puts that claim back (release).
      await p.claims.update(key, body, entry.revision)
      return ours ? { sameJob: entry.text } : {}
    } catch (err) {
      if (!isCasConflict(err)) throw err
    }
    entry = await p.claims.get(key)
  }
  // Still contended after the retries: whoever holds it now is the contender. Not taken is not taken: an unreadable
  // holder, or a key free again by the last read, counts as held (the admission waits; it never goes on unclaimed).
  const holder = readClaimEntry(p.log, key, entry)
  return { holder: holder ?? { ...claim, jobName: entry?.operation === 'PUT' ? '(unreadable claim)' : '(contended)' } }
}

/** The claim a try took, named by its time and its own id (the id: two tries may start in the same millisecond). */
export function newClaim(fields: Omit<Claim, 'claimedAt' | 'tryId' | 'v'>, now: number): Claim {
  return { ...fields, claimedAt: new Date(now).toISOString(), tryId: randomUUID() }
}

/** Whether two claims were taken by the same try (claims written before `tryId` existed: by their time alone). */
const sameTry = (a: Pick<Claim, 'claimedAt' | 'tryId'> | null, b: Pick<Claim, 'claimedAt' | 'tryId'>) =>
  a?.claimedAt === b.claimedAt && a?.tryId === b.tryId

/** A claim is stale when its holder's state has moved on from that Job and the grace period is over. */
async function isStale(p: ClaimPorts, holder: Claim): Promise<boolean> {
  if (p.clock.now() - Date.parse(holder.claimedAt) < CLAIM_GRACE_MS) return false
  const state = await readStateEntry(p, holder.namespace, holder.backfill)
  return state?.jobName !== holder.jobName
}

/**
 * Gives back the claims held for `who`. An admission names its own claim (`claimedAt` and `tryId`): two tries of one
 * attempt (a timer and a lifecycle admit request, or a retry while the first try still runs) share the Job name, and
 * the later one replaces the earlier one's claim (takeClaim). Released by Job name alone, the earlier try — having
 * decided not to create the Job — would delete the claims of the later one, whose Job then runs without them: demand
 * cannot find it to cancel, and another backfill takes its node. Ending an attempt (the `releaseClaims` action) gives
 * back whatever claim names its Job.
 *
 * The other way round, the later try replaced the earlier one's claim, and the earlier one may have created the Job
 * by then: a later try giving up puts back the claim it replaced (`restore`), rather than leave that Job unclaimed.
 */
export async function releaseClaimKeys(
  p: ClaimPorts,
  keys: ClaimKeys,
  who: string | Pick<Claim, 'jobName' | 'claimedAt' | 'tryId'>,
  restore: Record<string, string> = {},
) {
  const jobName = typeof who === 'string' ? who : who.jobName
  const mine = typeof who === 'string' ? undefined : who
  // The two keys are independent: each is given back by compare-and-set on its own read, both at once.
  const release = async (key: string) => {
    const entry = await p.claims.get(key)
    const holder = readClaimEntry(p.log, key, entry)
    if (!entry || holder?.jobName !== jobName) return
    if (mine !== undefined && !sameTry(holder, mine)) return
    try {
      const previous = restore[key]
      if (previous !== undefined) await p.claims.update(key, previous, entry.revision)
      else await p.claims.delete(key, entry.revision)
    } catch (err) {
      if (!isCasConflict(err)) throw err
    }
  }
  await Promise.all([...new Set([keys.model, keys.node])].map(release))
}
