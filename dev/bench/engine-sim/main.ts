// Runs the SIMULATED engine (dev/bench/engine-sim/engine.ts) on its own: `tsx dev/bench/engine-sim/main.ts [port]`.
// Parameters from SIM_MAX_NUM_SEQS, SIM_STEP_BASE_MS, SIM_STEP_PER_SEQ_MS, SIM_PREFILL_MS_PER_TOKEN,
// SIM_PRIORITY_SCHEDULING (true|false). Prints one JSON line with its URL.
import { DEFAULT_SIM, EngineSim, type SimParams } from './engine.js'

const num = (name: string, fallback: number) => {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const n = Number(raw)
  if (!Number.isFinite(n) || n < 0) {
    process.stderr.write(`${name}="${raw}": expected a non-negative number\n`)
    process.exit(2)
  }
  return n
}
const params: SimParams = {
  ...DEFAULT_SIM,
  maxNumSeqs: Math.max(1, Math.floor(num('SIM_MAX_NUM_SEQS', DEFAULT_SIM.maxNumSeqs))),
  stepBaseMs: num('SIM_STEP_BASE_MS', DEFAULT_SIM.stepBaseMs),
  stepPerSeqMs: num('SIM_STEP_PER_SEQ_MS', DEFAULT_SIM.stepPerSeqMs),
  prefillMsPerToken: num('SIM_PREFILL_MS_PER_TOKEN', DEFAULT_SIM.prefillMsPerToken),
  priorityScheduling: process.env.SIM_PRIORITY_SCHEDULING !== 'false',
}
const sim = new EngineSim(params)
const url = await sim.listen(Number(process.argv[2] ?? 0))
process.stdout.write(`${JSON.stringify({ url, params, note: 'SIMULATED engine: scheduling behaviour only' })}\n`)
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.on(signal, () => void sim.stop().then(() => process.exit(0)))
