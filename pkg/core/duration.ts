// Go / Kubernetes duration syntax ("90s", "15m", "1h30m", "1.5h", "0"), as metav1.Duration accepts it.
// No registry package parses exactly this grammar, so it lives here, small and tested against Go's rules.

const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  μs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
}

const TERM = /(\d*\.?\d*)(ns|us|µs|μs|ms|s|m|h)/y

export class DurationError extends Error {}

/** Parses a Go duration into milliseconds. Throws DurationError with a message a user can act on. */
export function parseDuration(input: string): number {
  const text = input.trim()
  if (text === '0' || text === '+0' || text === '-0') return 0
  let rest = text
  let sign = 1
  if (rest.startsWith('-') || rest.startsWith('+')) {
    if (rest[0] === '-') sign = -1
    rest = rest.slice(1)
  }
  if (rest === '') throw new DurationError(`invalid duration "${input}"`)
  let total = 0
  TERM.lastIndex = 0
  while (TERM.lastIndex < rest.length) {
    const start = TERM.lastIndex
    const match = TERM.exec(rest)
    if (!match || match.index !== start) {
      throw new DurationError(`invalid duration "${input}": use Go syntax such as 90s, 15m or 1h30m`)
    }
    const [, number = '', unit = ''] = match
    if (number === '' || number === '.') throw new DurationError(`invalid duration "${input}": missing number`)
    total += Number(number) * (UNIT_MS[unit] ?? Number.NaN)
  }
  if (!Number.isFinite(total)) throw new DurationError(`invalid duration "${input}"`)
  return sign * total
}

/** Formats milliseconds the way Go's time.Duration.String() does for whole seconds and above ("1h30m0s"). */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s'
  const sign = ms < 0 ? '-' : ''
  let rest = Math.abs(ms)
  const h = Math.floor(rest / 3_600_000)
  rest -= h * 3_600_000
  const m = Math.floor(rest / 60_000)
  rest -= m * 60_000
  const s = rest / 1000
  return `${sign}${h ? `${h}h` : ''}${h || m ? `${m}m` : ''}${Number(s.toFixed(3))}s`
}
