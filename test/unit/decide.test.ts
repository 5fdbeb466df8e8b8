// decide(): every phase × every trigger or world change, then the stories the contract pins (fresh window after
// a cancel, repeatAfter, completion over cancel, counters, status projection, lazy timers).
// Background-class foreground requests are not represented here: the demand function drops them before they
// reach the idle state or decide, so decide never sees one (the events and integration tests cover that).
import { describe, expect, it } from 'vitest'
import { checkSpec, FINALIZER, type ModelBackfillSpec, PHASES, type Phase, REASONS } from '../../pkg/core/api.js'
import { MAX_REJECTED_RECHECK_MS } from '../../pkg/core/attempt.js'
import { RECHECK_MS } from '../../pkg/core/checks.js'
import { decide, initialState } from '../../pkg/core/decide.js'
import { type Action, CHECKS, type Decision, type Observed, type Trigger } from '../../pkg/core/decision.js'
import { deepFreeze } from './support/memory-ports.js'
import { type Fixture, fixture } from './support/phases.js'
import {
  aBackfill,
  aContender,
  aGamingSession,
  aJob,
  aLease,
  aModel,
  anIdleState,
  aWorld,
  cancelRequest,
  HOUR,
  iso,
  J,
  MINUTE,
  NODE,
  OTHER_NODE,
  SECOND,
  T0,
  Timeline,
  templateMissing,
  templateWithGpu,
  withSpec,
} from './support/world.js'

type ActionLike = Partial<Action> & { type: Action['type'] } & Record<string, unknown>
interface Expected {
  phase: Phase
  reason: string
  actions: ActionLike[]
}
/** Same phase and reason as the fixture, and nothing to do. */
const SAME = 'same' as const
/** The change cannot happen in that phase (e.g. a Job outcome when there is no Job). */
const NA = 'n/a' as const
type Cell = Expected | typeof SAME | typeof NA | { deleted: ActionLike[] }

interface Change {
  what: string
  apply: (f: Fixture) => { world: Observed; trigger?: Trigger; now?: number }
  expect: Record<Phase, Cell>
}

const J1 = J(1)
const J2 = J(2)
const DELETED_STATE: ActionLike[] = [{ type: 'cancelTimer' }, { type: 'removeFinalizer' }, { type: 'deleteState' }]

const admit = (attempt = 1, node = NODE, ...more: ActionLike[]): Expected => ({
  phase: 'Starting',
  reason: 'JobCreated',
  actions: [
    ...more,
    { type: 'createJob', jobName: J(attempt), attempt, node },
    { type: 'recordEvent', eventType: 'Normal', reason: 'BackfillStarted' },
  ],
})
const cancelled = (reason: string): Expected => ({
  phase: 'Cancelling',
  reason,
  actions: [
    { type: 'recordEvent', eventType: 'Normal', reason: 'BackfillCancelled' },
    { type: 'deleteJob', jobName: J1, why: reason as never },
  ],
})
const blocked = (reason: string, ...more: ActionLike[]): Expected => ({
  phase: 'Blocked',
  reason,
  actions: [...more, { type: 'recordEvent', eventType: 'Warning', reason: 'Blocked' }],
})
const waiting = (reason: string, ...actions: ActionLike[]): Expected => ({ phase: 'WaitingForIdle', reason, actions })
const armAt = (at: number): ActionLike => ({ type: 'armTimer', at: iso(at) })
const CANCELLED_EVENT: ActionLike = { type: 'recordEvent', eventType: 'Normal', reason: 'BackfillCancelled' }
const cleanup: ActionLike = { type: 'deleteJob', jobName: J1, why: 'Cleanup' }

/** Builds the change's world from the fixture's. */
const world = (f: Fixture, o: Partial<Observed>): Observed => ({ ...structuredClone(f.world), ...o })
const respec = (f: Fixture, spec: Partial<ModelBackfillSpec>) => {
  const b = f.world.backfill
  if (!b) throw new Error('no backfill')
  return world(f, { backfill: withSpec(b, spec) })
}
const deleting = (f: Fixture, job: Observed['job']) => {
  const b = f.world.backfill
  if (!b) throw new Error('no backfill')
  const deletionTimestamp = iso(f.now - SECOND)
  return world(f, { backfill: { ...b, metadata: { ...b.metadata, deletionTimestamp } }, job })
}
const jobOutcome = (f: Fixture, outcome: 'Complete' | 'Failed') =>
  f.world.job ? world(f, { job: { ...f.world.job, outcome, outcomeTime: iso(f.now - MINUTE) } }) : f.world
const noJob = (f: Fixture) => !f.state.jobName
/** The fixture's Job, marked deleted if it is still active (what the cancel function does before deciding). */
const activeJobDeleted = (f: Fixture) =>
  f.world.job && !f.world.job.outcome ? { ...f.world.job, deleting: true } : f.world.job
/**
 * The fixture's active Job deleted at `deletedAgo` before now and then (or before, when `failedAgo` is larger) Failed:
 * what the Job controller reports when it counts the attempt's deleted pods as failures (backoffLimit 0).
 */
const deletedThenFailed = (f: Fixture, deletedAgo: number, failedAgo: number) =>
  f.world.job && !f.world.job.outcome
    ? {
        ...f.world.job,
        deleting: true,
        deletedAt: iso(f.now - deletedAgo),
        outcome: 'Failed' as const,
        outcomeMessage: 'BackoffLimitExceeded',
        outcomeTime: iso(f.now - failedAgo),
      }
    : f.world.job

const CHANGES: Change[] = [
  {
    what: 'timer, idle window complete (nothing changed)',
    apply: (f) => ({ world: f.world }),
    expect: {
      WaitingForIdle: admit(),
      Starting: SAME,
      Running: SAME,
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: admit(),
    },
  },
  {
    what: 'timer, idle window incomplete (a foreground request 5m ago in the idle state)',
    apply: (f) => ({ world: world(f, { idle: anIdleState(f.now - 5 * MINUTE) }) }),
    expect: {
      // The timer fired early for the moved window: the new due time is armed.
      WaitingForIdle: waiting('IdleWindow', armAt(T0 + 15 * MINUTE)),
      Starting: cancelled('ForegroundDemand'),
      Running: cancelled('ForegroundDemand'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      // The pending recheck (T0+12m) comes before the new due time (T0+16m): left alone.
      Blocked: waiting('IdleWindow'),
    },
  },
  {
    what: 'foreground request seen in the idle state only (no cancel request)',
    apply: (f) => ({ world: world(f, { idle: anIdleState(f.now) }) }),
    expect: {
      WaitingForIdle: waiting('IdleWindow', armAt(T0 + 20 * MINUTE)),
      Starting: cancelled('ForegroundDemand'),
      Running: cancelled('ForegroundDemand'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: waiting('IdleWindow'),
    },
  },
  {
    what: 'cancel request (ForegroundDemand) after the cancel function deleted the Job',
    apply: (f) => ({
      world: world(f, { idle: anIdleState(f.now), job: activeJobDeleted(f) }),
      trigger: cancelRequest(f.now),
    }),
    expect: {
      // A stale cancel (no attempt in flight) only moves the window.
      WaitingForIdle: waiting('IdleWindow', armAt(T0 + 20 * MINUTE)),
      Starting: cancelled('ForegroundDemand'),
      Running: cancelled('ForegroundDemand'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: waiting('IdleWindow'),
    },
  },
  {
    what: 'cancel request (ForegroundDemand) before the Job deletion is observed',
    apply: (f) => ({ world: world(f, { idle: anIdleState(f.now) }), trigger: cancelRequest(f.now) }),
    expect: {
      WaitingForIdle: waiting('IdleWindow', armAt(T0 + 20 * MINUTE)),
      Starting: cancelled('ForegroundDemand'),
      Running: cancelled('ForegroundDemand'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: waiting('IdleWindow'),
    },
  },
  {
    what: 'cancel request (ForegroundDemand) before the coalesced idle-state write',
    apply: (f) => ({ world: world(f, { job: activeJobDeleted(f) }), trigger: cancelRequest(f.now) }),
    expect: {
      WaitingForIdle: waiting('IdleWindow', armAt(T0 + 20 * MINUTE)),
      Starting: cancelled('ForegroundDemand'),
      Running: cancelled('ForegroundDemand'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: waiting('IdleWindow'),
    },
  },
  {
    what: 'cancel request whose reason is no longer observed (the gaming session already ended)',
    apply: (f) => ({ world: world(f, { job: activeJobDeleted(f) }), trigger: cancelRequest(f.now, 'GamingIntent') }),
    expect: {
      WaitingForIdle: admit(),
      Starting: cancelled('GamingIntent'),
      Running: cancelled('GamingIntent'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: admit(),
    },
  },
  {
    what: 'cancel request (ForegroundDemand) decided after the deleted Job is already gone',
    apply: (f) => ({
      world: world(f, { idle: anIdleState(f.now), job: f.world.job?.outcome ? f.world.job : null }),
      trigger: cancelRequest(f.now),
    }),
    expect: {
      WaitingForIdle: waiting('IdleWindow', armAt(T0 + 20 * MINUTE)),
      // The cancel function deleted it, so it existed: a preempted attempt (still counted, still told as Cancelled),
      // fresh window from now.
      Starting: waiting('IdleWindow', CANCELLED_EVENT, { type: 'releaseClaims', jobName: J1 }, armAt(T0 + 21 * MINUTE)),
      Running: waiting('IdleWindow', CANCELLED_EVENT, { type: 'releaseClaims', jobName: J1 }, armAt(T0 + 25 * MINUTE)),
      Cancelling: waiting('IdleWindow', { type: 'releaseClaims', jobName: J1 }, armAt(T0 + 25 * MINUTE)),
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: waiting('IdleWindow'),
    },
  },
  {
    what: 'Job being deleted by someone else (no cancel reason)',
    apply: (f) => ({ world: world(f, { job: f.world.job && { ...f.world.job, deleting: true } }) }),
    expect: {
      WaitingForIdle: NA,
      // Nothing to decide until it is gone (then: see "Job gone").
      Starting: SAME,
      Running: SAME,
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: NA,
      Blocked: NA,
    },
  },
  {
    what: "Model.status.lastActiveTime written by FlexInfer's gateway (1s ago)",
    apply: (f) => ({ world: world(f, { model: aModel({ lastActiveTime: iso(f.now - SECOND) }) }) }),
    expect: {
      WaitingForIdle: waiting('IdleWindow', armAt(T0 + 20 * MINUTE - SECOND)),
      Starting: cancelled('ForegroundDemand'),
      Running: cancelled('ForegroundDemand'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: waiting('IdleWindow'),
    },
  },
  ...(['gaming session on the model node', 'gaming session being deleted (deletionTimestamp set)'] as const).map(
    (what, i): Change => ({
      what,
      apply: (f) => ({
        world: world(f, { gamingSessions: [aGamingSession({ expiresAt: iso(f.now + HOUR), deleting: i === 1 })] }),
      }),
      expect: {
        WaitingForIdle: blocked('GamingIntent', armAt(T0 + 10 * MINUTE + HOUR + 1)),
        Starting: cancelled('GamingIntent'),
        Running: cancelled('GamingIntent'),
        Cancelling: SAME,
        Succeeded: SAME,
        Failed: SAME,
        Suspended: SAME,
        Blocked: SAME,
      },
    }),
  ),
  {
    what: 'expired gaming session on the model node',
    apply: (f) => ({ world: world(f, { gamingSessions: [aGamingSession({ expiresAt: iso(f.now - MINUTE) })] }) }),
    expect: {
      WaitingForIdle: admit(),
      Starting: SAME,
      Running: SAME,
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: admit(),
    },
  },
  ...(
    [
      ['GPU lease on the model node', { node: NODE }],
      ["GPU lease on the model's GPU group", { node: 'node-z', group: 'gpu-group-1' }],
    ] as const
  ).map(
    ([what, on]): Change => ({
      what,
      apply: (f) => ({ world: world(f, { leases: [aLease({ ...on, expiresAt: iso(f.now + HOUR) })] }) }),
      expect: {
        WaitingForIdle: blocked('GPULeaseActive', armAt(T0 + 10 * MINUTE + HOUR + 1)),
        Starting: cancelled('GPULeaseActive'),
        Running: cancelled('GPULeaseActive'),
        Cancelling: SAME,
        Succeeded: SAME,
        Failed: SAME,
        Suspended: SAME,
        // Already Blocked: the new reason is recorded; the pending recheck is earlier than the expiry, kept.
        Blocked: blocked('GPULeaseActive'),
      },
    }),
  ),
  {
    what: 'expired GPU lease on the model node',
    apply: (f) => ({ world: world(f, { leases: [aLease({ expiresAt: iso(f.now - MINUTE) })] }) }),
    expect: {
      WaitingForIdle: admit(),
      Starting: SAME,
      Running: SAME,
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: admit(),
    },
  },
  {
    what: 'suspend (spec.suspend: true, generation bump)',
    apply: (f) => ({ world: f.world.backfill?.spec.suspend ? f.world : respec(f, { suspend: true }) }),
    expect: {
      WaitingForIdle: { phase: 'Suspended', reason: 'Suspended', actions: [] },
      Starting: cancelled('Suspended'),
      Running: cancelled('Suspended'),
      Cancelling: SAME,
      Succeeded: { phase: 'Suspended', reason: 'Suspended', actions: [cleanup] },
      Failed: { phase: 'Suspended', reason: 'Suspended', actions: [cleanup] },
      Suspended: SAME,
      Blocked: { phase: 'Suspended', reason: 'Suspended', actions: [] },
    },
  },
  {
    what: 'resume (spec.suspend: false, generation bump)',
    apply: (f) => ({ world: respec(f, { suspend: false }) }),
    expect: {
      // Resuming a declaration that was never suspended is just a spec change.
      WaitingForIdle: admit(),
      Starting: cancelled('SpecChanged'),
      Running: cancelled('SpecChanged'),
      Cancelling: SAME,
      Succeeded: admit(2, NODE, cleanup),
      Failed: admit(2, NODE, cleanup),
      // The idle window kept running while suspended (foreground idleness, not suspension, is what counts).
      Suspended: admit(),
      Blocked: admit(),
    },
  },
  {
    what: 'spec change (generation bump)',
    apply: (f) => ({ world: respec(f, { env: { MODELS: 'llm=vllm' } }) }),
    expect: {
      WaitingForIdle: admit(),
      Starting: cancelled('SpecChanged'),
      Running: cancelled('SpecChanged'),
      Cancelling: SAME,
      // A spec change clears a terminal attempt and starts over (Failed included: that is how it is retried).
      Succeeded: admit(2, NODE, cleanup),
      Failed: admit(2, NODE, cleanup),
      Suspended: SAME,
      Blocked: admit(),
    },
  },
  {
    what: 'deletion (deletionTimestamp) while the Job exists',
    apply: (f) => ({ world: deleting(f, f.world.job) }),
    expect: {
      WaitingForIdle: { deleted: DELETED_STATE },
      // The Job goes first; the finalizer stays until it is gone.
      Starting: {
        phase: 'Starting',
        reason: 'JobCreated',
        actions: [
          { type: 'deleteJob', jobName: J1, why: 'Deleted' },
          { type: 'recordEvent', eventType: 'Normal', reason: 'BackfillCancelled' },
        ],
      },
      Running: {
        phase: 'Running',
        reason: 'JobRunning',
        actions: [
          { type: 'deleteJob', jobName: J1, why: 'Deleted' },
          { type: 'recordEvent', eventType: 'Normal', reason: 'BackfillCancelled' },
        ],
      },
      Cancelling: SAME,
      // A finished Job is left to the garbage collector (controller ownerReference).
      Succeeded: { deleted: [{ type: 'releaseClaims', jobName: J1 }, ...DELETED_STATE] },
      Failed: { deleted: [{ type: 'releaseClaims', jobName: J1 }, ...DELETED_STATE] },
      Suspended: { deleted: DELETED_STATE },
      Blocked: { deleted: DELETED_STATE },
    },
  },
  {
    what: 'deletion (deletionTimestamp) once the Job is gone',
    apply: (f) => ({ world: deleting(f, null) }),
    expect: {
      WaitingForIdle: { deleted: DELETED_STATE },
      Starting: { deleted: [{ type: 'releaseClaims', jobName: J1 }, ...DELETED_STATE] },
      Running: { deleted: [{ type: 'releaseClaims', jobName: J1 }, ...DELETED_STATE] },
      Cancelling: { deleted: [{ type: 'releaseClaims', jobName: J1 }, ...DELETED_STATE] },
      Succeeded: { deleted: [{ type: 'releaseClaims', jobName: J1 }, ...DELETED_STATE] },
      Failed: { deleted: [{ type: 'releaseClaims', jobName: J1 }, ...DELETED_STATE] },
      Suspended: { deleted: DELETED_STATE },
      Blocked: { deleted: DELETED_STATE },
    },
  },
  {
    what: 'Model gone',
    apply: (f) => ({ world: world(f, { model: null }) }),
    expect: {
      WaitingForIdle: blocked('ModelNotFound'),
      Starting: cancelled('ModelNotFound'),
      Running: cancelled('ModelNotFound'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: blocked('ModelNotFound'),
    },
  },
  {
    what: 'Model not Ready',
    apply: (f) => ({ world: world(f, { model: aModel({ ready: false, phase: 'Loading' }) }) }),
    expect: {
      WaitingForIdle: waiting('ModelNotReady'),
      Starting: cancelled('ModelNotReady'),
      Running: cancelled('ModelNotReady'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: waiting('ModelNotReady'),
    },
  },
  {
    what: 'Model moved to another node',
    apply: (f) => ({ world: world(f, { model: aModel({ node: OTHER_NODE }) }) }),
    expect: {
      WaitingForIdle: admit(1, OTHER_NODE),
      Starting: cancelled('NodeChanged'),
      Running: cancelled('NodeChanged'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: admit(1, OTHER_NODE),
    },
  },
  {
    what: 'Model node unresolved (no status.gpu.node, no hostname selector)',
    apply: (f) => ({ world: world(f, { model: aModel({ node: undefined }) }) }),
    expect: {
      WaitingForIdle: waiting('NodeUnresolved'),
      Starting: cancelled('NodeUnresolved'),
      Running: cancelled('NodeUnresolved'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: waiting('NodeUnresolved'),
    },
  },
  {
    what: 'Job complete',
    apply: (f) => ({ world: jobOutcome(f, 'Complete') }),
    expect: {
      WaitingForIdle: NA,
      Starting: succeeded(),
      Running: succeeded(),
      // The delete raced the Job's own completion: the outcome wins.
      Cancelling: succeeded(),
      Succeeded: NA,
      Failed: NA,
      Suspended: NA,
      Blocked: NA,
    },
  },
  {
    what: 'Job failed',
    apply: (f) => ({ world: jobOutcome(f, 'Failed') }),
    expect: {
      WaitingForIdle: NA,
      Starting: failed(),
      Running: failed(),
      // Its Job is being deleted by the cancel: the Failed condition is the deletion's (its pods counted as
      // failures), the preemption stands. (A Complete Job still wins: the work was done.)
      Cancelling: SAME,
      Succeeded: NA,
      Failed: NA,
      Suspended: NA,
      Blocked: NA,
    },
  },
  {
    what: 'cancel request after the Job was deleted and then Failed (its deleted pods counted as failures)',
    apply: (f) => ({
      world: world(f, { idle: anIdleState(f.now), job: deletedThenFailed(f, 2 * SECOND, SECOND) }),
      trigger: cancelRequest(f.now),
    }),
    expect: {
      WaitingForIdle: waiting('IdleWindow', armAt(T0 + 20 * MINUTE)),
      // We cancelled it: the failure its deletion caused is no failure of the backfill's.
      Starting: cancelled('ForegroundDemand'),
      Running: cancelled('ForegroundDemand'),
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: waiting('IdleWindow'),
    },
  },
  {
    what: 'Job deleted and then Failed, seen before the cancel request (a Job status event)',
    apply: (f) => ({ world: world(f, { job: deletedThenFailed(f, 2 * SECOND, SECOND) }) }),
    expect: {
      WaitingForIdle: NA,
      // Being deleted by someone: the attempt waits for it to go, then ends as preempted ('Job gone').
      Starting: SAME,
      Running: SAME,
      Cancelling: SAME,
      Succeeded: NA,
      Failed: NA,
      Suspended: NA,
      Blocked: NA,
    },
  },
  {
    what: 'Job Failed before its deletion (a failure of its own, then a cancel deleted it)',
    apply: (f) => ({
      world: world(f, { idle: anIdleState(f.now), job: deletedThenFailed(f, SECOND, 2 * SECOND) }),
      trigger: cancelRequest(f.now),
    }),
    expect: {
      WaitingForIdle: waiting('IdleWindow', armAt(T0 + 20 * MINUTE)),
      Starting: failed(),
      Running: failed(),
      // Cancelling was decided on a Job without a Failed condition: the cancel came first, it stands.
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: waiting('IdleWindow'),
    },
  },
  {
    what: 'Job gone',
    apply: (f) => ({ world: world(f, { job: null }) }),
    expect: {
      WaitingForIdle: NA,
      // Admitted but the Job is missing (a crash between the state write and the create): create it, same name.
      Starting: { phase: 'Starting', reason: 'JobCreated', actions: [{ type: 'createJob', jobName: J1, attempt: 1 }] },
      // Someone removed the Job: the attempt ends (told as Cancelled) and a fresh window starts now.
      Running: waiting('IdleWindow', CANCELLED_EVENT, { type: 'releaseClaims', jobName: J1 }, armAt(T0 + 25 * MINUTE)),
      Cancelling: waiting('IdleWindow', { type: 'releaseClaims', jobName: J1 }, armAt(T0 + 25 * MINUTE)),
      Succeeded: SAME,
      Failed: SAME,
      Suspended: NA,
      Blocked: NA,
    },
  },
  {
    what: 'template (CronJob) missing',
    apply: (f) => ({ world: world(f, { template: templateMissing }) }),
    expect: {
      WaitingForIdle: blocked('TemplateNotFound', armAt(T0 + 10 * MINUTE + 15 * SECOND)),
      Starting: SAME,
      Running: SAME,
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: blocked('TemplateNotFound', armAt(T0 + 11 * MINUTE + 15 * SECOND)),
    },
  },
  {
    what: 'template requests a GPU',
    apply: (f) => ({ world: world(f, { template: templateWithGpu() }) }),
    expect: {
      WaitingForIdle: blocked('GPURequestForbidden', armAt(T0 + 10 * MINUTE + 15 * SECOND)),
      Starting: SAME,
      Running: SAME,
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: blocked('GPURequestForbidden', armAt(T0 + 11 * MINUTE + 15 * SECOND)),
    },
  },
  ...(
    [
      ['invalid env name (defence in depth)', { env: { '1BAD': 'x' } }, 'InvalidEnvironment'],
      [
        'reserved env FLEXINFER_WORKLOAD_CLASS (defence in depth)',
        { env: { FLEXINFER_WORKLOAD_CLASS: 'fg' } },
        'InvalidEnvironment',
      ],
      ['repeatAfter below 1m (defence in depth)', { repeatAfter: '30s' }, 'InvalidRepeatAfter'],
      ['repeatAfter not a duration (defence in depth)', { repeatAfter: '1 day' }, 'InvalidRepeatAfter'],
    ] as const
  ).map(
    ([what, spec, reason]): Change => ({
      what,
      apply: (f) => ({ world: respec(f, spec) }),
      expect: {
        WaitingForIdle: blocked(reason),
        // A running attempt is cancelled as a spec change; Blocked follows once its Job is gone.
        Starting: cancelled('SpecChanged'),
        Running: cancelled('SpecChanged'),
        Cancelling: SAME,
        Succeeded: blocked(reason, cleanup),
        Failed: blocked(reason, cleanup),
        Suspended: blocked(reason),
        Blocked: blocked(reason),
      },
    }),
  ),
  {
    what: 'contender (another backfill active on the same model)',
    apply: (f) => ({ world: world(f, { contenders: [aContender()] }) }),
    expect: {
      WaitingForIdle: blocked('ConcurrentBackfill', armAt(T0 + 10 * MINUTE + 15 * SECOND)),
      Starting: SAME,
      Running: SAME,
      Cancelling: SAME,
      Succeeded: SAME,
      Failed: SAME,
      Suspended: SAME,
      Blocked: blocked('ConcurrentBackfill', armAt(T0 + 11 * MINUTE + 15 * SECOND)),
    },
  },
]

function succeeded(): Expected {
  return {
    phase: 'Succeeded',
    reason: 'JobComplete',
    actions: [
      { type: 'releaseClaims', jobName: J1 },
      { type: 'recordEvent', eventType: 'Normal', reason: 'Completed' },
    ],
  }
}
function failed(): Expected {
  return {
    phase: 'Failed',
    reason: 'JobFailed',
    actions: [
      { type: 'releaseClaims', jobName: J1 },
      { type: 'recordEvent', eventType: 'Warning', reason: 'Failed' },
    ],
  }
}

const FIXTURES = Object.fromEntries(PHASES.map((p) => [p, fixture(p)])) as Record<Phase, Fixture>

const expectActions = (actions: Action[], expected: ActionLike[]) => {
  expect(actions).toHaveLength(expected.length)
  expect(actions).toEqual(expect.arrayContaining(expected.map((a) => expect.objectContaining(a))))
}

describe('phase fixtures', () => {
  it.each(PHASES)('%s is reached by a real story', (phase) => {
    const f = FIXTURES[phase]
    expect(f.state.phase).toBe(phase)
    expect((REASONS[phase] as readonly string[]).includes(f.reason)).toBe(true)
  })
})

describe('decide: every phase × every trigger or world change', () => {
  const rows = CHANGES.flatMap((c) => PHASES.map((p) => [p, c.what, c, p] as const)).filter(
    ([, , c, p]) => c.expect[p] !== NA,
  )
  it.each(rows)('%s + %s', (_p, _w, change, phase) => {
    const f = FIXTURES[phase]
    const { world, trigger = { type: 'timer' }, now = f.now } = change.apply(f)
    if (phase === 'WaitingForIdle' || phase === 'Suspended' || phase === 'Blocked') expect(noJob(f)).toBe(true)
    const before = structuredClone(world)
    // Frozen, as the parsed states the readers remember are: a change to anything decide() was given throws.
    const d = decide(deepFreeze(world), trigger, now)
    expect(world, 'decide must not mutate what it observed').toEqual(before)
    const cell = change.expect[phase]
    if (cell === SAME) {
      expect(d.state).toMatchObject({ phase: f.phase, reason: f.reason })
      expectActions(d.actions, [])
      return
    }
    if (cell === NA) return
    if ('deleted' in cell) {
      expect(d.state).toBeNull()
      expect(d.status).toBeNull()
      expectActions(d.actions, cell.deleted)
      return
    }
    expect({ phase: d.state?.phase, reason: d.state?.reason }).toEqual({ phase: cell.phase, reason: cell.reason })
    expect(d.status).toMatchObject({ phase: cell.phase, reason: cell.reason })
    expectActions(d.actions, cell.actions)
  })

  it('every cell lands on a reason of its phase (REASONS)', () => {
    for (const change of CHANGES) {
      for (const phase of PHASES) {
        const cell = change.expect[phase]
        if (typeof cell === 'object' && 'phase' in cell) {
          expect(REASONS[cell.phase] as readonly string[], `${phase} + ${change.what}`).toContain(cell.reason)
        }
      }
    }
  })
})

describe('decide: focused transitions', () => {
  it('a new declaration waits for its first full window, gets the finalizer, then admits attempt 1', () => {
    const t = new Timeline(aWorld({ backfill: aBackfill({ finalizers: [] }) }))
    const first = t.step(T0)
    expect(first.state).toMatchObject({ phase: 'WaitingForIdle', reason: 'IdleWindow', windowStart: iso(T0) })
    expectActions(first.actions, [{ type: 'addFinalizer' }, armAt(T0 + 10 * MINUTE)])
    t.change((o) => ({
      backfill: o.backfill && { ...o.backfill, metadata: { ...o.backfill.metadata, finalizers: [FINALIZER] } },
    }))
    expect(t.step(T0 + 10 * MINUTE - 1).actions).toEqual([])
    const admitted = t.step(T0 + 10 * MINUTE)
    expect(admitted.state).toMatchObject({
      phase: 'Starting',
      attempts: 1,
      jobName: J1,
      nodeName: NODE,
      startedAt: iso(T0 + 10 * MINUTE),
      idleSince: iso(T0),
    })
    const create = admitted.actions.find((a) => a.type === 'createJob')
    expect(create).toEqual({
      type: 'createJob',
      jobName: J1,
      attempt: 1,
      node: NODE,
      spec: { idleForMs: 10 * MINUTE, maxRunDurationMs: 30 * MINUTE, repeatAfterMs: 0 },
    })
  })

  it('the idle gate comes before gaming, lease and contender gates', () => {
    const t = new Timeline(
      aWorld({
        gamingSessions: [aGamingSession()],
        leases: [aLease()],
        contenders: [aContender()],
      }),
    )
    expect(t.step(T0 + 5 * MINUTE).state).toMatchObject({ phase: 'WaitingForIdle', reason: 'IdleWindow' })
    expect(t.step(T0 + 15 * MINUTE).state).toMatchObject({ phase: 'Blocked', reason: 'GamingIntent' })
    t.change(() => ({ gamingSessions: [] }))
    expect(t.step(T0 + 16 * MINUTE).state).toMatchObject({ phase: 'Blocked', reason: 'GPULeaseActive' })
    t.change(() => ({ leases: [] }))
    expect(t.step(T0 + 17 * MINUTE).state).toMatchObject({ phase: 'Blocked', reason: 'ConcurrentBackfill' })
    t.change(() => ({ contenders: [] }))
    expect(t.step(T0 + 18 * MINUTE).state).toMatchObject({ phase: 'Starting', reason: 'JobCreated' })
  })

  it('gaming sessions block only on the model node, in gaming mode, and until they expire', () => {
    const at = T0 + 10 * MINUTE
    const phaseWith = (sessions: Observed['gamingSessions']) =>
      decide(aWorld({ state: FIXTURES.WaitingForIdle.state, gamingSessions: sessions }), { type: 'timer' }, at).state
        ?.phase
    expect(phaseWith([aGamingSession({ nodeName: OTHER_NODE })])).toBe('Starting')
    expect(phaseWith([aGamingSession({ mode: 'streaming' })])).toBe('Starting')
    expect(phaseWith([aGamingSession({ expiresAt: iso(at) })])).toBe('Starting')
    expect(phaseWith([aGamingSession({ expiresAt: iso(at + 1) })])).toBe('Blocked')
    // No expiry, or one that cannot be parsed: fail safe, the session blocks.
    expect(phaseWith([aGamingSession({ expiresAt: undefined })])).toBe('Blocked')
    expect(phaseWith([aGamingSession({ expiresAt: 'tomorrow' })])).toBe('Blocked')
  })

  it('GPU leases block on the model node or GPU group only, until they expire', () => {
    const at = T0 + 10 * MINUTE
    const phaseWith = (leases: Observed['leases']) =>
      decide(aWorld({ state: FIXTURES.WaitingForIdle.state, leases }), { type: 'timer' }, at).state?.phase
    expect(phaseWith([aLease({ node: OTHER_NODE, group: 'other-group' })])).toBe('Starting')
    expect(phaseWith([aLease({ node: undefined, group: 'gpu-group-1' })])).toBe('Blocked')
    expect(phaseWith([aLease({ expiresAt: iso(at - 1) })])).toBe('Starting')
  })

  it('a Blocked reason is recorded as an event once, not on every re-check', () => {
    // The template is checked before the model and the idle window: Blocked from the first decision.
    const t = new Timeline(aWorld({ template: templateMissing }))
    const events = (d: Decision) => d.actions.filter((a) => a.type === 'recordEvent')
    expect(events(t.step(T0))).toHaveLength(1)
    expect(t.state).toMatchObject({ phase: 'Blocked', reason: 'TemplateNotFound' })
    expect(events(t.step(T0 + 15 * SECOND))).toHaveLength(0)
    t.change(() => ({ template: templateWithGpu() }))
    expect(events(t.step(T0 + 10 * MINUTE + 30 * SECOND))).toHaveLength(1)
  })

  it('a pod-level GPU violation (pod resources, DRA claim) says "pod spec", not an empty container name', () => {
    const gpu = { container: '', resource: 'resourceClaims.gpu', quantity: 'resourceClaimTemplate single-gpu' }
    const d = decide(aWorld({ template: templateWithGpu(gpu) }), { type: 'timer' }, T0)
    expect(d.state).toMatchObject({ phase: 'Blocked', reason: 'GPURequestForbidden' })
    expect(d.state?.message).toBe(
      'CronJob tpl pod spec sets resourceClaims.gpu=resourceClaimTemplate single-gpu; backfill must not request a GPU',
    )
  })

  it('a Model that turns Ready starts a fresh window from that moment', () => {
    const t = new Timeline(aWorld({ model: aModel({ ready: false, phase: 'Pending' }) }))
    expect(t.step(T0).state).toMatchObject({ phase: 'WaitingForIdle', reason: 'ModelNotReady' })
    t.change(() => ({ model: aModel() }))
    const ready = t.step(T0 + 20 * MINUTE)
    expect(ready.state).toMatchObject({
      phase: 'WaitingForIdle',
      reason: 'IdleWindow',
      windowStart: iso(T0 + 20 * MINUTE),
    })
    expectActions(ready.actions, [armAt(T0 + 30 * MINUTE)])
    expect(t.step(T0 + 30 * MINUTE).state?.phase).toBe('Starting')
  })

  it('a Model that appears after ModelNotFound starts a fresh window from that moment too', () => {
    const t = new Timeline(aWorld({ model: null }))
    expect(t.step(T0).state).toMatchObject({ phase: 'Blocked', reason: 'ModelNotFound' })
    t.change(() => ({ model: aModel() }))
    const found = t.step(T0 + 20 * MINUTE)
    expect(found.state).toMatchObject({
      phase: 'WaitingForIdle',
      reason: 'IdleWindow',
      windowStart: iso(T0 + 20 * MINUTE),
    })
    expectActions(found.actions, [armAt(T0 + 30 * MINUTE)])
  })

  it('the first Running observation records an event, later ones do not; useful time runs from the Job creation', () => {
    const f = FIXTURES.Starting
    expect(f.state).toMatchObject({ startedAt: iso(T0 + 10 * MINUTE), runningSince: iso(T0 + 10 * MINUTE) })
    const t = new Timeline(f.world)
    t.change((o) => ({ job: o.job && { ...o.job, started: true } }))
    const running = t.step(T0 + 12 * MINUTE)
    expect(running.state).toMatchObject({ phase: 'Running', reason: 'JobRunning', runningSince: iso(T0 + 10 * MINUTE) })
    expectActions(running.actions, [{ type: 'recordEvent', reason: 'Running' }])
    expect(t.step(T0 + 13 * MINUTE).actions).toEqual([])
    expect(t.state.runningSince).toBe(iso(T0 + 10 * MINUTE))
  })

  it('a second cancel reason while Cancelling keeps the first and re-issues the delete if the Job is not going', () => {
    const f = FIXTURES.Cancelling
    const d = decide(
      { ...f.world, job: aJob(J1, { started: true }), gamingSessions: [aGamingSession()] },
      { type: 'timer' },
      f.now,
    )
    expect(d.state).toMatchObject({ phase: 'Cancelling', reason: 'ForegroundDemand' })
    expectActions(d.actions, [{ type: 'deleteJob', jobName: J1, why: 'ForegroundDemand' }])
    expect(d.state?.counters.preemptions).toEqual({ foreground: 1 })
  })

  it.each(['Starting', 'Running'] as const)(
    '%s: a Job the cancel function removed before the decision is a preemption of that reason, still an attempt',
    (phase) => {
      const f = FIXTURES[phase]
      const d = decide({ ...f.world, job: null }, cancelRequest(f.now, 'GamingIntent'), f.now)
      expect(d.state).toMatchObject({ phase: 'WaitingForIdle', attempts: 1, windowStart: iso(f.now) })
      expect(d.state?.counters).toMatchObject({ starts: 1, preemptions: { gaming: 1 } })
      expect(d.actions.some((a) => a.type === 'createJob')).toBe(false)
    },
  )

  it('a Starting attempt whose Job never appeared and is no longer admissible is abandoned (not counted)', () => {
    const f = FIXTURES.Starting
    const d = decide({ ...f.world, job: null, gamingSessions: [aGamingSession()] }, { type: 'timer' }, f.now)
    expect(d.state).toMatchObject({ attempts: 0, jobName: undefined, windowStart: iso(f.now) })
    expect(d.state?.counters.starts).toBe(0)
    expect(d.state?.phase).toBe('WaitingForIdle')
    expect(d.actions).toContainEqual({ type: 'releaseClaims', jobName: J1 })
    expect(d.actions.some((a) => a.type === 'createJob')).toBe(false)
  })

  it('the ModelBackfill gone without its finalizer: state, timer and claims are dropped', () => {
    const f = FIXTURES.Running
    // Nothing left to decide: no check is evaluated.
    const unreached = CHECKS.map((check) => ({ check, verdict: 'not-reached', evidence: 'not evaluated' }))
    const d = decide({ ...f.world, backfill: null }, { type: 'resource' }, f.now)
    expect(d).toEqual({
      state: null,
      status: null,
      actions: [{ type: 'cancelTimer' }, { type: 'deleteState' }, { type: 'releaseClaims', jobName: J1 }],
      checks: unreached,
    })
    expect(decide(aWorld({ backfill: null }), { type: 'resource' }, f.now)).toEqual({
      state: null,
      status: null,
      actions: [],
      checks: unreached,
    })
  })

  it('deletion removes the Job first, then the finalizer and the state once the Job is gone', () => {
    const t = new Timeline(FIXTURES.Running.world)
    t.change((o) => ({
      backfill: o.backfill && {
        ...o.backfill,
        metadata: { ...o.backfill.metadata, deletionTimestamp: iso(T0 + 15 * MINUTE) },
      },
    }))
    const first = t.step(T0 + 15 * MINUTE)
    expect(first.actions.map((a) => a.type)).not.toContain('removeFinalizer')
    expect(first.actions).toContainEqual({ type: 'deleteJob', jobName: J1, why: 'Deleted' })
    // The reference counts no preemption for a deletion; the time run until then was useful all the same.
    expect(t.state.counters.preemptions).toEqual({})
    expect(t.state.counters.usefulSeconds).toBe(5 * 60)
    t.change((o) => ({ job: o.job && { ...o.job, deleting: true } }))
    expect(t.step(T0 + 15 * MINUTE + SECOND).actions).toEqual([])
    t.change(() => ({ job: null }))
    const last = t.step(T0 + 15 * MINUTE + 2 * SECOND)
    expect(last.actions).toEqual([
      { type: 'releaseClaims', jobName: J1 },
      { type: 'cancelTimer' },
      { type: 'removeFinalizer' },
      { type: 'deleteState' },
    ])
  })

  it('initial state seeds attempts from an existing status (migration from FlexInfer’s controller)', () => {
    const b = aBackfill({ status: { attempts: 7 } })
    expect(initialState(b, T0)).toMatchObject({ attempts: 7, phase: 'WaitingForIdle', windowStart: iso(T0) })
    const t = new Timeline(aWorld({ backfill: b }))
    t.step(T0)
    expect(t.step(T0 + 10 * MINUTE).state).toMatchObject({ attempts: 8, jobName: J(8) })
  })
})

describe('a preempted attempt whose Job the Job controller marks Failed while it is deleted', () => {
  // Seen on the real servers (test/integration/backfill/preemption-outcome.test.ts): the attempt's pods deleted with
  // its Job count as failures (backoffLimit 0), and the Job may report Failed/BackoffLimitExceeded before it is gone.
  const fg = T0 + 14 * MINUTE
  const second = (at: number) => iso(Math.floor(at / 1000) * 1000)
  /** The Job marked Failed at failedAt; deleted at deletedAt, or (undefined) its deletion not shown yet. */
  const failedJob = (o: Observed, failedAt: number, deletedAt?: number): Partial<Observed> => ({
    job: o.job && {
      ...o.job,
      deleting: deletedAt !== undefined,
      deletedAt: deletedAt === undefined ? undefined : second(deletedAt),
      outcome: 'Failed',
      outcomeMessage: 'Job has reached the specified backoff limit',
      outcomeTime: second(failedAt),
    },
  })
  const story = (first: 'lifecycle' | 'cancel', failedAt: number) => {
    const t = new Timeline(FIXTURES.Running.world)
    t.change((o) => ({ idle: anIdleState(fg), ...failedJob(o, failedAt, fg) }))
    // Either the Job's status event (lifecycle) or the cancel's bookkeeping decides first.
    const events = first === 'lifecycle' ? [t.step(fg + 50), t.step(fg + 100, cancelRequest(fg))] : []
    if (first === 'cancel') events.push(t.step(fg + 100, cancelRequest(fg)), t.step(fg + 150))
    const end = t.change(() => ({ job: null })).step(fg + SECOND)
    return { t, actions: [...events, end].flatMap((d) => d.actions), end }
  }

  it.each([
    ['lifecycle', 'the same second'],
    ['cancel', 'the same second'],
    ['lifecycle', 'the next second'],
    ['cancel', 'the next second'],
  ] as const)('decided first by %s, failed in %s as the deletion: one preemption, no failure', (first, when) => {
    const { t, actions, end } = story(first, when === 'the same second' ? fg : fg + SECOND)
    expect(end.state).toMatchObject({ phase: 'WaitingForIdle', reason: 'IdleWindow', attempts: 1 })
    expect(t.state.counters).toMatchObject({ starts: 1, success: 0, failed: 0, preemptions: { foreground: 1 } })
    const events = actions.filter((a) => a.type === 'recordEvent').map((a) => a.reason)
    expect(events).toEqual(['BackfillCancelled'])
  })

  it('a Job that Failed a second before its deletion failed on its own: Failed/JobFailed', () => {
    const t = new Timeline(FIXTURES.Running.world)
    const d = t
      .change((o) => ({ idle: anIdleState(fg), ...failedJob(o, fg - SECOND, fg) }))
      .step(fg + 100, cancelRequest(fg))
    expect(d.state).toMatchObject({ phase: 'Failed', reason: 'JobFailed' })
    expect(t.state.counters).toMatchObject({ failed: 1, preemptions: {} })
  })

  it('Cancelling and a Job that Failed before the request, not being deleted (the DELETE never took): the outcome wins', () => {
    const f = FIXTURES.Cancelling
    const failedAt = iso(fg - SECOND)
    const job = f.world.job && { ...f.world.job, deleting: false, outcome: 'Failed' as const, outcomeTime: failedAt }
    const d = decide({ ...f.world, job }, { type: 'resource' }, f.now)
    expect(d.state).toMatchObject({ phase: 'Failed', reason: 'JobFailed' })
    expect(d.state?.counters).toMatchObject({ failed: 1, preemptions: { foreground: 0 } })
  })

  // cancel sends the pods' DELETE beside the Job's (functions/cancel/batch.ts): the Job controller may mark the Job
  // Failed before its own DELETE shows, or the Job shows Failed and then is simply gone. The foreground request that
  // broke the window was stored before any of that (demand saw it there), so it tells the two apart.
  it.each([
    ['the idle state', (at: number) => ({ idle: anIdleState(at) })],
    ['the request stream only (no idle write yet)', (at: number) => ({ lastRequestAt: iso(at) })],
  ] as const)(
    'Running, Failed (not deleting) in the second of a request seen in %s: a preemption, then the next window',
    (_, seen) => {
      const t = new Timeline(FIXTURES.Running.world)
      // The request at fg + 700 ms, the Failed condition stamped fg (its whole second), before any deletion shows.
      const d = t.change((o) => ({ ...seen(fg + 700), ...failedJob(o, fg + 800) })).step(fg + 900)
      expect(d.state).toMatchObject({ phase: 'Cancelling', reason: 'ForegroundDemand' })
      expect(d.actions).toContainEqual(expect.objectContaining({ type: 'deleteJob', why: 'ForegroundDemand' }))
      const end = t.change(() => ({ job: null })).step(fg + 2 * SECOND)
      expect(end.state).toMatchObject({ phase: 'WaitingForIdle', reason: 'IdleWindow', attempts: 1 })
      expect(t.state.counters).toMatchObject({ failed: 0, preemptions: { foreground: 1 } })
    },
  )

  it('Running, Failed (not deleting) a second before the request that broke the window: it failed on its own', () => {
    const t = new Timeline(FIXTURES.Running.world)
    const d = t.change((o) => ({ idle: anIdleState(fg), ...failedJob(o, fg - SECOND) })).step(fg + 100)
    expect(d.state).toMatchObject({ phase: 'Failed', reason: 'JobFailed' })
    expect(t.state.counters).toMatchObject({ failed: 1, preemptions: {} })
  })

  it('Running, Failed (not deleting), no request after the window: it failed on its own', () => {
    const t = new Timeline(FIXTURES.Running.world)
    const d = t.change((o) => failedJob(o, fg)).step(fg + 100)
    expect(d.state).toMatchObject({ phase: 'Failed', reason: 'JobFailed' })
  })

  it('Cancelling and a Complete Job being deleted: the work was done, the completion wins', () => {
    const f = FIXTURES.Cancelling
    const job = f.world.job && { ...f.world.job, outcome: 'Complete' as const, outcomeTime: iso(f.now) }
    expect(decide({ ...f.world, job }, { type: 'resource' }, f.now).state).toMatchObject({ phase: 'Succeeded' })
  })
})

describe('after a cancel the next attempt needs a fresh full idle window', () => {
  it('the window restarts when the Job is gone, not at the foreground request or the cancel', () => {
    const t = new Timeline(FIXTURES.Running.world)
    const fg = T0 + 14 * MINUTE
    // Foreground request: the cancel function deletes the Job, then decides.
    t.change((o) => ({ idle: anIdleState(fg), job: o.job && { ...o.job, deleting: true } })).step(fg, cancelRequest(fg))
    expect(t.state).toMatchObject({ phase: 'Cancelling', reason: 'ForegroundDemand' })
    t.step(fg + SECOND)
    expect(t.state.phase).toBe('Cancelling')
    const gone = fg + 2 * MINUTE
    const d = t.change(() => ({ job: null })).step(gone)
    expect(d.state).toMatchObject({
      phase: 'WaitingForIdle',
      reason: 'IdleWindow',
      windowStart: iso(gone),
      idleSince: iso(gone),
      jobName: undefined,
      nodeName: NODE, // the model's node, no longer the attempt's (status.nodeName whenever resolved)
      startedAt: undefined,
      attempts: 1,
    })
    expectActions(d.actions, [{ type: 'releaseClaims', jobName: J1 }, armAt(gone + 10 * MINUTE)])
    // A window that would have been complete counted from the foreground request is not enough.
    expect(t.step(fg + 10 * MINUTE).state?.phase).toBe('WaitingForIdle')
    expect(t.step(gone + 10 * MINUTE - 1).state?.phase).toBe('WaitingForIdle')
    const second = t.step(gone + 10 * MINUTE)
    expect(second.state).toMatchObject({ phase: 'Starting', attempts: 2, jobName: J2, idleSince: iso(gone) })
  })

  it('a foreground request during the new window pushes admission further', () => {
    const t = new Timeline(FIXTURES.Cancelling.world)
    const gone = T0 + 16 * MINUTE
    t.change(() => ({ job: null })).step(gone)
    // No attempt holds the model, so nobody is asked to decide: the request only lands in the idle state.
    const fg = gone + 5 * MINUTE
    t.change(() => ({ idle: anIdleState(fg) }))
    expect(t.step(gone + 10 * MINUTE).state?.phase).toBe('WaitingForIdle')
    expect(t.step(fg + 10 * MINUTE).state?.phase).toBe('Starting')
  })
})

describe('timers are re-armed lazily', () => {
  it('a foreground request that moves the window later leaves the earlier pending timer alone', () => {
    const t = new Timeline()
    expectActions(t.step(T0).actions, [armAt(T0 + 10 * MINUTE)])
    for (const m of [3, 4, 7]) {
      // Any decision after the idle state moved (here: some unrelated resource event) arms nothing new.
      const at = T0 + m * MINUTE
      const d = t.change(() => ({ idle: anIdleState(at) })).step(at, { type: 'resource' })
      expect(d.actions).toEqual([])
      expect(t.state.timerAt).toBe(iso(T0 + 10 * MINUTE))
    }
    // The timer fires early for the moved window: the new due time is armed, once.
    const fired = t.step(T0 + 10 * MINUTE)
    expectActions(fired.actions, [armAt(T0 + 17 * MINUTE)])
    expect(t.state).toMatchObject({ phase: 'WaitingForIdle', timerAt: iso(T0 + 17 * MINUTE) })
    expect(t.step(T0 + 17 * MINUTE).state?.phase).toBe('Starting')
  })

  it('a timer that came due and was not re-armed is forgotten, so a past timerAt always means a lost timer', () => {
    // The resync sweep (pkg/core/resync.ts) takes a past timerAt as "fired but never handled": the decision that
    // handles the timer must not leave one behind when it wants no wake-up (here: the window ends, admission).
    const t = new Timeline()
    t.step(T0)
    expect(t.state.timerAt).toBe(iso(T0 + 10 * MINUTE))
    expect(t.step(T0 + 10 * MINUTE).state).toMatchObject({ phase: 'Starting' })
    expect(t.state.timerAt).toBeUndefined()
    // A model going away leaves a pending timer alone until it comes due; then it is dropped, not kept past due.
    const n = new Timeline()
    n.step(T0)
    n.change(() => ({ model: { ...aModel(), ready: false, phase: 'Loading' } }))
    expect(n.step(T0 + MINUTE, { type: 'resource' }).state).toMatchObject({ reason: 'ModelNotReady' })
    expect(n.state.timerAt).toBe(iso(T0 + 10 * MINUTE))
    expect(n.step(T0 + 10 * MINUTE).state?.timerAt).toBeUndefined()
  })

  it('a later pending timer is replaced by an earlier due time', () => {
    const t = new Timeline(aWorld({ idle: anIdleState(T0 + 5 * MINUTE) }))
    t.step(T0 + 5 * MINUTE)
    expect(t.state.timerAt).toBe(iso(T0 + 15 * MINUTE))
    // Spec change shortens idleFor: the due time moves earlier and is armed.
    t.change((o) => ({ backfill: o.backfill && withSpec(o.backfill, { idleFor: '2m' }) }))
    expectActions(t.step(T0 + 6 * MINUTE).actions, [armAt(T0 + 7 * MINUTE)])
  })
})

describe('repeatAfter', () => {
  const REPEAT = { repeatAfter: '1h' }
  const COMPLETED = T0 + 20 * MINUTE
  const NEXT = COMPLETED + HOUR

  it('success schedules the next run at completion + repeatAfter and arms a timer there', () => {
    const f = fixture('Succeeded', REPEAT)
    expect(f.state).toMatchObject({
      phase: 'Succeeded',
      reason: 'RepeatScheduled',
      completionTime: iso(COMPLETED),
      nextRunTime: iso(NEXT),
      timerAt: iso(NEXT),
    })
    expect(f.world.backfill?.status).toMatchObject({ nextRunTime: iso(NEXT), completionTime: iso(COMPLETED) })
    // Until then nothing happens, with or without the old Job.
    expect(decide(f.world, { type: 'timer' }, NEXT - 1).actions).toEqual([])
    expect(decide({ ...f.world, job: null }, { type: 'timer' }, NEXT - 1).state).toMatchObject({
      phase: 'Succeeded',
      reason: 'RepeatScheduled',
    })
  })

  it('at nextRunTime the old Job is removed first (RepeatCleanup), then every gate runs again', () => {
    const t = new Timeline(fixture('Succeeded', REPEAT).world)
    const cleanup = t.step(NEXT)
    expect(cleanup.state).toMatchObject({ phase: 'Succeeded', reason: 'RepeatCleanup', jobName: J1 })
    expectActions(cleanup.actions, [{ type: 'deleteJob', jobName: J1, why: 'RepeatCleanup' }])
    t.change((o) => ({ job: o.job && { ...o.job, deleting: true } }))
    expect(t.step(NEXT + SECOND).actions).toEqual([])
    expect(t.state.reason).toBe('RepeatCleanup')
    // Job gone and every gate passes (the model has been foreground-idle since T0): admitted right away.
    const again = t.change(() => ({ job: null })).step(NEXT + 2 * SECOND)
    expect(again.state).toMatchObject({ phase: 'Starting', attempts: 2, jobName: J2, nextRunTime: undefined })
  })

  it('when a gate does not pass at re-arm the declaration waits with RepeatDue', () => {
    const t = new Timeline(fixture('Succeeded', REPEAT).world)
    t.step(NEXT)
    const fg = NEXT - 5 * MINUTE
    t.change(() => ({ job: null, idle: anIdleState(fg) }))
    const due = t.step(NEXT + SECOND)
    expect(due.state).toMatchObject({ phase: 'WaitingForIdle', reason: 'RepeatDue', idleSince: iso(fg) })
    expectActions(due.actions, [armAt(fg + 10 * MINUTE)])
    expect(t.step(fg + 10 * MINUTE).state).toMatchObject({ phase: 'Starting', attempts: 2 })
  })

  it('RepeatDue survives re-checks and a not-Ready model does not skip the window', () => {
    const t = new Timeline(fixture('Succeeded', REPEAT).world)
    t.change(() => ({ job: null, idle: anIdleState(NEXT - MINUTE) })).step(NEXT)
    expect(t.state).toMatchObject({ phase: 'WaitingForIdle', reason: 'RepeatDue' })
    expect(t.step(NEXT + MINUTE).state).toMatchObject({ phase: 'WaitingForIdle', reason: 'RepeatDue' })
  })

  it('a Job removed by its TTL before nextRunTime: the cooldown still holds, then the gates run', () => {
    const t = new Timeline(fixture('Succeeded', REPEAT).world)
    const d = t.change(() => ({ job: null })).step(COMPLETED + 30 * MINUTE)
    expect(d.state).toMatchObject({ phase: 'Succeeded', reason: 'RepeatScheduled', jobName: undefined })
    expect(d.actions).toEqual([])
    expect(t.step(NEXT).state).toMatchObject({ phase: 'Starting', attempts: 2 })
  })

  it('Failed never repeats, even with repeatAfter and the Job gone', () => {
    const t = new Timeline(fixture('Failed', REPEAT).world)
    expect(t.state).toMatchObject({ phase: 'Failed', reason: 'JobFailed', nextRunTime: undefined })
    for (const [now, job] of [
      [NEXT, t.world.job],
      [NEXT + HOUR, null],
      [NEXT + 48 * HOUR, null],
    ] as const) {
      const d = t.change(() => ({ job })).step(now)
      expect(d.state).toMatchObject({ phase: 'Failed', reason: 'JobFailed', attempts: 1 })
      expect(d.actions.some((a) => a.type === 'createJob')).toBe(false)
    }
  })

  it('a one-shot Succeeded stays Succeeded', () => {
    const t = new Timeline(FIXTURES.Succeeded.world)
    for (const [now, job] of [
      [T0 + 2 * HOUR, t.world.job],
      [T0 + 3 * HOUR, null],
      [T0 + 100 * HOUR, null],
    ] as const) {
      const d = t.change(() => ({ job })).step(now)
      expect(d.state).toMatchObject({ phase: 'Succeeded', reason: 'JobComplete', attempts: 1 })
      expect(d.actions).toEqual([])
    }
  })

  it('a repeating Succeeded without a valid nextRunTime is Blocked (RepeatStateInvalid)', () => {
    const f = fixture('Succeeded', REPEAT)
    const state = f.state && { ...f.state, nextRunTime: undefined, jobName: undefined }
    const d = decide({ ...f.world, state, job: null }, { type: 'timer' }, NEXT)
    expect(d.state).toMatchObject({ phase: 'Blocked', reason: 'RepeatStateInvalid' })
  })
})

describe('a completed Job wins over a coincident cancel signal', () => {
  const COINCIDENT: [string, (o: Observed, now: number) => { world: Observed; trigger?: Trigger }][] = [
    ['foreground', (o, now) => ({ world: { ...o, idle: anIdleState(now) }, trigger: cancelRequest(now) })],
    [
      'cancel request for a deleted Job',
      (o, now) => ({
        world: { ...o, job: o.job && { ...o.job, deleting: true }, idle: anIdleState(now) },
        trigger: cancelRequest(now),
      }),
    ],
    ['gaming session', (o) => ({ world: { ...o, gamingSessions: [aGamingSession()] } })],
    ['GPU lease', (o) => ({ world: { ...o, leases: [aLease()] } })],
    ['Model not Ready', (o) => ({ world: { ...o, model: aModel({ ready: false }) } })],
    ['Model gone', (o) => ({ world: { ...o, model: null } })],
    ['node moved', (o) => ({ world: { ...o, model: aModel({ node: OTHER_NODE }) } })],
    ['suspend', (o) => ({ world: { ...o, backfill: o.backfill && withSpec(o.backfill, { suspend: true }) } })],
  ]
  it.each(COINCIDENT)('job complete AND %s in one observation → Succeeded, no preemption', (_what, change) => {
    for (const phase of ['Starting', 'Running'] as const) {
      const f = FIXTURES[phase]
      const done = { ...f.world, job: f.world.job && { ...f.world.job, outcome: 'Complete' as const } }
      const { world, trigger = { type: 'timer' } } = change(done, f.now)
      const d = decide(world, trigger, f.now)
      expect(d.state, phase).toMatchObject({ phase: 'Succeeded', reason: 'JobComplete' })
      expect(d.state?.counters).toMatchObject({ success: 1, preemptions: {} })
      expect(d.actions.some((a) => a.type === 'deleteJob')).toBe(false)
    }
  })

  it('a completion observed after the cancel was issued takes the preemption back', () => {
    const f = FIXTURES.Cancelling
    expect(f.state.counters.preemptions).toEqual({ foreground: 1 })
    const d = decide(
      { ...f.world, job: f.world.job && { ...f.world.job, outcome: 'Complete' } },
      { type: 'timer' },
      f.now,
    )
    expect(d.state).toMatchObject({ phase: 'Succeeded', reason: 'JobComplete' })
    expect(d.state?.counters).toMatchObject({ success: 1, preemptions: { foreground: 0 } })
  })
})

describe('counters', () => {
  it('starts, success, failed and running-only useful seconds', () => {
    expect(FIXTURES.WaitingForIdle.state.counters).toEqual({
      starts: 0,
      success: 0,
      failed: 0,
      preemptions: {},
      usefulSeconds: 0,
    })
    expect(FIXTURES.Starting.state.counters).toMatchObject({ starts: 1, usefulSeconds: 0 })
    // From status.startedAt (the Job created at T0+10m, as the FlexInfer reference controller counts) to its completion at T0+20m;
    // the idle window before it is excluded.
    expect(FIXTURES.Succeeded.state.counters).toEqual({
      starts: 1,
      success: 1,
      failed: 0,
      preemptions: {},
      usefulSeconds: 10 * 60,
    })
    expect(FIXTURES.Failed.state.counters).toEqual({
      starts: 1,
      success: 0,
      failed: 1,
      preemptions: {},
      usefulSeconds: 10 * 60,
    })
    // Cancelled at T0+14m: 4 minutes since the Job was created.
    expect(FIXTURES.Cancelling.state.counters).toEqual({
      starts: 1,
      success: 0,
      failed: 0,
      preemptions: { foreground: 1 },
      usefulSeconds: 4 * 60,
      // Beyond the contract: the same running time, as a preempted attempt's.
      preemptedSeconds: 4 * 60,
    })
  })

  it('a run shorter than a second still counts: the Job reports its end in whole seconds, never past now', () => {
    const f = FIXTURES.Running
    const since = Date.parse(f.state.runningSince as string) // a whole second, like Kubernetes times
    const job = f.world.job && { ...f.world.job, outcome: 'Complete' as const, outcomeTime: iso(since) }
    expect(decide({ ...f.world, job }, { type: 'timer' }, since + 400).state?.counters.usefulSeconds).toBeCloseTo(0.4)
    expect(decide({ ...f.world, job }, { type: 'timer' }, since + 5000).state?.counters.usefulSeconds).toBeCloseTo(
      0.999,
    )
  })

  it('a Job that completes before any decision saw it running counts from status.startedAt, not 0', () => {
    const f = FIXTURES.Starting
    const d = decide(
      {
        ...f.world,
        job: f.world.job && { ...f.world.job, outcome: 'Complete', outcomeTime: iso(T0 + 10 * MINUTE + 30 * SECOND) },
      },
      { type: 'timer' },
      f.now,
    )
    expect(d.state?.counters.success).toBe(1)
    expect(d.state?.counters.usefulSeconds).toBeCloseTo(30.999)
  })

  // A state written before useful time ran from startedAt: a Starting attempt carries no runningSince and a Running
  // one the time it was first seen running. Both count from startedAt, without counting twice.
  it.each([
    ['Starting', undefined],
    ['Running', iso(T0 + 11 * MINUTE)],
  ] as const)('a %s state of the previous release counts from startedAt', (phase, runningSince) => {
    const f = FIXTURES[phase]
    const old = { ...structuredClone(f.state), runningSince }
    const done = f.world.job && { ...f.world.job, outcome: 'Complete' as const, outcomeTime: iso(T0 + 20 * MINUTE) }
    const d = decide({ ...f.world, state: old, job: done }, { type: 'timer' }, T0 + 21 * MINUTE)
    expect(d.state?.counters.usefulSeconds).toBeCloseTo(10 * 60 + 0.999)
    const again = decide({ ...f.world, state: d.state, job: done }, { type: 'timer' }, T0 + 22 * MINUTE)
    expect(again.state?.counters.usefulSeconds).toBeCloseTo(10 * 60 + 0.999)
  })

  const BY_REASON: [string, string, (f: Fixture) => { world: Observed; trigger?: Trigger }][] = [
    ['foreground', 'ForegroundDemand', (f) => ({ world: { ...f.world, idle: anIdleState(f.now) } })],
    ['gaming', 'GamingIntent', (f) => ({ world: { ...f.world, gamingSessions: [aGamingSession()] } })],
    ['gpu_lease', 'GPULeaseActive', (f) => ({ world: { ...f.world, leases: [aLease()] } })],
    ['suspended', 'Suspended', (f) => ({ world: { ...f.world, backfill: withSpec(aBackfill(), { suspend: true }) } })],
    [
      'spec_changed',
      'SpecChanged',
      (f) => ({ world: { ...f.world, backfill: withSpec(aBackfill(), { idleFor: '5m' }) } }),
    ],
    ['model_unavailable', 'ModelNotFound', (f) => ({ world: { ...f.world, model: null } })],
    // The contract maps these as the FlexInfer reference controller does: only a missing Model is model_unavailable.
    ['other', 'ModelNotReady', (f) => ({ world: { ...f.world, model: aModel({ ready: false }) } })],
    ['other', 'NodeChanged', (f) => ({ world: { ...f.world, model: aModel({ node: OTHER_NODE }) } })],
    ['other', 'NodeUnresolved', (f) => ({ world: { ...f.world, model: aModel({ node: undefined }) } })],
    ['other', '(Job removed by someone else)', (f) => ({ world: { ...f.world, job: null } })],
  ]
  it.each(BY_REASON)('preemption %s for %s, counted once, with the running time', (metric, _reason, change) => {
    const f = FIXTURES.Running
    const { world, trigger = { type: 'timer' } } = change(f)
    const d = decide(world, trigger, f.now)
    expect(d.state?.counters.preemptions).toEqual({ [metric]: 1 })
    expect(d.state?.counters.usefulSeconds).toBe(5 * 60)
    // Deciding again on the result (the Job not yet gone) does not count it twice.
    const again = decide({ ...world, state: d.state }, trigger, f.now + SECOND)
    expect(again.state?.counters.preemptions).toEqual({ [metric]: 1 })
    expect(again.state?.counters.usefulSeconds).toBe(5 * 60)
  })

  it('attempts counts every created Job, retries after preemption included', () => {
    const t = new Timeline()
    t.step(T0)
    let now = T0 + 10 * MINUTE
    for (let attempt = 1; attempt <= 3; attempt++) {
      const d = t.step(now)
      expect(d.actions).toContainEqual(expect.objectContaining({ type: 'createJob', jobName: J(attempt), attempt }))
      t.change(() => ({ job: aJob(J(attempt), { started: true }) })).step(now + MINUTE)
      t.change(() => ({ idle: anIdleState(now + 2 * MINUTE) })).step(now + 2 * MINUTE)
      t.change(() => ({ job: null })).step(now + 3 * MINUTE)
      expect(t.state).toMatchObject({ phase: 'WaitingForIdle', attempts: attempt })
      now += 13 * MINUTE
    }
    // Each attempt counts from its Job's creation to its cancel two minutes later.
    expect(t.state.counters).toMatchObject({ starts: 3, preemptions: { foreground: 3 }, usefulSeconds: 6 * 60 })
    expect(t.world.backfill?.status?.attempts).toBe(3)
  })
})

describe('status projection', () => {
  const ready = (d: Decision | Fixture) => {
    const status = 'status' in d ? d.status : d.world.backfill?.status
    return status?.conditions?.find((c) => c.type === 'Ready')?.status
  }

  it.each(PHASES)('%s: Ready condition True only while Running or Succeeded', (phase) => {
    const f = FIXTURES[phase]
    expect(ready(f)).toBe(phase === 'Running' || phase === 'Succeeded' ? 'True' : 'False')
    const status = f.world.backfill?.status
    expect(status).toMatchObject({
      phase,
      reason: f.state.reason,
      message: f.state.message,
      observedGeneration: f.state.generation,
      attempts: f.state.attempts,
    })
    expect(status?.conditions).toEqual([
      expect.objectContaining({ type: 'Ready', reason: f.state.reason, observedGeneration: f.state.generation }),
    ])
    // No undefined keys reach the status subresource.
    expect(Object.values(status ?? {}).some((v) => v === undefined)).toBe(false)
  })

  it('reports the attempt: jobName, nodeName, startedAt, idleSince', () => {
    expect(FIXTURES.Running.world.backfill?.status).toMatchObject({
      jobName: J1,
      nodeName: NODE,
      startedAt: iso(T0 + 10 * MINUTE),
      idleSince: iso(T0),
      attempts: 1,
    })
    expect(FIXTURES.WaitingForIdle.world.backfill?.status).not.toHaveProperty('jobName')
  })

  it('observedGeneration is the generation the decision read, also during a SpecChanged cancel', () => {
    expect(FIXTURES.Suspended.world.backfill?.status?.observedGeneration).toBe(2)
    const f = FIXTURES.Running
    const d = decide({ ...f.world, backfill: withSpec(aBackfill(), { idleFor: '5m' }) }, { type: 'timer' }, f.now)
    // Cancelling the generation-1 attempt, having seen generation 2 (the FlexInfer reference controller reports the new one too).
    expect(d.status).toMatchObject({ phase: 'Cancelling', reason: 'SpecChanged', observedGeneration: 2 })
    expect(d.state?.generation).toBe(1)
    const t = new Timeline({ ...f.world, backfill: withSpec(aBackfill(), { idleFor: '5m' }) })
    t.step(f.now)
    expect(t.change(() => ({ job: null })).step(f.now + MINUTE).status?.observedGeneration).toBe(2)
  })

  it('lastTransitionTime moves only when the condition status flips', () => {
    const t = new Timeline()
    t.step(T0)
    const since = t.world.backfill?.status?.conditions?.[0]?.lastTransitionTime
    expect(since).toBe(iso(T0))
    t.step(T0 + 10 * MINUTE) // Starting: still False
    expect(t.world.backfill?.status?.conditions?.[0]).toMatchObject({ status: 'False', lastTransitionTime: since })
    t.change(() => ({ job: aJob(J1, { started: true }) })).step(T0 + 11 * MINUTE)
    expect(t.world.backfill?.status?.conditions?.[0]).toMatchObject({
      status: 'True',
      lastTransitionTime: iso(T0 + 11 * MINUTE),
    })
  })

  it('updatedAt only moves when the state changes', () => {
    const f = FIXTURES.Running
    const d = decide(f.world, { type: 'timer' }, f.now + HOUR)
    expect(d.state).toEqual(f.state)
  })
})

describe('checkSpec (defence in depth behind the CRD rules)', () => {
  // Objects admitted before the CRD had defaults may lack idleFor / maxRunDuration.
  const base = { modelRef: 'm', templateRef: 't' } as ModelBackfillSpec
  it('resolves defaults and durations', () => {
    expect(checkSpec(base)).toEqual({
      resolved: { idleForMs: 10 * MINUTE, maxRunDurationMs: 30 * MINUTE, repeatAfterMs: 0 },
    })
    expect(checkSpec({ ...base, idleFor: '90s', maxRunDuration: '1h30m', repeatAfter: '24h' })).toEqual({
      resolved: { idleForMs: 90 * SECOND, maxRunDurationMs: 90 * MINUTE, repeatAfterMs: 24 * HOUR },
    })
    expect(checkSpec({ ...base, repeatAfter: '0' })).toMatchObject({ resolved: { repeatAfterMs: 0 } })
    expect(checkSpec({ ...base, repeatAfter: '1m' })).toMatchObject({ resolved: { repeatAfterMs: MINUTE } })
  })

  it('falls back to the default for an unparsable or negative idleFor / maxRunDuration', () => {
    expect(checkSpec({ ...base, idleFor: 'soon', maxRunDuration: '-5m' })).toEqual({
      resolved: { idleForMs: 10 * MINUTE, maxRunDurationMs: 30 * MINUTE, repeatAfterMs: 0 },
    })
  })

  // The reference reads a zero idleFor / maxRunDuration as "use the default" and writes `0s` back into objects, so
  // after a takeover a literal zero would start at once and be killed after one second.
  it.each([
    [{ idleFor: '0s' }, { idleForMs: 10 * MINUTE, maxRunDurationMs: 30 * MINUTE }],
    [{ idleFor: '0' }, { idleForMs: 10 * MINUTE, maxRunDurationMs: 30 * MINUTE }],
    [{ maxRunDuration: '0s' }, { idleForMs: 10 * MINUTE, maxRunDurationMs: 30 * MINUTE }],
    [
      { idleFor: '0m0s', maxRunDuration: '0h' },
      { idleForMs: 10 * MINUTE, maxRunDurationMs: 30 * MINUTE },
    ],
    [
      { idleFor: '1s', maxRunDuration: '1s' },
      { idleForMs: SECOND, maxRunDurationMs: SECOND },
    ],
  ] as const)('zero means the default: %j → %j', (spec, resolved) => {
    expect(checkSpec({ ...base, ...spec })).toEqual({ resolved: { ...resolved, repeatAfterMs: 0 } })
  })

  it('a taken-over declaration with idleFor/maxRunDuration 0s waits the default window and runs 30m Jobs', () => {
    const backfill = aBackfill({ spec: { idleFor: '0s', maxRunDuration: '0s' } })
    const t = new Timeline(aWorld({ backfill }))
    expect(t.step(T0).state?.phase).toBe('WaitingForIdle')
    expect(t.step(T0 + 10 * MINUTE - 1).state?.phase).toBe('WaitingForIdle')
    const d = t.step(T0 + 10 * MINUTE)
    expect(d.actions).toContainEqual(
      expect.objectContaining({
        type: 'createJob',
        spec: { idleForMs: 10 * MINUTE, maxRunDurationMs: 30 * MINUTE, repeatAfterMs: 0 },
      }),
    )
  })

  it.each([
    [{ env: { '1ABC': 'x' } }, 'InvalidEnvironment'],
    [{ env: { 'A-B': 'x' } }, 'InvalidEnvironment'],
    [{ env: { '': 'x' } }, 'InvalidEnvironment'],
    [{ env: { FLEXINFER_WORKLOAD_CLASS: 'background' } }, 'InvalidEnvironment'],
    [{ env: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`V${i}`, 'x'])) }, 'InvalidEnvironment'],
    [{ repeatAfter: '59s' }, 'InvalidRepeatAfter'],
    [{ repeatAfter: '-5m' }, 'InvalidRepeatAfter'],
    [{ repeatAfter: 'daily' }, 'InvalidRepeatAfter'],
  ] as const)('%j → %s', (spec, reason) => {
    expect(checkSpec({ ...base, ...spec })).toMatchObject({ problem: { reason } })
  })

  it('accepts 32 valid env names, underscores and mixed case', () => {
    const env = Object.fromEntries(Array.from({ length: 32 }, (_, i) => [`_Var_${i}`, 'x']))
    expect(checkSpec({ ...base, env })).toHaveProperty('resolved')
  })
})

describe('refs that cannot name a Kubernetes object are Blocked before anything is read with them', () => {
  const HOSTILE = [
    'gemma 4',
    'Gemma',
    'llm*',
    'llm.>',
    'a..b',
    '.hidden',
    'x'.repeat(300),
    'modèle',
    'line\r\nbreak',
    '-llm',
    'llm/other',
  ]
  it.each(HOSTILE)('modelRef %j → Blocked/ModelNotFound with the reason in the message', (ref) => {
    const t = new Timeline(aWorld({ backfill: aBackfill({ spec: { modelRef: ref } }), model: null }))
    const d = t.step(T0)
    expect(d.state).toMatchObject({ phase: 'Blocked', reason: 'ModelNotFound' })
    expect(d.status?.message).toMatch(
      /^modelRef ".*"( \(\d+ characters\))? is not a valid Kubernetes object name .*no Model can have it$/s,
    )
    expect(d.status?.message?.length).toBeLessThan(300)
    expect(d.status?.message).not.toMatch(/[\r\n]/)
    expectActions(d.actions, [{ type: 'recordEvent', eventType: 'Warning', reason: 'Blocked' }])
    // Nothing wakes it but a spec change: no re-check timer, and a re-decision changes nothing.
    expect(t.step(T0 + HOUR).actions).toEqual([])
  })
  it.each(HOSTILE)('templateRef %j → Blocked/TemplateNotFound', (ref) => {
    const d = decide(
      aWorld({ backfill: aBackfill({ spec: { templateRef: ref } }), template: templateMissing }),
      { type: 'timer' },
      T0,
    )
    expect(d.state).toMatchObject({ phase: 'Blocked', reason: 'TemplateNotFound' })
    expect(d.status?.message).toMatch(
      /^templateRef ".*"( \(\d+ characters\))? is not a valid Kubernetes object name .*no CronJob can have it$/s,
    )
  })
  it('DNS subdomains of up to 253 characters are fine', () => {
    for (const ref of [
      'llm',
      'gemma-4',
      'gemma.4b.q8',
      `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`,
    ]) {
      expect('resolved' in checkSpec({ modelRef: ref, templateRef: ref } as ModelBackfillSpec), ref).toBe(true)
    }
  })
  it('a running attempt whose modelRef is changed to a bad one is cancelled (SpecChanged), then Blocked', () => {
    const f = FIXTURES.Running
    const b = withSpec(f.world.backfill as never, { modelRef: 'gemma 4' })
    const d = decide({ ...structuredClone(f.world), backfill: b }, { type: 'resource' }, f.now)
    expect(d.state).toMatchObject({ phase: 'Cancelling', reason: 'SpecChanged' })
    const after = decide(
      { ...structuredClone(f.world), backfill: b, state: d.state, job: null },
      { type: 'resource' },
      f.now,
    )
    expect(after.state).toMatchObject({ phase: 'Blocked', reason: 'ModelNotFound' })
  })
})

describe('a Job the apiserver refuses (quota, webhook, invalid) releases the attempt and is re-checked later', () => {
  const rejection = (jobName = J1): Trigger => ({
    type: 'jobRejected',
    jobName,
    message: 'jobs.batch "x" is forbidden: exceeded quota: q, requested: count/jobs.batch=1',
  })
  it('Starting + rejection → Blocked/JobRejected: claims released, Warning event, attempt not counted, re-check', () => {
    const f = FIXTURES.Starting
    const world = { ...structuredClone(f.world), job: null }
    const d = decide(world, rejection(), f.now)
    expect(d.state).toMatchObject({ phase: 'Blocked', reason: 'JobRejected', attempts: 0, rejections: 1 })
    expect(d.state?.counters.starts).toBe(0)
    expect(d.state?.jobName).toBeUndefined()
    // No attempt holds the node; it shows as the model's node (status.nodeName whenever resolved).
    expect(d.state?.nodeName).toBe(NODE)
    expect(d.state?.windowStart).toBe(f.state.windowStart) // no foreground request: the window still holds
    expect(d.status?.message).toMatch(
      /^Job .* was refused by the apiserver: jobs.batch "x" is forbidden: exceeded quota/,
    )
    expect(REASONS.Blocked as readonly string[]).toContain('JobRejected')
    expectActions(d.actions, [
      { type: 'releaseClaims', jobName: J1 },
      armAt(f.now + RECHECK_MS),
      { type: 'recordEvent', eventType: 'Warning', reason: 'Blocked' },
    ])
  })
  it('a rejection naming another attempt changes nothing (a stale report)', () => {
    const f = FIXTURES.Starting
    const d = decide({ ...structuredClone(f.world), job: null }, rejection(J2), f.now)
    expect(d.state).toMatchObject({ phase: 'Starting', attempts: 1 })
    expect(d.actions.map((a) => a.type)).toEqual(['createJob'])
  })
  it('held until the re-check (no event admits it sooner), admitted then; repeats back off up to a few minutes', () => {
    const f = FIXTURES.Starting
    const t = new Timeline({ ...structuredClone(f.world), job: null })
    let now = f.now
    const delays: number[] = []
    for (let i = 0; i < 6; i++) {
      const d = t.step(now, rejection())
      const at = Date.parse(d.state?.timerAt ?? '')
      delays.push(at - now)
      expect(t.step(at - 1, { type: 'resource' }).state).toMatchObject({ phase: 'Blocked', reason: 'JobRejected' })
      const again = t.step(at)
      expect(again.state).toMatchObject({ phase: 'Starting', attempts: 1, jobName: J1 })
      expect(again.actions.some((a) => a.type === 'createJob')).toBe(true)
      now = at
    }
    expect(delays).toEqual([1, 2, 4, 8, 16, 16].map((k) => k * RECHECK_MS))
    expect(MAX_REJECTED_RECHECK_MS).toBe(16 * RECHECK_MS)
    // Created at last: the Job observed resets the back-off.
    t.change(() => ({ job: aJob(J1) }))
    expect(t.step(now + SECOND).state?.rejections).toBeUndefined()
  })
})

describe('what apply reads from the actions', () => {
  it('the Started Event names the Job it tells: a raced admission records it without reading Event reasons', () => {
    const d = decide(aWorld({ idle: anIdleState(T0) }), { type: 'timer' }, T0 + 30 * MINUTE)
    const create = d.actions.find((a) => a.type === 'createJob')
    const started = d.actions.filter((a) => a.type === 'recordEvent' && a.startedJob)
    expect(create?.jobName).toBe(J1)
    expect(started).toMatchObject([{ reason: 'BackfillStarted', startedJob: J1 }])
  })
})

describe('an admitted attempt whose Job is missing is re-created only by the try that holds its claims', () => {
  // Found by the deterministic simulation (seed 6701 of `npm run sim`): three tries of one attempt replacing each
  // other's claims; one lost them after its retries, admission reported the other try as the contender, and this
  // branch — which re-checks the gates after a crash between the state write and the POST — created the Job anyway,
  // with no claims and no fence behind it (a Job created 1.6 s after a foreground request).
  const starting = () => {
    const f = fixture('Starting')
    return { f, o: world(f, { job: null }) }
  }

  it('another try of the same attempt holds them: that try creates the Job, this one leaves the attempt as it is', () => {
    const { f, o } = starting()
    const d = decide(
      { ...o, contenders: [aContender({ backfill: 'b', jobName: J1, on: 'node' })] },
      { type: 'timer' },
      f.now,
    )
    expect(d.actions.filter((a) => a.type === 'createJob')).toEqual([])
    expect(d.state).toMatchObject({ phase: 'Starting', jobName: J1, attempts: 1 })
  })

  it('another backfill holds them: the attempt ends, not admitted, and a fresh window starts', () => {
    const { f, o } = starting()
    const d = decide({ ...o, contenders: [aContender()] }, { type: 'timer' }, f.now)
    expect(d.actions.filter((a) => a.type === 'createJob')).toEqual([])
    expect(d.actions).toContainEqual({ type: 'releaseClaims', jobName: J1 })
    expect(d.state).toMatchObject({ phase: 'WaitingForIdle', jobName: undefined, attempts: 0, windowStart: iso(f.now) })
  })

  it('nobody else holds them: the Job is created again under the same name', () => {
    const { f, o } = starting()
    expect(decide(o, { type: 'timer' }, f.now).actions).toContainEqual(
      expect.objectContaining({ type: 'createJob', jobName: J1 }),
    )
  })
})

describe("cancel's bookkeeping decides on a Job whose DELETE it had accepted", () => {
  const fg = T0 + 14 * MINUTE
  const deletingJob = (o: Observed): Partial<Observed> => ({
    idle: anIdleState(fg),
    job: o.job && { ...o.job, uid: 'uid-1', deleting: true },
  })
  const deletes = (d: Decision) => d.actions.filter((a) => a.type === 'deleteJob')
  const deletedBefore = (uid: string): Trigger => ({
    type: 'cancel',
    reason: 'ForegroundDemand',
    at: iso(fg),
    deletedUid: uid,
  })

  it('records the cancel (Cancelling, one preemption, the Event) without ordering that DELETE again', () => {
    const t = new Timeline(FIXTURES.Running.world)
    const d = t.change(deletingJob).step(fg, deletedBefore('uid-1'))
    expect(d.state).toMatchObject({ phase: 'Cancelling', reason: 'ForegroundDemand' })
    expect(d.state?.counters.preemptions).toEqual({ foreground: 1 })
    expect(d.actions).toContainEqual(expect.objectContaining(CANCELLED_EVENT))
    expect(deletes(d)).toEqual([])
  })

  it('still deletes a Job of another UID under the attempt name, and one no caller says it deleted', () => {
    for (const trigger of [deletedBefore('uid-0'), cancelRequest(fg)]) {
      const t = new Timeline(FIXTURES.Running.world)
      const d = t.change(deletingJob).step(fg, trigger)
      expect(deletes(d)).toEqual([{ type: 'deleteJob', jobName: J1, why: 'ForegroundDemand' }])
    }
  })

  it('a live Job the caller says it deleted (a stale read) is not deleted twice either', () => {
    const t = new Timeline(FIXTURES.Running.world)
    const live = (o: Observed): Partial<Observed> => ({
      idle: anIdleState(fg),
      job: o.job && { ...o.job, uid: 'uid-1' },
    })
    const d = t.change(live).step(fg, deletedBefore('uid-1'))
    expect(d.state).toMatchObject({ phase: 'Cancelling' })
    expect(deletes(d)).toEqual([])
  })
})
