// The keda/ overlay under the real KEDA operator: the operator (built from the kedacore/keda module by
// dev/scripts/install-binaries.sh) runs as a local process against this environment's kube-apiserver (TLS, RBAC) and
// a dedicated nats-server running deploy/nats/auth.conf (so the FLEXINFER account, streams and durable consumers are the
// deployed ones, made by the provision step). The overlay is applied as built, with only these test-local changes:
// the nats-jetstream triggers read this nats-server's loopback monitoring port, and the ScaledObjects poll every
// second and cool down in seconds. There is no kubelet and no HPA controller: KEDA's own decisions (0↔1, and
// restoring minReplicaCount) show in each Deployment's spec.replicas (it scales through the /scale subresource),
// which is exactly what the overlay's rules are about. A wrong trigger field, account, stream or consumer fails
// here.

import { createForegroundEmitter } from '@flexinfer/gateway-emitter'
import { AppsV1Api, CustomObjectsApi } from '@kubernetes/client-node'
import { jetstream } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { provision } from '../../../cmd/manager/provision.js'
import { catalog, STREAM_EVENTS, STREAM_FOREGROUND, STREAM_FOREGROUND_LAST } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { natsServerOptions } from '../../../pkg/jetstream/connect.js'
import { pinnedKedaVersion } from '../../env/binaries.js'
import { waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import {
  type AuthNats,
  applyBuild,
  type Build,
  buildOverlay,
  deleteClusterScoped,
  FUNCTIONS,
  type FunctionName,
  installUpstreamCrds,
  type Manifest,
  NATS_ACCOUNT,
  startAuthNats,
} from '../support/deploy.js'
import { type KedaOperator, type MetricSample, startKedaOperator } from '../support/keda.js'

const env = useTestEnv()
const COOLDOWN_S = 4
const POLLING_S = 1
const KEDA_VERSION = pinnedKedaVersion()
/** The preemption path and the watcher: never at zero. */
const ALWAYS_ON: readonly FunctionName[] = ['source', 'demand', 'cancel']

let nats: AuthNats
let build: Build
/** The ScaledObjects as the overlay builds them, before the test-local changes. */
let original: Manifest[]
let keda: KedaOperator
let gateway: NatsConnection

const deployment = (fn: FunctionName) => build.name(`model-backfill-${fn}`)
const scaledObjectOf = (fn: FunctionName) => build.name(`model-backfill-${fn}`)
const triggersOf = (fn: FunctionName): { type: string; metadata: Record<string, string> }[] =>
  original.find((so) => so.metadata.name === scaledObjectOf(fn))?.spec.triggers ?? []
/** KEDA's triggerIndex of the trigger that reads `consumer`. */
const triggerIndex = (fn: FunctionName, consumer: string) => {
  const i = triggersOf(fn).findIndex((t) => t.metadata.consumer === consumer)
  if (i < 0) throw new Error(`${fn} has no trigger on consumer ${consumer}`)
  return i
}

/** The only changes to the built overlay: endpoints on loopback, faster polling and cooldown (see the header). */
function localise(manifests: Manifest[], natsMonitorHostPort: string) {
  for (const so of manifests.filter((m) => m.kind === 'ScaledObject')) {
    so.spec.pollingInterval = POLLING_S
    so.spec.cooldownPeriod = COOLDOWN_S
    for (const t of so.spec.triggers) {
      if (t.type !== 'nats-jetstream') throw new Error(`unexpected trigger type ${t.type} in ${so.metadata.name}`)
      t.metadata.natsServerMonitoringEndpoint = natsMonitorHostPort
    }
  }
}

beforeAll(async () => {
  nats = await startAuthNats(env.binaries.natsServer as string)
  await installUpstreamCrds(env) // KEDA's CRDs (and the other upstream ones) from ../shared/upstream-crds
  build = await buildOverlay(env, 'keda', env.namespace)
  original = structuredClone(build.manifests.filter((m) => m.kind === 'ScaledObject'))
  localise(build.manifests, new URL(nats.monitorUrl).host)
  await applyBuild(env, build)
  // The streams and the durable consumers every ScaledObject names, made as deployed: the provision step (the
  // model-backfill-provision Job) as its own NATS user. No function runs, so nothing consumes.
  // An hourly resync schedule: a sweep firing mid-file would leave lag on lifecycle-timers (no lifecycle runs here
  // to take it) and hold lifecycle at 1 replica.
  await provision({ natsUrl: nats.url('provision'), resyncMs: 3_600_000 })
  gateway = await connect({ ...natsServerOptions(nats.url('gateway')), name: 'keda-test-gateway' })
  keda = await startKedaOperator({
    binary: env.binaries.kedaOperator as string,
    kubeconfigPath: env.kubeconfigPath,
    namespace: env.namespace,
  })
}, 180_000)

afterAll(async () => {
  await keda?.stop()
  await gateway?.close()
  await nats?.stop()
  if (build) await deleteClusterScoped(env, build)
})

const replicas = async (fn: FunctionName) =>
  (await env.kc.makeApiClient(AppsV1Api).readNamespacedDeployment({ name: deployment(fn), namespace: env.namespace }))
    .spec?.replicas

/** A bounded wait whose timeout message carries what KEDA saw (its scaler metrics and the end of its log). */
async function until<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  try {
    return await waitFor(what, check, { timeoutMs, intervalMs: 250 })
  } catch (err) {
    const samples = await keda.metrics().catch(() => [])
    const scalers = samples
      .filter((s) => s.name === 'keda_scaler_active' || s.name === 'keda_scaler_metrics_value')
      .map((s) => `${s.name}{${s.labels.scaledObject}#${s.labels.triggerIndex}} ${s.value}`)
    const log = keda
      .logTail(20)
      .split('\n')
      .map((l) => l.replace(/,"stacktrace":".*?"(?=[,}])/, ''))
      .join('\n')
    ;(err as Error).message += `\n--- KEDA scalers ---\n${scalers.join('\n')}\n--- keda-operator log ---\n${log}`
    throw err
  }
}

/** KEDA's per-trigger samples of one metric for one ScaledObject, by trigger index. */
const perTrigger = (samples: MetricSample[], name: string, fn: FunctionName) =>
  new Map(
    samples
      .filter((s) => s.name === name && s.labels.scaledObject === scaledObjectOf(fn))
      .map((s) => [Number(s.labels.triggerIndex), s.value] as const),
  )

/** num_pending + num_ack_pending of a consumer, as the nats-jetstream scaler reads it. */
async function lag(stream: string, consumer: string): Promise<number | undefined> {
  const jsz = (await (await fetch(`${nats.monitorUrl}/jsz?acc=${NATS_ACCOUNT}&consumers=true`)).json()) as {
    account_details?: {
      stream_detail?: {
        name: string
        consumer_detail?: { name: string; num_pending: number; num_ack_pending: number }[]
      }[]
    }[]
  }
  const c = jsz.account_details
    ?.flatMap((a) => a.stream_detail ?? [])
    .find((s) => s.name === stream)
    ?.consumer_detail?.find((d) => d.name === consumer)
  return c ? c.num_pending + c.num_ack_pending : undefined
}

describe(`the keda/ overlay under the real KEDA operator ${KEDA_VERSION}`, () => {
  it('accepts every ScaledObject (Ready) and every trigger reads its consumer without an error', async () => {
    const custom = env.kc.makeApiClient(CustomObjectsApi)
    for (const fn of FUNCTIONS) {
      await until(`ScaledObject ${scaledObjectOf(fn)} Ready`, async () => {
        const so = (await custom.getNamespacedCustomObject({
          group: 'keda.sh',
          version: 'v1alpha1',
          namespace: env.namespace,
          plural: 'scaledobjects',
          name: scaledObjectOf(fn),
        })) as { status?: { conditions?: { type: string; status: string; message?: string }[] } }
        const ready = so.status?.conditions?.find((c) => c.type === 'Ready')
        if (ready?.status === 'False') throw new Error(`Ready=False: ${ready.message}`)
        return ready?.status === 'True'
      })
    }
    // Every trigger of every ScaledObject has produced a value and none has failed: a wrong account, stream or
    // consumer is a scaler error ("consumer … not found in stream …").
    const samples = await until('a metric value from every trigger', async () => {
      const s = await keda.metrics()
      const complete = FUNCTIONS.every((fn) => {
        const values = perTrigger(s, 'keda_scaler_metrics_value', fn)
        return triggersOf(fn).every((_, i) => values.has(i))
      })
      return complete ? s : undefined
    })
    const errors = samples.filter(
      (s) => s.name === 'keda_scaler_detail_errors_total' && s.labels.namespace === env.namespace && s.value > 0,
    )
    expect(errors).toEqual([])
    // Lag triggers only: source 1, demand 2 (both foreground streams), admit 2 (events, timers), cancel 1,
    // lifecycle 2 (events, timers: the resync sweep). Nothing reads the Kubernetes API.
    const registered = Object.fromEntries(
      samples.filter((s) => s.name === 'keda_trigger_registered_total').map((s) => [s.labels.type, s.value]),
    )
    expect(registered).toEqual({ 'nats-jetstream': 8 })
  })

  it('with no lag, admit and lifecycle scale to zero while demand and cancel (and the watcher) stay at 1', async () => {
    for (const fn of FUNCTIONS) {
      const want = ALWAYS_ON.includes(fn) ? 1 : 0
      await until(`${deployment(fn)} at ${want} replicas`, async () => (await replicas(fn)) === want)
    }
    // No trigger of the preemption path is active: minReplicaCount alone holds them. Read once every trigger has
    // reported since (under load the operator's endpoint was once scraped before demand's series were back: []).
    const samples = await until('keda_scaler_active from every trigger of demand and cancel', async () => {
      const s = await keda.metrics()
      const reported = (['demand', 'cancel'] as const).every(
        (fn) => perTrigger(s, 'keda_scaler_active', fn).size === triggersOf(fn).length,
      )
      return reported ? s : undefined
    })
    for (const fn of ['demand', 'cancel'] as const) {
      expect([...perTrigger(samples, 'keda_scaler_active', fn).values()], fn).toEqual(triggersOf(fn).map(() => 0))
    }
    // Well past the cooldown (a bounded observation: every poll must still see 1 replica).
    const holdUntil = Date.now() + (COOLDOWN_S + 3 * POLLING_S) * 1000
    while (Date.now() < holdUntil) {
      for (const fn of ALWAYS_ON) expect(await replicas(fn), fn).toBe(1)
      await new Promise((r) => setTimeout(r, 250))
    }
    // Scaled to zero by someone else (a hand-run `kubectl scale`, an old HPA), KEDA puts the preemption path back.
    for (const fn of ['demand', 'cancel'] as const) {
      const r = await env.kubectl(['scale', 'deployment', deployment(fn), '--replicas=0', '-n', env.namespace])
      expect(r.code, r.stderr).toBe(0)
    }
    await until(
      'KEDA to restore demand and cancel to minReplicaCount 1',
      async () => (await replicas('demand')) === 1 && (await replicas('cancel')) === 1,
    )
  })

  it("lag on admit's consumer scales admit 0→1; once acknowledged, it returns to 0 after the cooldown", async () => {
    expect(await replicas('admit')).toBe(0)
    // backfill.admit, published as the cancel user (one of its producers), to admit's consumer on FLEXINFER_EVENTS.
    const n = 3
    const producer = await connect({ ...natsServerOptions(nats.url('cancel')), name: 'keda-test-cancel' })
    try {
      const js = jetstream(producer)
      for (let i = 0; i < n; i++) {
        await js.publish(
          catalog['ai.flexinfer.backfill.admit'].subject,
          encode('ai.flexinfer.backfill.admit', { namespace: env.namespace, backfill: `keda-${i}` }),
        )
      }
    } finally {
      await producer.close()
    }
    await until(`the lag on ${STREAM_EVENTS}/admit`, async () => (await lag(STREAM_EVENTS, 'admit')) === n)
    await until('KEDA to scale admit 0→1', async () => (await replicas('admit')) === 1)
    // Only admit's consumer takes backfill.admit: lifecycle stays at zero, the others at one.
    expect(await replicas('lifecycle')).toBe(0)
    for (const fn of ALWAYS_ON) expect(await replicas(fn), fn).toBe(1)

    // The events are handled: a durable pull of admit's consumer, as the admit user, acknowledges them.
    const nc = await connect({ ...natsServerOptions(nats.url('admit')), name: 'keda-test-admit' })
    try {
      const consumer = await jetstream(nc).consumers.get(STREAM_EVENTS, 'admit')
      let acked = 0
      await until(`${n} events pulled and acknowledged`, async () => {
        const batch = await consumer.fetch({ max_messages: n - acked, expires: 1000 })
        for await (const m of batch) {
          if (await m.ackAck()) acked++
        }
        return acked === n
      })
    } finally {
      await nc.close()
    }
    await until(`no lag on ${STREAM_EVENTS}/admit`, async () => (await lag(STREAM_EVENTS, 'admit')) === 0)
    await until(
      'KEDA to scale admit back to 0',
      async () => (await replicas('admit')) === 0,
      30_000 + COOLDOWN_S * 1000,
    )
  })

  it("lag on each of demand's consumers is read by its trigger (and demand never leaves 1 for 0)", async () => {
    // The per-model subjects (what the emitter publishes: FLEXINFER_FOREGROUND_LAST / demand-foreground_last)…
    const emitter = createForegroundEmitter(gateway)
    for (let i = 0; i < 3; i++) await emitter.emit({ namespace: env.namespace, model: `keda-${i}` })
    await emitter.close()
    // …and the foreground subject (a gateway that follows the contract: FLEXINFER_FOREGROUND / demand-foreground).
    const js = jetstream(gateway)
    for (let i = 0; i < 2; i++) {
      await js.publish(
        catalog['ai.flexinfer.foreground.request'].subject,
        encode('ai.flexinfer.foreground.request', {
          namespace: env.namespace,
          model: `keda-doc-${i}`,
          workloadClass: 'foreground',
        }),
      )
    }
    await until('the lag on both of demand’s consumers', async () => {
      return (
        (await lag(STREAM_FOREGROUND_LAST, 'demand-foreground_last')) === 3 &&
        (await lag(STREAM_FOREGROUND, 'demand-foreground')) === 2
      )
    })
    const foreground = triggerIndex('demand', 'demand-foreground')
    const last = triggerIndex('demand', 'demand-foreground_last')
    const samples = await until('KEDA to read the lag of both demand triggers', async () => {
      const s = await keda.metrics()
      const values = perTrigger(s, 'keda_scaler_metrics_value', 'demand')
      return (values.get(foreground) ?? 0) > 0 && (values.get(last) ?? 0) > 0 ? s : undefined
    })
    const active = perTrigger(samples, 'keda_scaler_active', 'demand')
    expect([active.get(foreground), active.get(last)]).toEqual([1, 1])
    // Scaling out is the HPA's (none runs here); KEDA itself keeps demand at ≥ 1, and cancel is untouched.
    expect(await replicas('demand')).toBeGreaterThanOrEqual(1)
    expect(await replicas('cancel')).toBe(1)
  })
})
