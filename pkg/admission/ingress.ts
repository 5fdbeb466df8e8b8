// The gateway ingress (functions/ingress) as the preemption path depends on it: gateways that can only POST reach
// NATS through it, so an ingress that cannot publish leaves their foreground demand unobservable although NATS is
// fine for everyone else. Both sides of "foreground always wins" ask it: the fence (pkg/admission/fence.ts) admits
// nothing while it cannot publish, and cancel's fail-safe (functions/cancel/fail-safe.ts) cancels what runs.
//
// Asked over HTTP, its /readyz through its Service — as the gateways reach it — and not through NATS or Kubernetes:
// an ingress cut off from NATS can still answer, and it needs neither a Kubernetes token nor a write for it (it has
// neither). The kubelet keeps an instance that cannot publish out of the Service; with none ready the connection is
// refused: unobservable as well.
import type { Visibility } from '../core/fail-safe.js'
import { withDeadline } from '../lib/deadline.js'
import { describeError } from '../observability/log.js'

/** An ingress that has not answered within this is unreachable. */
const PROBE_DEADLINE_MS = 1_000
/** The most of a refusal's body read (the ingress's own is a short JSON object). */
const BODY_MAX = 300

/** Whether the gateway ingress can publish foreground requests: its /readyz answers 200 within the deadline. */
export async function probeIngress(url: string): Promise<Visibility> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(PROBE_DEADLINE_MS), redirect: 'error' })
    if (res.ok) {
      await res.body?.cancel()
      return { visible: true }
    }
    const body = (await withDeadline(res.text(), PROBE_DEADLINE_MS, 'ingress readiness body')).slice(0, BODY_MAX)
    let why = `HTTP ${res.status}`
    try {
      const said = (JSON.parse(body) as { why?: unknown }).why
      if (typeof said === 'string') why = said
    } catch {
      // not the ingress's JSON: the status says enough
    }
    return { visible: false, why: `the gateway ingress cannot publish (${why})` }
  } catch (err) {
    return { visible: false, why: `the gateway ingress is unreachable (${describeError(err)})` }
  }
}
