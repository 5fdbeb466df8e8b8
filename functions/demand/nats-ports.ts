// demand's ports on NATS: the idle bucket through the KV API for a first write and one raw JetStream request for the
// usual one (a known revision), the claims read linearizably (claim-reads.ts) and watched (KvMirror of the bucket's
// republished changes), cancels published on the catalog's subject, preempts on core NATS.
import type { KV } from '@nats-io/kv'
import { preemptSubject } from '../../events/catalog.js'
import { type Claim, parseClaim } from '../../pkg/core/state.js'
import { JsRequests, kvUpdate } from '../../pkg/jetstream/js-requests.js'
import { KvMirror } from '../../pkg/jetstream/kv-mirror.js'
import type { Deps } from '../../pkg/transport/function.js'
import { ClaimReads } from './claim-reads.js'
import type { DemandPorts } from './ports.js'

const bucketOf = (kv: KV) => (kv as unknown as { bucket: string }).bucket

export class NatsDemandPorts implements DemandPorts {
  /** Who holds which model (`model.<namespace>.<model>`), mirrored from the claims bucket's republished changes. */
  private readonly claims = new KvMirror<Claim>((raw, key) => {
    const r = parseClaim(raw)
    if (r.ok) return r.value
    // Left out: the fresh read after each idle write still cancels whatever holds the model.
    this.deps.log.error({ key, error: r.error }, 'unreadable claim in the claims bucket ignored by the watch')
    return null
  })
  /** The hot path's JetStream requests (idle writes, claim reads): no Error per request (pkg/jetstream/js-requests.ts). */
  private js?: JsRequests
  private reads?: ClaimReads
  readonly now: () => number
  readonly idle: DemandPorts['idle']
  readonly timers = {
    set: (fire: () => void, ms: number) => setTimeout(fire, ms),
    clear: (timer: unknown) => clearTimeout(timer as NodeJS.Timeout),
  }

  constructor(private readonly deps: Deps) {
    this.now = deps.now
    const kv = () => this.deps.bus.kv.idle
    this.idle = {
      get: async (key) => {
        const e = await kv().get(key)
        return e ? { operation: e.operation, revision: e.revision, text: e.string() } : null
      },
      create: (key, text) => kv().create(key, text),
      update: (key, text, revision) => kvUpdate(this.requests, bucketOf(kv()), key, text, revision),
    }
  }

  /** Made on first use (tests drive demand without start()). */
  private get requests(): JsRequests {
    this.js ??= new JsRequests(this.deps.bus.nc, { timeoutMs: 5_000 })
    return this.js
  }

  /** Claim reads made so far (tests, logs): stream versions read, keys read, answered from memory. */
  get claimReadStats() {
    return this.reads?.stats
  }

  start() {
    return this.claims.start(this.deps.bus.nc, this.deps.bus.kv.claims, 'model.>')
  }

  async stop() {
    await this.claims.stop()
    this.js?.close()
    this.js = undefined
    this.reads = undefined
  }

  readClaim(key: string) {
    this.reads ??= new ClaimReads(this.requests, bucketOf(this.deps.bus.kv.claims))
    return this.reads.read(key)
  }

  watchedClaim(key: string) {
    return this.claims.values.get(key)
  }

  publishCancel(cancel: Parameters<DemandPorts['publishCancel']>[0], msgID: string) {
    return this.deps.bus.publish('ai.flexinfer.backfill.cancel', cancel, { msgID })
  }

  publishPreempt(namespace: string, model: string, message: { job: string; at: number }) {
    this.deps.bus.nc.publish(preemptSubject(namespace, model), JSON.stringify(message))
  }
}
