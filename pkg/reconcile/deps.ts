// What a reconcile runs on beyond the Deps every handler gets: the admission protocol's ports (replaceable by the
// simulation's in-memory ones) and a hook that is told every decision.

import {
  type Claimed,
  type ClaimKeys,
  releaseClaimKeys as releaseKeys,
  takeClaimKeys as takeKeys,
} from '../admission/claims.js'
import { admissionPorts } from '../admission/nats-ports.js'
import type { AdmissionPorts } from '../admission/ports.js'
import type { Decision, Observed, Trigger } from '../core/decision.js'
import type { Claim } from '../core/state.js'
import type { Deps } from '../transport/function.js'

/** Deps with the admission protocol's ports replaced (the simulation's in-memory ones). */
export interface AdmissionDeps extends Deps {
  /** undefined: the real ones on `bus` and `kube` (pkg/admission/nats-ports.ts). */
  admission?: AdmissionPorts
  /**
   * Told every decision a reconcile is about to act on (commit and apply, or hand to admit), with what it was decided
   * on, before anything of it is done (one whose compare-and-set then loses is decided again, and told again): the
   * property simulator (test/unit/support/sim.ts) checks each one there. It must not change what it is given.
   */
  decided?: (observed: Observed, trigger: Trigger, decision: Decision) => void
}

/** The admission ports a reconcile runs on. */
export const portsOf = (deps: Deps): AdmissionPorts => (deps as AdmissionDeps).admission ?? admissionPorts(deps)

/** Takes both claims for `claim`, or none (pkg/admission/claims.ts). */
export const takeClaimKeys = (deps: Deps, keys: ClaimKeys, claim: Claim): Promise<Claimed> =>
  takeKeys(portsOf(deps), keys, claim)

/** Gives back the claims held for `who`: an admission's own claim, or whatever names an ended attempt's Job. */
export const releaseClaimKeys = (
  deps: Deps,
  keys: ClaimKeys,
  who: string | Pick<Claim, 'jobName' | 'claimedAt' | 'tryId'>,
) => releaseKeys(portsOf(deps), keys, who)
