// Structured JSON logs (pino, the logger fastify already uses). Secrets never reach a log line: tokens and
// credentials are redacted by path wherever they could appear.
import { type Logger, pino } from 'pino'

export type { Logger }

export function createLogger(name: string): Logger {
  return pino({
    name,
    level: process.env.LOG_LEVEL ?? 'info',
    redact: {
      paths: ['token', 'authorization', 'headers.authorization', 'req.headers.authorization', '*.token', '*.password'],
      censor: '[redacted]',
    },
  })
}
