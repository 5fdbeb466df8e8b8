// The provision step as deployed (its own NATS user under deploy/nats/auth.conf) brings buckets an older release made —
// with direct gets, which a lagging follower may answer — to the current configuration in place. Seen failing
// before auth.conf let `provision` update KV_flexinfer-backfills and KV_flexinfer-claims (permissions violation).
import { jetstreamManager } from '@nats-io/jetstream'
import { Kvm } from '@nats-io/kv'
import { connect } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { provision } from '../../../cmd/manager/provision.js'
import { BUCKET_BACKFILLS, BUCKET_CLAIMS, BUCKET_MODEL_IDLE } from '../../../events/catalog.js'
import { natsServerOptions } from '../../../pkg/jetstream/connect.js'
import { ensureBinaries } from '../../env/binaries.js'
import { type AuthNats, startAuthNats } from '../support/deploy.js'

let nats: AuthNats

beforeAll(async () => {
  nats = await startAuthNats(ensureBinaries().natsServer)
}, 60_000)

afterAll(async () => {
  await nats?.stop()
})

it('provision removes direct gets from buckets an older release made and lets the claims take atomic batches, as the provision user', async () => {
  const nc = await connect(natsServerOptions(nats.url('provision')))
  try {
    const buckets = [BUCKET_MODEL_IDLE, BUCKET_BACKFILLS, BUCKET_CLAIMS]
    // What an older release left: Kvm's defaults (allow_direct on).
    for (const b of buckets) await new Kvm(nc).create(b, { history: 1 })
    await provision({ natsUrl: nats.url('provision'), resyncMs: 3_600_000 })
    const jsm = await jetstreamManager(nc)
    for (const b of buckets) expect((await jsm.streams.info(`KV_${b}`)).config.allow_direct, b).toBe(false)
    // Admission takes its two claims with one atomic batch (pkg/admission/claims.ts).
    expect((await jsm.streams.info(`KV_${BUCKET_CLAIMS}`)).config.allow_atomic).toBe(true)
  } finally {
    await nc.close()
  }
}, 60_000)
