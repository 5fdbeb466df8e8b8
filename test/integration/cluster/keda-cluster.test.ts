// The keda/ overlay's ScaledObjects on a 3-server JetStream cluster under the real KEDA operator (pinned v2.21.0).
// Its nats-jetstream scaler, seeing cluster_size > 1, reads /varz of natsServerMonitoringEndpoint, then /jsz on
// every advertised server at the SAME monitoring port, and takes the lag from the server that leads the consumer
// (deploy/nats/CLUSTER.md). As a Kubernetes NATS deployment looks to it, each server here has an address of its own
// (127.0.0.1/.2/.3, all loopback) with the same client, route and monitoring ports, and advertises it; the overlay
// points at the first. Shown: every trigger reads its consumer without an error ("leader node not found" when the
// scaler cannot reach a leader), consumers are led by more than one server, and every trigger's value is its
// consumer's lag at the leader (7 requests make demand's lag; where it is led varies from run to run).
import { copyFile, mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { provision } from '../../../cmd/manager/provision.js'
import { BUCKET_CLAIMS, catalog } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { natsServerOptions } from '../../../pkg/jetstream/connect.js'
import { repoRoot } from '../../env/binaries.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { natsServerReady } from '../../env/nats.js'
import { freePorts } from '../../env/net.js'
import { Reaper, startServer, whileRunning } from '../../env/supervisor.js'
import {
  applyBuild,
  type Build,
  buildOverlay,
  deleteClusterScoped,
  FUNCTIONS,
  installUpstreamCrds,
  makeNatsNkeys,
  NATS_ACCOUNT,
  type NatsNkeys,
  type NatsUser,
} from '../support/deploy.js'
import { type KedaOperator, type MetricSample, startKedaOperator } from '../support/keda.js'

const env = useTestEnv()
const HOSTS = ['127.0.0.1', '127.0.0.2', '127.0.0.3']
const reaper = new Reaper()
let ports: { client: number; route: number; monitor: number }
let nkeys: NatsNkeys
let build: Build
let keda: KedaOperator
let gateway: NatsConnection

// auth.conf's users are NKeys only: the first server's entry names the user (its inbox prefix) and its seed file.
const urlOf = (user: NatsUser) =>
  HOSTS.map((h, i) =>
    i === 0
      ? `nats://${user}@${h}:${ports.client}?nkey_seed_file=${encodeURIComponent(nkeys.seedFile(user))}`
      : `${h}:${ports.client}`,
  ).join(',')

beforeAll(async () => {
  const [client, route, monitor] = (await freePorts(3)) as [number, number, number]
  ports = { client, route, monitor }
  const dir = join(env.kubeconfigPath, '..', `keda-cluster-${Date.now()}`)
  await mkdir(dir, { recursive: true })
  reaper.removeDir(dir)
  await copyFile(join(repoRoot, 'deploy/nats/auth.conf'), join(dir, 'auth.conf'))
  await copyFile(join(repoRoot, 'deploy/nats/gates.conf'), join(dir, 'gates.conf'))
  nkeys = await makeNatsNkeys(dir)
  await Promise.all(
    HOSTS.map(async (host, i) => {
      const conf = join(dir, `nats-${i}.conf`)
      await writeFile(
        conf,
        [
          `server_name: nats-${i}`,
          `listen: "${host}:${client}"`,
          `http: "${host}:${monitor}"`,
          `jetstream { store_dir: ${JSON.stringify(join(dir, `js-${i}`))}, max_memory_store: 64MB, max_file_store: 2GB }`,
          `cluster { name: keda, listen: "${host}:${route}", routes: [${HOSTS.map((h) => `"nats-route://${h}:${route}"`).join(', ')}] }`,
          'include "auth.conf"',
          '',
        ].join('\n'),
      )
      const p = startServer(reaper, `nats-${i}`, env.binaries.natsServer as string, ['-c', conf], {
        cwd: dir,
        logPath: join(dir, `nats-${i}.log`),
        env: { ...process.env, ...nkeys.serverEnv },
      })
      await whileRunning(
        p,
        waitFor(`nats-${i}`, () => natsServerReady({ monitorUrl: `http://${host}:${monitor}` }, true), {
          timeoutMs: 60_000,
        }),
      )
    }),
  )
  await provision({ natsUrl: urlOf('provision'), replicas: 3, resyncMs: 3_600_000 })
  gateway = await connect({ ...natsServerOptions(urlOf('gateway')), name: 'keda-cluster-gateway' })
  await installUpstreamCrds(env)
  build = await buildOverlay(env, 'keda', env.namespace)
  for (const so of build.manifests.filter((m) => m.kind === 'ScaledObject')) {
    so.spec.pollingInterval = 1
    for (const t of so.spec.triggers) t.metadata.natsServerMonitoringEndpoint = `${HOSTS[0]}:${monitor}`
  }
  await applyBuild(env, build)
  keda = await startKedaOperator({
    binary: env.binaries.kedaOperator as string,
    kubeconfigPath: env.kubeconfigPath,
    namespace: env.namespace,
  })
}, 240_000)

afterAll(async () => {
  await keda?.stop()
  await gateway?.close()
  await reaper.reap()
  if (build) await deleteClusterScoped(env, build)
})

/** Consumer → its leader and lag, as the leader's own /jsz reports them. */
async function consumers() {
  const out = new Map<string, { leader: string; lag: number }>()
  for (const host of HOSTS) {
    // /jsz does not name its server; /varz does.
    const varz = (await (await fetch(`http://${host}:${ports.monitor}/varz`)).json()) as { server_name: string }
    const r = await fetch(`http://${host}:${ports.monitor}/jsz?acc=${NATS_ACCOUNT}&consumers=true`)
    const jsz = (await r.json()) as {
      account_details?: {
        stream_detail?: {
          consumer_detail?: {
            name: string
            num_pending: number
            num_ack_pending: number
            cluster?: { leader?: string }
          }[]
        }[]
      }[]
    }
    for (const c of jsz.account_details
      ?.flatMap((a) => a.stream_detail ?? [])
      .flatMap((s) => s.consumer_detail ?? []) ?? []) {
      if (c.cluster?.leader === varz.server_name) {
        out.set(c.name, { leader: varz.server_name, lag: c.num_pending + c.num_ack_pending })
      }
    }
  }
  return out
}

const triggerValue = (samples: MetricSample[], fn: string, consumer: string) => {
  const so = build.manifests.find(
    (m) => m.kind === 'ScaledObject' && m.metadata.name === build.name(`model-backfill-${fn}`),
  )
  const triggers = (so?.spec.triggers ?? []) as { metadata: { consumer: string } }[]
  const i = triggers.findIndex((t) => t.metadata.consumer === consumer)
  return samples.find(
    (s) =>
      s.name === 'keda_scaler_metrics_value' &&
      s.labels.scaledObject === so?.metadata.name &&
      Number(s.labels.triggerIndex) === i,
  )?.value
}

describe('KEDA on a 3-server cluster', () => {
  it('provision made the claims bucket take atomic batches at its creation (this cluster refuses stream updates)', async () => {
    // The streams reserve more than a server's 1 GB here: every stream update is refused with "insufficient storage
    // resources available" (seen: provision failed when allow_atomic was set by an update after Kvm created the bucket).
    const nc = await connect({ ...natsServerOptions(urlOf('provision')), name: 'keda-cluster-provision' })
    try {
      const jsm = await jetstreamManager(nc)
      expect((await jsm.streams.info(`KV_${BUCKET_CLAIMS}`)).config.allow_atomic).toBe(true)
    } finally {
      await nc.close()
    }
  })

  it('reads every consumer from its leader: no scaler error, and the lag of a consumer led elsewhere', async () => {
    const led = await waitFor('a leader for every consumer', async () => {
      const c = await consumers()
      return c.size >= 8 ? c : undefined
    })
    // The consumers are spread: at least one is led by a server other than the endpoint's.
    const leaders = new Set([...led.values()].map((c) => c.leader))
    process.stderr.write(`[keda-cluster] consumer leaders: ${JSON.stringify(Object.fromEntries(led))}\n`)
    expect(leaders.size).toBeGreaterThan(1)
    // Lag on demand's two foreground consumers (nothing consumes here): 7 requests for one model.
    const subject = catalog['ai.flexinfer.foreground.request'].subject
    for (let i = 0; i < 7; i++) {
      await gateway.request(subject, encode('ai.flexinfer.foreground.request', { namespace: 'k', model: 'm' }), {
        timeout: 5_000,
      })
    }
    const samples = await waitFor(
      'KEDA reporting every trigger and demand-foreground at 7',
      async () => {
        const s = await keda.metrics()
        const values = s.filter((m) => m.name === 'keda_scaler_metrics_value' && m.labels.namespace === env.namespace)
        return values.length >= 8 && triggerValue(s, 'demand', 'demand-foreground') === 7 ? s : undefined
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    )
    const errors = samples.filter(
      (s) => s.name === 'keda_scaler_detail_errors_total' && s.labels.namespace === env.namespace && s.value > 0,
    )
    expect(errors).toEqual([])
    // Every trigger's value equals its consumer's lag at its leader.
    const now = await consumers()
    for (const fn of FUNCTIONS) {
      const so = build.manifests.find(
        (m) => m.kind === 'ScaledObject' && m.metadata.name === build.name(`model-backfill-${fn}`),
      )
      for (const t of (so?.spec.triggers ?? []) as { metadata: { consumer: string } }[]) {
        expect(triggerValue(samples, fn, t.metadata.consumer), t.metadata.consumer).toBe(
          now.get(t.metadata.consumer)?.lag,
        )
      }
    }
  }, 120_000)
})
