// A promise raced against a deadline, for calls whose own timeout is longer than the caller can wait (a JetStream
// API request buffered while the connection is down waits for its own 5 s). The call itself is not cancelled: its
// late answer or failure is dropped.

export class DeadlineError extends Error {
  constructor(what: string, ms: number) {
    super(`${what}: no answer within ${ms} ms`)
    this.name = 'DeadlineError'
  }
}

export function withDeadline<T>(call: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineError(what, ms)), ms)
  })
  call.catch(() => {}) // a late failure after the deadline is nobody's
  return Promise.race([call, deadline]).finally(() => clearTimeout(timer))
}
