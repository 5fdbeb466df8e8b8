// What the real-engine benches (bench:gate, bench:yield) read from their environment, and the seeded randomness that
// makes a run's closing instants and arm order replayable.

/** A non-negative number from the environment, `fallback` when unset; anything else is an error naming the variable. */
export function envNumber(name: string, fallback: number): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const n = Number(raw)
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name}="${raw}": expected a non-negative number`)
  return n
}

/** A deterministic PRNG (mulberry32): the same seed, the same sequence in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}
