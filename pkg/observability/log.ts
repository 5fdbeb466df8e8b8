// Structured JSON logs (pino, the logger fastify already uses). Secrets never reach a log line: tokens and
// credentials are redacted by path wherever they could appear.
import { type DestinationStream, type Logger, pino } from 'pino'

export type { Logger }

/** The level of the loggers made from now on: LOG_LEVEL, as the entry point parsed it (cmd/manager/config.ts). */
let level = 'info'
export function setLogLevel(to: string) {
  level = to
}

/** `destination` (default stdout) lets a test capture every line. */
export function createLogger(name: string, destination?: DestinationStream): Logger {
  const options = {
    name,
    level,
    redact: {
      paths: [
        'token',
        'authorization',
        'headers.authorization',
        'req.headers.authorization',
        'headers.Authorization',
        '*.token',
        '*.password',
      ],
      censor: '[redacted]',
    },
  }
  return destination ? pino(options, destination) : pino(options)
}

/**
 * One line for a log or a dead-letter reason. Kubernetes client errors carry the whole response (body and
 * headers) in their message; the Status message and code are what a person needs.
 */
export function describeError(err: unknown): string {
  const e = err as { code?: unknown; body?: unknown; message?: unknown }
  if (typeof e?.code === 'number' && typeof e.body === 'string') {
    try {
      const status = JSON.parse(e.body) as { message?: string; reason?: string }
      return `HTTP ${e.code}${status.reason ? ` ${status.reason}` : ''}: ${status.message ?? ''}`.trim()
    } catch {
      return `HTTP ${e.code}`
    }
  }
  const message = typeof e?.message === 'string' ? e.message : String(err)
  return message.split('\n')[0] ?? message
}
