// JSON equality without the strings: what comparing JSON.stringify of two values says, computed field by field.
// decide() compares every decided state with the stored one and reconcile every decided status with the object's,
// the most frequent comparisons of a reconcile.

/** What JSON.stringify writes for a number: a non-finite one is null. */
const asJson = (v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v)
/** Not plain data (a Date, a boxed value, a class, anything with its own toJSON): compared by its JSON. */
const isOther = (v: unknown) => {
  if (v === null || typeof v !== 'object') return false
  const proto = Object.getPrototypeOf(v)
  if (Array.isArray(v)) return proto !== Array.prototype
  return (proto !== Object.prototype && proto !== null) || typeof (v as { toJSON?: unknown }).toJSON === 'function'
}
const without = (v: unknown, skip: string | undefined) =>
  skip !== undefined && v !== null && typeof v === 'object' ? { ...v, [skip]: undefined } : v
/** Whether JSON.stringify writes key `k` of `o` (an undefined, function or symbol value is left out). */
const written = (o: Record<string, unknown>, k: string, skip: string | undefined) => {
  if (k === skip) return false
  const t = typeof o[k]
  return t !== 'undefined' && t !== 'function' && t !== 'symbol'
}
/** In an array an undefined, function or symbol is written as null. */
const asItem = (v: unknown) => (v === undefined || typeof v === 'function' || typeof v === 'symbol' ? null : v)

/**
 * JSON.stringify(a) === JSON.stringify(b) (`skip` left out of the outer objects), without building either string.
 * Plain data (what a state or a status is) is compared here; anything else (a Date, a class) by its JSON.
 */
export function sameJson(a: unknown, b: unknown, skip?: string): boolean {
  // Most fields are the same value, or two primitives: answered before the checks objects need.
  if (a === b) return true
  if (typeof a !== 'object' && typeof b !== 'object') return asJson(a) === asJson(b)
  if (isOther(a) || isOther(b) || (skip !== undefined && (Array.isArray(a) || Array.isArray(b)))) {
    return JSON.stringify(without(a, skip)) === JSON.stringify(without(b, skip))
  }
  a = asJson(a)
  b = asJson(b)
  if (a === b) return true
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!sameJson(asItem(a[i]), asItem(b[i]))) return false
    return true
  }
  // The keys each writes, in order, walked side by side: no filtered copies of the key lists (this runs for every
  // field of every state and status compared).
  const ra = a as Record<string, unknown>
  const rb = b as Record<string, unknown>
  const ka = Object.keys(ra)
  const kb = Object.keys(rb)
  let i = 0
  let j = 0
  for (;;) {
    while (i < ka.length && !written(ra, ka[i] as string, skip)) i++
    while (j < kb.length && !written(rb, kb[j] as string, skip)) j++
    if (i === ka.length || j === kb.length) return i === ka.length && j === kb.length
    const k = ka[i] as string
    if (k !== kb[j] || !sameJson(ra[k], rb[k])) return false
    i++
    j++
  }
}
