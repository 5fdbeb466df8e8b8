// Structured JSON logs (pino, the logger fastify already uses). Secrets never reach a log line: tokens and
// credentials are redacted by path wherever they could appear.
import { type DestinationStream, type Logger, pino } from 'pino'

export type { Logger }

/** `destination` (default stdout) lets a test capture every line. */
export function createLogger(name: string, destination?: DestinationStream): Logger {
  const options = {
    name,
    level: process.env.LOG_LEVEL ?? 'info',
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
