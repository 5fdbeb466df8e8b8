// The Broker's dead-letter sink (knative overlay: the Broker's delivery.deadLetterSink is the bridge's Service,
// path /deadletter). Knative's broker filter POSTs here an event a Trigger's subscriber refused (400/422 and the
// other 4xx it never retries) or that failed for the whole delivery policy (retries exhausted), with the
// extensions knativeerrordest (the subscriber), knativeerrorcode (its last status) and knativeerrordata (base64 of
// its answer). It is kept where the operator looks for everything not handled: FLEXINFER_DEADLETTER
// (`flexinfer.deadletter.bridge`, the bridge's one publish right), with the reason and, as the original subject,
// `broker:<subscriber>`. Answered 202 once stored; 503 when it could not be (the Broker's dispatcher retries it).
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Bus } from './bus.js'

const MAX_REASON_DATA = 512

interface Logger {
  warn(obj: object, msg: string): void
  error(obj: object, msg: string): void
}

function decodeErrorData(data: string | undefined): string {
  if (!data) return ''
  try {
    return Buffer.from(data, 'base64').toString('utf8').slice(0, MAX_REASON_DATA)
  } catch {
    return data.slice(0, MAX_REASON_DATA)
  }
}

/** The Knative error extensions, from ce-* headers (binary mode) or the structured event's attributes. */
function extensions(req: FastifyRequest, body: string): Record<string, string | undefined> {
  const get = (name: string) => {
    const h = req.headers[`ce-${name}`]
    return typeof h === 'string' ? h : undefined
  }
  const out: Record<string, string | undefined> = {
    id: get('id'),
    type: get('type'),
    dest: get('knativeerrordest'),
    code: get('knativeerrorcode'),
    data: get('knativeerrordata'),
  }
  if (!out.id && (req.headers['content-type'] ?? '').startsWith('application/cloudevents+json')) {
    try {
      const ce = JSON.parse(body) as Record<string, unknown>
      const s = (k: string) => (typeof ce[k] === 'string' ? (ce[k] as string) : undefined)
      Object.assign(out, {
        id: s('id'),
        type: s('type'),
        dest: s('knativeerrordest'),
        code: s('knativeerrorcode'),
        data: s('knativeerrordata'),
      })
    } catch {
      // stored as received
    }
  }
  return out
}

export function registerBrokerDeadLetter(app: FastifyInstance, bus: Bus, log: Logger, fn = 'bridge') {
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', { parseAs: 'string', bodyLimit: 1024 * 1024 }, (_req, body, done) =>
      done(null, body),
    )
    scope.post('/deadletter', async (req, reply) => {
      const body = typeof req.body === 'string' ? req.body : ''
      const ext = extensions(req, body)
      const answer = decodeErrorData(ext.data)
      const reason =
        `Broker could not deliver ${ext.type ?? 'an event'} ${ext.id ?? ''} to ${ext.dest ?? 'its subscriber'}: ` +
        `answered ${ext.code ?? 'nothing'}${answer ? `: ${answer}` : ''}`
      const ceHeaders: Record<string, string> = {}
      for (const [k, v] of Object.entries(req.headers)) {
        if ((k.startsWith('ce-') || k === 'content-type') && typeof v === 'string') ceHeaders[k] = v
      }
      const payload = req.headers['ce-id'] ? JSON.stringify({ headers: ceHeaders, body }) : body
      try {
        await bus.deadLetter(fn, reason, payload, `broker:${ext.dest ?? 'unknown'}`)
      } catch (err) {
        log.error({ err: (err as Error)?.message, id: ext.id }, 'Broker dead letter not stored: answering 503')
        return reply.code(503).send({ error: 'not stored; retry' })
      }
      log.warn({ id: ext.id, type: ext.type, dest: ext.dest, code: ext.code }, 'Broker dead letter stored')
      return reply.code(202).send() // empty: a 2xx body would be read as a reply event
    })
  })
}
