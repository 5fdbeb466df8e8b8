// Load generator (own process, so it does not share the event loop it measures): publishes foreground
// requests at a fixed rate, spread over a set of models, on core NATS (the stream stores them), for a bounded
// time. Loopback only. Prints the number sent as JSON.
import { connect } from '@nats-io/transport-node'
import { encode } from '../../events/codec.js'

const [natsUrl, namespace, prefix, modelsArg, rateArg, secondsArg] = process.argv.slice(2)
if (!natsUrl || !namespace || !prefix)
  throw new Error('usage: load.ts <natsUrl> <namespace> <modelPrefix> <models> <rate> <seconds>')
const models = Number(modelsArg)
const rate = Number(rateArg)
const seconds = Math.min(Number(secondsArg), 120)
const nc = await connect({ servers: natsUrl, name: 'bench-load' })
const subject = 'flexinfer.events.foreground.request'
const tickMs = 10
const perTick = Math.max(1, Math.round((rate * tickMs) / 1000))
const start = Date.now()
let sent = 0
let next = start
while (Date.now() - start < seconds * 1000) {
  for (let i = 0; i < perTick; i++) {
    const model = `${prefix}-${sent % models}`
    nc.publish(subject, encode('ai.flexinfer.foreground.request', { namespace, model }))
    sent++
  }
  next += tickMs
  const wait = next - Date.now()
  if (wait > 0) await new Promise((r) => setTimeout(r, wait))
  else if (sent % 1000 === 0) await new Promise((r) => setImmediate(r))
}
await nc.flush()
await nc.close()
process.stdout.write(`${JSON.stringify({ sent, seconds: (Date.now() - start) / 1000 })}\n`)
