// npm run sim:mutants [-- --seeds N --max-seconds T --steps K --jobs J --only name]: the race-finding check. Each
// admission race fixed so far is put back — its fix in product code undone on a copy of the tree (the working tree is
// never touched; the simulation runs the real handlers, so every fix is in the code it runs) — and the simulation must find it again
// within a bounded number of seeds and seconds. Prints, per race, the first failing seed, how many schedules and how
// long it took, where in its schedule it failed, and the violation; exits 1 if a race was not found (or a mutation no
// longer applies: its anchor text changed). --jobs goes to npm run sim (default: one worker thread per CPU).
import { spawnSync } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..')

interface Mutant {
  name: string
  /** The race the fix closed. */
  race: string
  /** Text replacements on a copy of the tree: each `find` must occur exactly once in its file. */
  edits?: { file: string; find: string; replace: string }[]
  /** Searched with the hostile faults (more duplicates and slow calls): the race needs two tries interleaved. */
  hostile?: boolean
  /** Seeds searched at least (a race first found past the default). */
  seeds?: number
  /** Seconds the search may take at least (with `seeds` past what the default allows). */
  maxSeconds?: number
  /**
   * Searched on fresh reads alone (npm run sim -- --no-caches): a race the simulation with watched copies did not
   * reach within 20,000 seeds (docs/development.md says which), found on the path it was first found on.
   */
  caches?: false
  /**
   * Why the simulation no longer reaches this race (another fix closes the schedules that led to it) and which test
   * still fails without its fix: skipped by the search, its anchor still checked.
   */
  unreached?: string
}

/** The reads around the POST blind to the foreground subject past the fence's cursor (two races undo it). */
const POST_READS_BLIND: Mutant['edits'] = [
  {
    file: 'pkg/admission/protocol.ts',
    find: 'ports.requests.newest(namespace, model, where.cursor)',
    replace: 'ports.requests.newest(namespace, model)',
  },
  {
    file: 'pkg/admission/protocol.ts',
    find: 'ports.requests.newest(namespace, model, before.cursor ?? where.cursor)',
    replace: 'ports.requests.newest(namespace, model)',
  },
]

export const MUTANTS: Mutant[] = [
  {
    name: 'release-by-job-name',
    race: 'an admission releasing another try’s claims',
    edits: [
      {
        file: 'pkg/admission/claims.ts',
        find: 'if (mine !== undefined && !sameTry(holder, mine)) return',
        replace: '',
      },
    ],
  },
  {
    name: 'retry-keeps-leftover-claim',
    race: 'a retried admission covered by a spent cancel',
    edits: [
      {
        file: 'pkg/admission/claims.ts',
        find: 'if (ours && sameTry(holder, claim) && holder?.idleSince === claim.idleSince) return {}',
        replace: 'if (ours) return {}',
      },
    ],
  },
  {
    name: 'replaced-claim-not-put-back',
    race: 'a later try giving up leaves the earlier try’s Job unclaimed',
    edits: [
      { file: 'pkg/admission/claims.ts', find: 'if (sameJob !== undefined) replaced[key] = sameJob', replace: '' },
    ],
  },
  {
    name: 'earlier-try-cancel-ends-attempt',
    race: 'a redelivered cancel of an earlier try ending an attempt whose POST is in flight',
    hostile: true,
    edits: [
      {
        file: 'pkg/core/attempt.ts',
        find: "const earlierTry = trigger.type === 'cancel' && trigger.reason === 'ForegroundDemand' && !reason",
        replace: 'const earlierTry = false',
      },
    ],
  },
  {
    name: 'other-try-ends-attempt-in-flight',
    unreached:
      'not found within 60,000 seeds on fresh reads alone nor 20,000 with watched copies since a retry commits its ' +
      'state before its POST (retry-posts-on-stale-state); test/unit/decide.fence.test.ts "another try seeing the ' +
      'request …" fails without it',
    race: 'another try of admit taking back a Starting attempt for a request while the admission’s POST is in flight',
    edits: [
      {
        file: 'pkg/core/attempt.ts',
        find: "!(trigger.type === 'raced' && trigger.jobName === jobName) &&",
        replace: "trigger.type === 'resource' &&",
      },
    ],
  },
  {
    name: 'post-reads-blind-to-foreground-subject',
    race: 'a request on the foreground subject stored after the fence',
    edits: POST_READS_BLIND,
  },
  {
    name: 'idle-read-after-fence-unchecked',
    race: 'a request on the foreground subject demand acknowledged before the fence, in the idle state alone',
    edits: [
      {
        file: 'pkg/admission/protocol.ts',
        find: "if (racedAdmission(state, acknowledged)) return { kind: 'racedBefore', lastRequestAt: acknowledged as string }",
        replace: '',
      },
    ],
  },
  {
    name: 'demand-cancel-once-per-attempt',
    caches: false,
    race: 'the request that opened a window read as breaking it, its cancel dropped, the real cancels silenced',
    hostile: true,
    edits: [
      {
        file: 'functions/demand/index.ts',
        find: 'const at = Math.floor(event.storedAt ?? sentAt(event.time, now))',
        replace: 'const at = event.storedAt ?? sentAt(event.time, now)',
      },
      {
        file: 'functions/demand/index.ts',
        find: 'if (sent !== undefined && now - sent.at < CANCEL_RESEND_MS) return sent.sending',
        replace: 'if (sent !== undefined && now - sent.at < 60_000) return sent.sending',
      },
      // The key without the window and the msgID without the resend interval, as they were (source text, not
      // templates of this file).
      {
        file: 'functions/demand/index.ts',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the product's source text
        find: '-${interval}`',
        replace: '`',
      },
      {
        file: 'functions/demand/index.ts',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the product's source text
        find: ".${claim.idleSince ?? ''}`",
        replace: '`',
      },
    ],
  },
  {
    name: 'idle-time-moves-back',
    caches: false,
    race: "demand writing an older request over a newer time it had just found stored (another replica's)",
    hostile: true,
    seeds: 80_000,
    maxSeconds: 400,
    edits: [
      {
        file: 'functions/demand/index.ts',
        find: 'entry.persisted = Math.max(entry.persisted, target, covered)',
        replace: 'entry.persisted = Math.max(entry.persisted, target)',
      },
      // The stored time is remembered twice since: here, once the claim read answered, and as soon as the write
      // returns (`stored`, stored-time-forgotten-after-claim-read-failure), which alone also keeps this race away.
      {
        file: 'functions/demand/index.ts',
        find: 'const known = Math.max(entry.persisted, entry.stored)',
        replace: 'const known = entry.persisted',
      },
    ],
  },
  {
    name: 'stored-time-forgotten-after-claim-read-failure',
    caches: false,
    race: 'a claim read failing after a write that found a newer time stored: the redelivery wrote the older time over it',
    edits: [
      {
        file: 'functions/demand/index.ts',
        find: 'const known = Math.max(entry.persisted, entry.stored)',
        replace: 'const known = entry.persisted',
      },
    ],
  },
  {
    name: 'covered-requests-left-waiting',
    race: 'requests that arrived during a write, within the newer time it found stored, never answered',
    edits: [
      {
        file: 'functions/demand/index.ts',
        find: 'if ((entry.seen > entry.persisted || entry.next) && !entry.timer) {',
        replace: 'if (entry.seen > entry.persisted && !entry.timer) {',
      },
    ],
  },
  {
    name: 'duplicate-acked-before-cancel-stored',
    race: 'a second delivery of a request answered while its cancel was still being published, then a crash',
    hostile: true,
    seeds: 40_000,
    edits: [
      {
        file: 'functions/demand/index.ts',
        find: 'if (sent !== undefined && now - sent.at < CANCEL_RESEND_MS) return sent.sending',
        replace: 'if (sent !== undefined && now - sent.at < CANCEL_RESEND_MS) return',
      },
    ],
  },
  {
    name: 'tries-named-by-time-alone',
    race: 'two tries of one attempt started in the same millisecond: the one giving up released the other’s claims',
    hostile: true,
    seeds: 45_000,
    edits: [
      {
        file: 'pkg/admission/claims.ts',
        find: 'a?.claimedAt === b.claimedAt && a?.tryId === b.tryId',
        replace: 'a?.claimedAt === b.claimedAt',
      },
    ],
  },
  {
    name: 'retry-posts-on-stale-state',
    unreached:
      'not found within 80,000 seeds (default and hostile, fresh reads): the seeds that found it (76916, 78825) pass ' +
      'with the fix undone since the idle read after the fence moved; test/unit/retry-stale-state.test.ts (another ' +
      'try, and a cancel, ending the attempt under the retry) fails without it',
    caches: false,
    race: 'a retry of a Starting attempt creating its Job on a state read before a cancel or another try ended it',
    seeds: 80_000,
    maxSeconds: 330,
    edits: [
      {
        file: 'pkg/reconcile/reconcile.ts',
        find: "const creates = decision.actions.some((a) => a.type === 'createJob')",
        replace: 'const creates = false',
      },
    ],
  },
  {
    name: 'pre-post-read-stale',
    race: 'the read in front of the POST, sent with the state write, used after a slow write: a request stored since',
    edits: [
      {
        file: 'pkg/admission/protocol.ts',
        find: 'ahead && early && ports.clock.now() - early.sentAt <= PRE_POST_READ_FRESH_MS',
        replace: 'ahead && early',
      },
    ],
  },
  {
    name: 'after-read-failure-keeps-job',
    caches: false,
    race: 'the read after the POST failing: the Job it just created left to demand → cancel',
    edits: [
      {
        file: 'pkg/admission/protocol.ts',
        find: 'const deleted = await ports.jobs.delete(namespace, jobName, uid)\n    const why',
        replace: 'throw err\n    const why',
      },
    ],
  },
  {
    name: 'cancel-in-flight-no-wait+documented-blind',
    race: 'a cancel arriving while the POST was in flight (a foreground-subject request during the POST)',
    edits: [
      // cancel gives up on a Job it does not find, instead of waiting for the one being admitted (in-flight.ts).
      {
        file: 'functions/cancel/index.ts',
        find: "if (result === 'absent' && reason === 'ForegroundDemand') {",
        replace: 'if (false) {',
      },
      // The reads around the POST blind to the foreground subject past the fence's cursor.
      ...POST_READS_BLIND,
    ],
  },
]

/** Each edit whose anchor does not occur exactly once in the tree as it is: the mutant no longer applies. */
export function staleAnchors(m: Mutant, tree = root): string[] {
  return (m.edits ?? []).flatMap((e) => {
    const n = readFileSync(join(tree, e.file), 'utf8').split(e.find).length - 1
    return n === 1 ? [] : [`${m.name}: ${e.file} holds its anchor ${n} times, not once: ${e.find}`]
  })
}

/** Applies a mutant's edits to a copy of the tree; the copy's path. Throws when an anchor no longer matches once. */
export function mutatedCopy(m: Mutant): string {
  const stale = staleAnchors(m)
  if (stale.length) throw new Error(stale.join('\n'))
  const dir = mkdtempSync(join(tmpdir(), `mbf-mutant-${m.name}-`))
  // What the simulation imports: the product libraries, the events, the functions, and the simulation itself.
  for (const entry of [
    'pkg',
    'events',
    'functions',
    'test/unit/support',
    'test/sim',
    'package.json',
    'tsconfig.json',
  ]) {
    if (existsSync(join(root, entry))) cpSync(join(root, entry), join(dir, entry), { recursive: true })
  }
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'))
  for (const e of m.edits ?? []) {
    const path = join(dir, e.file)
    const text = readFileSync(path, 'utf8')
    const n = text.split(e.find).length - 1
    if (n !== 1) {
      rmSync(dir, { recursive: true, force: true })
      throw new Error(`${m.name}: ${e.file} holds its anchor ${n} times, not once: ${e.find}`)
    }
    writeFileSync(path, text.replace(e.find, e.replace))
  }
  return dir
}

export interface MutantResult {
  name: string
  found: boolean
  seed?: number
  schedules?: number
  ms?: number
  violation?: string
  /** Where in its schedule the failing seed failed: at which step, or in the quiet tail. */
  where?: string
  /** Seeds the mutant failed that the code without the mutation fails too: not this race, passed over. */
  skipped: number[]
  output: string
}

/** Whether the code as it is (no mutation) fails this seed too. */
function failsUnmutated(seed: number, o: { steps: number; hostile?: boolean; caches?: false }): boolean {
  const args = ['--import', 'tsx', join(root, 'test/sim/run.ts'), '--seed', String(seed), '--steps', String(o.steps)]
  if (o.hostile) args.push('--hostile')
  if (o.caches === false) args.push('--no-caches')
  const r = spawnSync(process.execPath, args, { cwd: root, encoding: 'utf8', timeout: 120_000 })
  return r.status !== 0
}

/**
 * Searches seeds until the mutant fails one that the code without the mutation passes: a seed the real code fails
 * too is a failure of the real code (an open bug, or the simulation's limits), not this race found again, and is
 * passed over. Bounded by `seeds` schedules and `maxSeconds` in all.
 */
export function runMutant(
  m: Mutant,
  o: { seeds: number; maxSeconds: number; steps: number; hostile?: boolean; jobs?: number },
): MutantResult {
  const dir = m.edits?.length ? mutatedCopy(m) : root
  const hostile = Boolean(o.hostile || m.hostile)
  o = { ...o, seeds: Math.max(o.seeds, m.seeds ?? 0), maxSeconds: Math.max(o.maxSeconds, m.maxSeconds ?? 0) }
  const skipped: number[] = []
  const started = Date.now()
  let from = 1
  let schedules = 0
  let output = ''
  try {
    while (from <= o.seeds) {
      const left = o.maxSeconds - (Date.now() - started) / 1000
      if (left < 1) break
      const args = ['--import', 'tsx', join(dir, 'test/sim/run.ts'), '--from', String(from)]
      args.push('--seeds', String(o.seeds - from + 1), '--steps', String(o.steps), '--max-seconds', String(left))
      if (hostile) args.push('--hostile')
      if (m.caches === false) args.push('--no-caches')
      if (o.jobs !== undefined) args.push('--jobs', String(o.jobs))
      // Bounded: the run stops itself at --max-seconds; the kill is for a run that hangs.
      const r = spawnSync(process.execPath, args, {
        cwd: dir,
        encoding: 'utf8',
        timeout: (left + 60) * 1000,
        maxBuffer: 64 * 1024 * 1024,
      })
      output = `${r.stdout ?? ''}${r.stderr ?? ''}`
      const f = /seed (\d+) FAILED after (\d+) schedules, (\d+) ms: (.*)/.exec(output)
      if (!f) return { name: m.name, found: false, skipped, output }
      const seed = Number(f[1])
      schedules += Number(f[2])
      if (failsUnmutated(seed, { steps: o.steps, hostile, caches: m.caches })) {
        skipped.push(seed)
        from = seed + 1
        continue
      }
      return {
        name: m.name,
        found: true,
        seed,
        schedules,
        ms: Date.now() - started,
        violation: f[4],
        where: /failed (at step \d+ of \d+|in the quiet tail)/.exec(output)?.[1],
        skipped,
        output,
      }
    }
    return { name: m.name, found: false, skipped, output }
  } finally {
    if (dir !== root) rmSync(dir, { recursive: true, force: true })
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: {
      seeds: { type: 'string', default: '20000' },
      'max-seconds': { type: 'string', default: '240' },
      steps: { type: 'string', default: '400' },
      only: { type: 'string' },
      hostile: { type: 'boolean', default: false },
      jobs: { type: 'string' },
    },
  })
  const o = {
    seeds: Number(values.seeds),
    maxSeconds: Number(values['max-seconds']),
    steps: Number(values.steps),
    hostile: values.hostile,
    jobs: values.jobs === undefined ? undefined : Number(values.jobs),
  }
  let missed = 0
  for (const m of MUTANTS.filter((x) => !values.only || x.name === values.only)) {
    if (m.unreached && !values.only) {
      process.stdout.write(`${m.name}: skipped, ${m.unreached}\n`)
      continue
    }
    const r = runMutant(m, o)
    if (!r.found) missed++
    const passedOver = r.skipped.length
      ? ` (passed over seed${r.skipped.length > 1 ? 's' : ''} ${r.skipped.join(', ')}: the code without the mutation fails ${r.skipped.length > 1 ? 'them' : 'it'} too)`
      : ''
    process.stdout.write(
      r.found
        ? `${m.name}${m.caches === false ? ' (fresh reads alone)' : ''}: found, seed ${r.seed} after ${r.schedules} schedules, ${(r.ms ?? 0) / 1000} s: ${r.violation} ` +
            `(failed ${r.where})${passedOver}\n`
        : `${m.name}: NOT found within ${Math.max(o.seeds, m.seeds ?? 0)} seeds / ${Math.max(o.maxSeconds, m.maxSeconds ?? 0)} s (${m.race})${passedOver}\n${r.output.slice(-400)}\n`,
    )
  }
  process.exit(missed ? 1 : 0)
}
