// The roles a reconcile runs in, one per function that runs it, each a configuration of the same loop (observe →
// decide → compare-and-set → apply) rather than branches on its name:
//   admit     creates Jobs (after taking the model and node claims and re-checking idleness),
//   cancel    deletes Jobs,
//   lifecycle neither: it forwards Job creation to admit and Job deletion to cancel.
// What differs between them is what they observe (admit needs every contender and reads ahead to keep its admission
// short), which actions they execute themselves rather than forward, and the admission protocol admit runs.

import { runAdmission } from '../admission/protocol.js'
import type { Trigger } from '../core/decision.js'

export type Role = 'admit' | 'cancel' | 'lifecycle'

/** What observe() reads for a role, and how. */
export interface Observes {
  /**
   * The Model, GamingSessions, GPULeases and Jobs from the watched copies (deps.caches) when there are any, instead of
   * GETs and LISTs.
   */
  watchedCopies: boolean
  /**
   * Every live backfill Job that may contend for the model or its node. Without, only this declaration's own Jobs are
   * listed: a role that never admits hands a decision to create over to the admit function, which looks again.
   */
  contenders: boolean
  /**
   * The ModelBackfill and its CronJob from the watched copies too, decided on only after fresh GETs return them
   * unchanged (pkg/admission/copies-unchanged.ts).
   */
  decidesOnCopies: boolean
  /**
   * The model's idle-state and newest-request reads, and the claims an admission would take, sent with the state
   * read: the admission reads them again after its claims, so their age decides nothing, and one round trip is saved.
   */
  readsAhead: boolean
}

/** A role: what it observes, the actions it executes itself (the others are forwarded), and its hooks. */
export interface RoleConfig {
  observes: Observes
  owns: {
    /** Executes createJob; without, a decision to create is handed to admit, committing nothing. */
    createJob: boolean
    /**
     * Executes a deleteJob decided with `trigger` (one that preempts a Job); otherwise it is forwarded to cancel.
     * Housekeeping deletes (Deleted, Cleanup, RepeatCleanup: no preemption latency at stake) are executed by every
     * role.
     */
    deleteJob: (trigger: Trigger) => boolean
  }
  hooks: {
    /**
     * Between a decision to create a Job and its commit: the claims, the fence and the re-reads, decided again on what
     * they read (pkg/admission/protocol.ts).
     */
    admission?: typeof runAdmission
  }
}

export const ROLES: Record<Role, RoleConfig> = {
  admit: {
    observes: { watchedCopies: true, contenders: true, decidesOnCopies: true, readsAhead: true },
    owns: {
      createJob: true,
      // Deciding with a cancel trigger: it has just deleted itself the Job a request raced (its POST outcome).
      deleteJob: (trigger) => trigger.type === 'cancel',
    },
    hooks: { admission: runAdmission },
  },
  cancel: {
    observes: { watchedCopies: false, contenders: false, decidesOnCopies: false, readsAhead: false },
    owns: { createJob: false, deleteJob: () => true },
    hooks: {},
  },
  lifecycle: {
    // Watched copies too when it has them (overlaid with what its event is about, read fresh): it never admits.
    observes: { watchedCopies: true, contenders: false, decidesOnCopies: false, readsAhead: false },
    owns: { createJob: false, deleteJob: () => false },
    hooks: {},
  },
}
