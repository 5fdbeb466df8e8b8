// Small, pure formatting helpers shared by the plugin's commands: durations as people read them and aligned
// tables as kubectl prints them.

/** 2m13s, 1h2m, 45s, 850ms, 3d4h: the two largest units, like kubectl's AGE column. */
export function human(ms: number): string {
  if (!Number.isFinite(ms)) return '-'
  const sign = ms < 0 ? '-' : ''
  let rest = Math.abs(ms)
  if (rest === 0) return '0s'
  if (rest < 1000) return `${sign}${Math.round(rest)}ms`
  rest = Math.floor(rest / 1000)
  const units: [string, number][] = [
    ['d', 86_400],
    ['h', 3_600],
    ['m', 60],
    ['s', 1],
  ]
  const parts: string[] = []
  for (const [unit, size] of units) {
    if (parts.length === 2) break
    const n = Math.floor(rest / size)
    if (n > 0 || parts.length > 0) {
      if (n > 0) parts.push(`${n}${unit}`)
      rest -= n * size
    }
  }
  return `${sign}${parts.join('') || '0s'}`
}

export const isoMs = (iso: string | undefined | null): number => (iso ? Date.parse(iso) : Number.NaN)

/** "2m13s ago" / "in 7m47s" relative to now; "-" when unknown. */
export function relative(at: number, now: number): string {
  if (!Number.isFinite(at)) return '-'
  return at <= now ? `${human(now - at)} ago` : `in ${human(at - now)}`
}

/** Left-aligned columns separated by three spaces (kubectl's layout); cells are cut at 60 characters. */
export function table(header: string[], rows: string[][]): string {
  const cut = (s: string) => (s.length > 60 ? `${s.slice(0, 59)}…` : s)
  const all = [header, ...rows].map((r) => r.map(cut))
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)))
  return all
    .map((r) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
        .join('   ')
        .trimEnd(),
    )
    .join('\n')
}
