// The one rule that ends an attempt for foreground demand, shared by everyone who applies it: demand (its cancel),
// cancel (waiting for an admitted Job to appear), decide (an attempt in flight, and admit's re-reads around its POST).

/**
 * Whether a foreground request at `at` (epoch ms) breaks the idle window that began at `windowStart`: it came after
 * the window began. Strictly after: a window starts at the newest foreground request it measured (whole
 * milliseconds, as NATS stored it), and that request must not break the window it opened. A missing or unreadable
 * start is broken by nothing.
 */
export const breaksWindow = (at: number, windowStart: string | undefined): boolean =>
  at > (windowStart ? Date.parse(windowStart) : Number.NaN)
