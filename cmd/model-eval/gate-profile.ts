// What sits in front of the endpoint: the background gate answers /flexinfer-gate/state on the endpoint's origin
// (an engine answers 404 there). Its profile goes into the result — a benchmark's concurrency through the gate is
// bounded by the gate's cap, and the row must say so — and its state tells a preempted attempt from a failing item:
// once the gate has closed, what is cut or refused is the attempt ending, not a result to record.

/** The gate's settings as it reports them (cmd/gate/proxy.ts snapshot().profile). */
export interface GateProfile {
  engine: string
  priority?: number
  maxInFlight: number
  maxQueued: number
}

import { GATE_PATH } from '../../pkg/core/gate.js'

const STATE_PATH = `${GATE_PATH}state`
const DEADLINE_MS = 2_000

const stateUrl = (baseUrl: string) => `${new URL(baseUrl).origin}${STATE_PATH}`

/** Marked background like every request of the workload: without a gate it reaches the engine (a 404). */
const HEADERS = { 'x-flexinfer-workload-class': 'background' }

async function state(baseUrl: string, doFetch: typeof fetch): Promise<Record<string, unknown> | undefined> {
  try {
    const res = await doFetch(stateUrl(baseUrl), { headers: HEADERS, signal: AbortSignal.timeout(DEADLINE_MS) })
    if (!res.ok) return undefined
    const body = (await res.json()) as unknown
    return typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : undefined
  } catch {
    return undefined
  }
}

/** The gate's profile, or undefined when no gate answers in front of the endpoint. */
export async function gateProfile(baseUrl: string, doFetch: typeof fetch = fetch): Promise<GateProfile | undefined> {
  const p = (await state(baseUrl, doFetch))?.profile as Partial<GateProfile> | undefined
  if (!p || typeof p.maxInFlight !== 'number' || typeof p.engine !== 'string') return undefined
  return {
    engine: p.engine,
    ...(typeof p.priority === 'number' ? { priority: p.priority } : {}),
    maxInFlight: p.maxInFlight,
    maxQueued: typeof p.maxQueued === 'number' ? p.maxQueued : 0,
  }
}

/** Whether the gate says it is closed (a gate that does not answer is not taken for closed). */
export async function gateClosed(baseUrl: string, doFetch: typeof fetch = fetch): Promise<boolean> {
  return (await state(baseUrl, doFetch))?.state === 'closed'
}
