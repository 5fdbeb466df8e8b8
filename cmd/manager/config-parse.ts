// The parsers of cmd/manager/config.ts's settings: one raw environment value to its value or a problem to report, so
// that a bad value is named with every other at start instead of thrown at its first use.

export type Env = Readonly<Record<string, string | undefined>>

/** One variable: its raw value (undefined when unset) to its parsed value, or a problem (a string) to report. */
export type Parse<T> = (raw: string | undefined, env: Env) => T | { problem: string }

export const problem = (text: string) => ({ problem: text })
export const isProblem = (v: unknown): v is { problem: string } =>
  typeof v === 'object' && v !== null && 'problem' in v && Object.keys(v).length === 1
/** Unset and empty are the same: a manifest that sets `VALUE: ""` means "the default". */
export const blank = (raw: string | undefined) => raw === undefined || raw.trim() === ''

/** A whole number in [min, max]; `fallback` when unset or empty. */
export const int =
  (fallback: number, min: number, max = Number.MAX_SAFE_INTEGER, what = `a whole number from ${min}`) =>
  (name: string): Parse<number> =>
  (raw) => {
    if (blank(raw)) return fallback
    const n = Number((raw as string).trim())
    return Number.isInteger(n) && n >= min && n <= max ? n : problem(`${name} must be ${what}, not "${raw}"`)
  }
export const optionalPositive =
  (name: string): Parse<number | undefined> =>
  (raw) => {
    if (blank(raw)) return undefined
    const n = Number(raw)
    return Number.isInteger(n) && n > 0 ? n : problem(`${name} must be a positive integer, not "${raw}"`)
  }
export const oneOf =
  <T extends string>(values: readonly T[], fallback: T) =>
  (name: string): Parse<T> =>
  (raw) => {
    if (blank(raw)) return fallback
    const v = (raw as string).trim()
    return (values as readonly string[]).includes(v)
      ? (v as T)
      : problem(`${name} must be one of ${values.join(' | ')}, not "${raw}"`)
  }
/** A flag that is on unless set to exactly "false" (as every such flag has always been read). */
export const unlessFalse = (raw: string | undefined) => raw !== 'false'
export const text = (raw: string | undefined) => raw
export const nonEmpty = (raw: string | undefined) => raw || undefined
export const httpUrl =
  (name: string, what: string): Parse<string | undefined> =>
  (raw) => {
    if (blank(raw)) return undefined
    const value = (raw as string).trim()
    let url: URL | undefined
    try {
      url = new URL(value)
    } catch {
      url = undefined
    }
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:'))
      return problem(`${name} must be ${what}, not "${value}"`)
    return url.href
  }
export const thrown =
  <T>(parse: (raw: string | undefined) => T): Parse<T> =>
  (raw) => {
    try {
      return parse(raw)
    } catch (err) {
      return problem((err as Error).message)
    }
  }
