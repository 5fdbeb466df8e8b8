// `kubectl mbf explain`'s view of the background gate sidecar: what the backfill asks for (its annotation) and what
// each of the attempt's pods says of its gate container. Pure: cmd/kubectl-mbf/read.ts reads the pods.
import type { Observed } from '../../pkg/core/decision.js'
import { GATE_CONTAINER, GATE_SECRET, gateSettings } from '../../pkg/core/gate.js'

/** A pod's gate container as the kubelet reports it: its readiness is the gate's state (open = ready). */
export interface GatePodSeen {
  pod: string
  phase?: string
  started?: boolean
  ready?: boolean
  /** running | waiting: <reason> | terminated: <reason> | absent */
  state: string
  restarts?: number
}

export interface GateView {
  requested: string
  problem?: string
  pods: { pod: string; gate: string }[]
}

/**
 * What the gate sidecar's container status says: ready while it admits background requests (open); started but not
 * ready once closed (a preemption, or foreground demand out of sight) or before it sees NATS; a waiting container is
 * most often the namespace's gate Secret missing.
 */
export function gateState(p: GatePodSeen): string {
  if (p.state === 'absent') return 'no gate container (Job created before the gate was requested?)'
  if (p.state.startsWith('waiting')) {
    const hint = /ContainerCreating|CreateContainerConfigError/.test(p.state)
      ? ` (is Secret ${GATE_SECRET} in the namespace?)`
      : ''
    return `not running: ${p.state}${hint}`
  }
  if (p.state.startsWith('terminated')) return `stopped: ${p.state}`
  if (p.ready) return 'open: admitting background requests'
  return p.started
    ? 'closed: refusing background requests (preempted, or foreground demand out of sight)'
    : 'starting: background refused until it sees foreground demand'
}

/** The background gate the backfill asks for and, while an attempt runs, its state in each of the attempt's pods. */
export function gateView(observed: Observed, gatePods: readonly GatePodSeen[] | undefined): GateView | undefined {
  const b = observed.backfill
  if (!b) return undefined
  const { settings, problem } = gateSettings(b)
  if (!settings && !problem) return undefined
  const template = observed.template
  return {
    requested: settings
      ? `${settings.endpointEnv} through the gate, engine ${settings.engine}, at most ${settings.maxInFlight} in flight`
      : 'requested with a bad setting',
    problem: problem ?? (template.found ? template.gate : undefined),
    pods: (gatePods ?? []).map((p) => ({
      pod: p.pod,
      gate: `${gateState(p)}${p.restarts ? `; restarted ${p.restarts}×` : ''}`,
    })),
  }
}

/** Reduces a pod to its gate container's status (what gatePods carries). */
export function gatePodSeen(pod: {
  metadata?: { name?: string }
  status?: {
    phase?: string
    initContainerStatuses?: {
      name: string
      ready: boolean
      started?: boolean
      restartCount: number
      state?: { running?: object; waiting?: { reason?: string }; terminated?: { reason?: string } }
    }[]
  }
}): GatePodSeen {
  const c = pod.status?.initContainerStatuses?.find((s) => s.name === GATE_CONTAINER)
  const state = !c
    ? pod.status?.phase === 'Pending'
      ? 'waiting: pod Pending (not scheduled or not started)'
      : 'absent'
    : c.state?.running
      ? 'running'
      : c.state?.waiting
        ? `waiting: ${c.state.waiting.reason ?? '?'}`
        : c.state?.terminated
          ? `terminated: ${c.state.terminated.reason ?? '?'}`
          : 'waiting: ?'
  return {
    pod: pod.metadata?.name ?? '?',
    phase: pod.status?.phase,
    started: c?.started,
    ready: c?.ready,
    state,
    restarts: c?.restartCount,
  }
}
