// FUNCTION=gate: the background gate sidecar (pkg/core/gate.ts injects it; cmd/gate/proxy.ts is its HTTP side).
// It opens only once it can see foreground demand — subscribed to its model's preempt subject on core NATS — and
// closes for good on the first preempt message, or when NATS has not answered for natsBoundMs: a gate that cannot
// see foreground must not let background through. A closed gate never reopens: the attempt it served is being
// cancelled, and a preempt missed while NATS was away cannot be told from none.
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { preemptSubject } from '../../events/catalog.js'
import { natsServerOptions } from '../../pkg/jetstream/connect.js'
import type { Logger } from '../../pkg/observability/log.js'
import type { GateConfig } from './config.js'
import { epochMs, Gate } from './proxy.js'

export interface RunningGate {
  gate: Gate
  url: string
  healthUrl?: string
  stop(): Promise<void>
}

/** How often the gate asks NATS whether it is still there (a ping answered). */
const WATCH_INTERVAL_MS = 100

export async function startGate(config: GateConfig, log: Logger): Promise<RunningGate> {
  const gate = new Gate({ ...config, log })
  // Listening first: the pod's startup probe answers and the workload starts; requests get 503 until NATS is seen.
  const url = await gate.listen(config.port, config.host)
  const healthUrl = config.health ? await gate.listenHealth(config.health.port, config.health.host) : undefined
  const subject = preemptSubject(config.namespace, config.model)
  let nc: NatsConnection | undefined
  let stopped = false
  let lastSeen = epochMs()
  let probing = false
  const closeUnseen = (why: string) => {
    if (gate.state === 'closed') return
    log.warn({ subject, why, boundMs: config.natsBoundMs }, 'foreground demand out of sight: closing the gate')
    gate.close('nats_unreachable')
  }
  // The watchdog runs from the start: a gate that never reaches NATS stays shut, and says so after the bound.
  const watchdog = setInterval(() => {
    if (epochMs() - lastSeen > config.natsBoundMs) {
      if (gate.state === 'open') closeUnseen('no answer from NATS')
      return
    }
    if (!nc || probing || gate.state !== 'open') return
    probing = true
    const deadline = new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error('ping unanswered')), config.natsBoundMs).unref(),
    )
    Promise.race([nc.rtt(), deadline])
      .then(() => {
        lastSeen = epochMs()
      })
      .catch(() => {})
      .finally(() => {
        probing = false
      })
  }, WATCH_INTERVAL_MS)
  watchdog.unref()

  const connecting = (async () => {
    for (let attempt = 1; !stopped; attempt++) {
      try {
        nc = await connect({
          ...natsServerOptions(config.natsUrl, config.natsCredentials),
          name: `gate-${config.namespace}-${config.job}`,
          maxReconnectAttempts: -1,
          reconnectTimeWait: 250,
          timeout: Math.min(5_000, config.natsBoundMs * 2),
          noAsyncTraces: true,
        })
        break
      } catch (err) {
        if (attempt === 1 || attempt % 20 === 0)
          log.warn({ err: (err as Error).message, attempt }, 'gate: NATS not reachable yet; background stays shut')
        await new Promise((r) => setTimeout(r, 500))
      }
    }
    if (!nc || stopped) return
    nc.subscribe(subject, {
      callback: (err, msg) => {
        const at = epochMs()
        if (err) {
          // A refused subscription (permissions) leaves the gate blind: closed, with the server's reason.
          log.error({ subject, err: err.message }, 'gate: preempt subscription failed')
          gate.close('nats_unreachable', at)
          return
        }
        const p = gate.close('preempted', at)
        if (p) log.info({ subject, message: safeText(msg.data) }, 'gate: preempt received')
      },
    })
    // The subscription is registered once the server has answered a ping sent after it.
    await nc.flush()
    lastSeen = epochMs()
    gate.open()
  })().catch((err) => {
    log.error({ err: (err as Error).message }, 'gate: could not subscribe; background stays shut')
  })

  return {
    gate,
    url,
    healthUrl,
    async stop() {
      stopped = true
      clearInterval(watchdog)
      await gate.stop()
      await connecting
      await nc?.close().catch(() => {})
    },
  }
}

const safeText = (data: Uint8Array) => new TextDecoder().decode(data.subarray(0, 512))
