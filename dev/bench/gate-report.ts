// bench:gate's figures: per arm over every foreground request and over the preempting ones (the first of each busy
// period, which arrives while background runs), and for the gated arms where a preemption's time goes — foreground
// published → preempt received by the gate → last background connection closed → every background slot idle on the
// engine's own /slots.
import { percentile } from './percentile.js'

export interface FgSample {
  ttftMs: number
  preempting: boolean
  /** llama.cpp's prompt processing time of the request, and its time per generated token (alone: one step). */
  promptMs?: number
  stepMs?: number
  /** Held at the gateway stand-in before it was sent (part of ttftMs). */
  heldMs: number
  /** Its place in the busy period (0: the preempting one) and its block: where a tail comes from. */
  k: number
  block: number
}

export interface PreemptionSample {
  publishedAt: number
  /** The gate's own times (absent in arms without a gate). */
  signalAt?: number
  lastAbortAt?: number
  /** First /slots answer with no background slot processing; undefined when not seen within the watch. */
  idleAt?: number
  /** The /slots answer before it, still busy: the idle moment lies between the two. */
  lastBusyAt?: number
}

export interface ArmResult {
  fg: FgSample[]
  preemptions: PreemptionSample[]
  bgTokens: number
  bgStepMs: number[]
  gateTokens: { completed: number; discarded: number }
  attempts: number
  skipped: number
}

export const emptyArm = (): ArmResult => ({
  fg: [],
  preemptions: [],
  bgTokens: 0,
  bgStepMs: [],
  gateTokens: { completed: 0, discarded: 0 },
  attempts: 0,
  skipped: 0,
})

type Out = Record<string, unknown>
const r3 = (n: number) => Math.round(n * 1000) / 1000
const defined = (xs: (number | undefined)[]) => xs.filter((x): x is number => x !== undefined && Number.isFinite(x))

function quantiles(out: Out, key: string, xs: number[]) {
  out[`${key}_p50`] = percentile(xs, 50)
  out[`${key}_p99`] = percentile(xs, 99)
}

/** The JSON keys of one arm (suffix `_<arm>`), and the yield keys unsuffixed for the arm named `gate`. */
export function armKeys(out: Out, arm: string, r: ArmResult) {
  const all = r.fg.map((s) => s.ttftMs)
  const pre = r.fg.filter((s) => s.preempting)
  out[`fg_ttft_ms_p50_${arm}`] = percentile(all, 50)
  out[`fg_ttft_ms_p99_${arm}`] = percentile(all, 99)
  out[`fg_ttft_ms_p50_preempting_${arm}`] = percentile(
    pre.map((s) => s.ttftMs),
    50,
  )
  out[`fg_ttft_ms_p99_preempting_${arm}`] = percentile(
    pre.map((s) => s.ttftMs),
    99,
  )
  out[`fg_samples_${arm}`] = r.fg.length
  // The three slowest as [ttft ms, place in the busy period, block].
  out[`fg_slowest_${arm}`] = [...r.fg]
    .sort((a, b) => b.ttftMs - a.ttftMs)
    .slice(0, 3)
    .map((x) => [Math.round(x.ttftMs), x.k, x.block])
  out[`fg_preempting_samples_${arm}`] = pre.length
  // TTFT = time before the engine took the prompt (the step in flight, HTTP, a hold) + its prompt processing.
  out[`fg_prompt_ms_p50_preempting_${arm}`] = percentile(defined(pre.map((s) => s.promptMs)), 50)
  out[`fg_wait_ms_p50_preempting_${arm}`] = percentile(
    defined(pre.map((s) => (s.promptMs === undefined ? undefined : s.ttftMs - s.promptMs))),
    50,
  )
  if (pre.some((s) => s.heldMs > 0))
    quantiles(
      out,
      `fg_held_ms_preempting_${arm}`,
      pre.map((s) => s.heldMs),
    )
  out[`bg_tokens_${arm}`] = r.bgTokens
  out[`bg_attempts_${arm}`] = r.attempts
  if (r.skipped) out[`bg_skipped_${arm}`] = r.skipped
  out[`gate_tokens_completed_${arm}`] = r.gateTokens.completed
  out[`gate_tokens_discarded_${arm}`] = r.gateTokens.discarded
  if (r.bgStepMs.length) out[`bg_step_ms_p50_${arm}`] = percentile(r.bgStepMs, 50)
  const p = r.preemptions
  const gated = p.filter((x) => x.signalAt !== undefined)
  if (gated.length) {
    const s = gated
    quantiles(
      out,
      `preempt_to_gate_ms_${arm}`,
      s.map((x) => (x.signalAt as number) - x.publishedAt),
    )
    quantiles(
      out,
      `gate_close_ms_${arm}`,
      s.map((x) => (x.lastAbortAt as number) - (x.signalAt as number)),
    )
    quantiles(out, `close_to_idle_ms_${arm}`, defined(s.map((x) => x.idleAt && x.idleAt - (x.lastAbortAt as number))))
    quantiles(out, `yield_ms_${arm}`, defined(s.map((x) => x.idleAt && x.idleAt - (x.signalAt as number))))
    out[`yield_samples_${arm}`] = defined(s.map((x) => x.idleAt)).length
    out[`yield_unseen_${arm}`] = s.filter((x) => x.idleAt === undefined).length
  } else if (p.length && arm !== 'none') {
    quantiles(out, `published_to_idle_ms_${arm}`, defined(p.map((x) => x.idleAt && x.idleAt - x.publishedAt)))
  }
}

/** Ratios to `none` in the same run (all requests and preempting ones), for every other arm. */
export function ratios(out: Out, arms: readonly string[]) {
  for (const arm of arms) {
    if (arm === 'none') continue
    for (const q of ['p50', 'p99']) {
      for (const which of ['', 'preempting_']) {
        const a = out[`fg_ttft_ms_${q}_${which}${arm}`] as number
        const b = out[`fg_ttft_ms_${q}_${which}none`] as number
        if (Number.isFinite(a) && Number.isFinite(b) && b > 0) out[`${arm}_${which}${q}_vs_none`] = r3(a / b)
      }
    }
  }
  // The brief's unsuffixed names for the gate arm.
  for (const k of ['yield_ms_p50', 'yield_ms_p99']) if (out[`${k}_gate`] !== undefined) out[k] = out[`${k}_gate`]
}

/** The engine's decode step in this run: background requests' own time per token (all arms), and foreground alone. */
export function stepKeys(out: Out, results: Record<string, ArmResult>) {
  const bg = Object.values(results).flatMap((r) => r.bgStepMs)
  if (bg.length) out.engine_step_ms_p50 = percentile(bg, 50)
  const alone = defined((results.none?.fg ?? []).map((s) => s.stepMs))
  if (alone.length) out.engine_step_ms_alone_p50 = percentile(alone, 50)
  const step = out.engine_step_ms_p50 as number | undefined
  if (step && out.yield_ms_p99 !== undefined) out.yield_steps_p99 = r3((out.yield_ms_p99 as number) / step)
}

/** One line per arm for people. */
export function armLine(arm: string, out: Out): string {
  const g = (k: string) => out[`${k}_${arm}`]
  const parts = [
    `fg ttft p50/p99 ${g('fg_ttft_ms_p50')}/${g('fg_ttft_ms_p99')} ms (${g('fg_samples')})`,
    `preempting ${g('fg_ttft_ms_p50_preempting')}/${g('fg_ttft_ms_p99_preempting')} ms (${g('fg_preempting_samples')})`,
    `bg tokens ${g('bg_tokens')} in ${g('bg_attempts')}`,
  ]
  if (g('yield_ms_p50') !== undefined)
    parts.push(
      `yield p50/p99 ${g('yield_ms_p50')}/${g('yield_ms_p99')} ms`,
      `gate tokens completed/discarded ${g('gate_tokens_completed')}/${g('gate_tokens_discarded')}`,
    )
  return `arm ${arm}: ${parts.join('; ')}`
}
