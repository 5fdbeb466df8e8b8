// The benchmarks' one percentile: nearest rank (the value at or above p% of the samples), to 0.1.

/** The p-th percentile of samples already sorted ascending. */
export function percentileOfSorted(sorted: number[], p: number): number {
  const index = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)
  return Math.round((sorted[Math.max(0, index)] as number) * 10) / 10
}

/** The p-th percentile of `values` (not sorted in place); NaN for none. */
export function percentile(values: number[], p: number): number {
  if (!values.length) return Number.NaN
  return percentileOfSorted(
    [...values].sort((a, b) => a - b),
    p,
  )
}
