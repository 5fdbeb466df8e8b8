// The keda/ overlay under the real KEDA operator: the operator (built from the kedacore/keda module by
// scripts/install-binaries.sh) runs as a local process against this environment's kube-apiserver (TLS, RBAC) and
// a dedicated nats-server running nats/auth.conf (so the FLEXINFER account, streams and durable consumers are the
// deployed ones). The overlay is applied as built, with only these test-local changes: the nats-jetstream triggers
// read this nats-server's loopback monitoring port, the metrics-api trigger calls this apiserver (same query, only
// Jobs of this file's namespace: other test files run backfill Jobs of their own at the same time), and the
// ScaledObjects poll every second and cool down in seconds. There is no kubelet and no HPA controller: KEDA's own
// 0↔1 decisions show in each Deployment's spec.replicas (it scales through the /scale subresource), which is
// exactly the scale-to-zero behaviour the overlay is about. A wrong trigger field, account, stream, consumer,
// GJSON valueLocation or auth parameter fails here.
import { AppsV1Api, BatchV1Api, CoreV1Api, CustomObjectsApi } from '@kubernetes/client-node'
import { jetstream } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { backfillLabelValue, LABEL_BACKFILL } from '../../../core/names.js'
import { createForegroundEmitter } from '../../../events/emitter.js'
import { natsServerOptions } from '../../../runtime/nats.js'
import { provision } from '../../../runtime/provision.js'
import { pinnedKedaVersion } from '../../env/binaries.js'
import { waitFor } from '../../env/exec.js'
import { isApiError, useTestEnv } from '../../env/fixture.js'
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

/** The only changes to the built overlay: endpoints on loopback, faster polling and cooldown (see the header). */
function localise(manifests: Manifest[], natsMonitorHostPort: string) {
  for (const so of manifests.filter((m) => m.kind === 'ScaledObject')) {
    so.spec.pollingInterval = POLLING_S
    so.spec.cooldownPeriod = COOLDOWN_S
    for (const t of so.spec.triggers) {
      if (t.type === 'nats-jetstream') t.metadata.natsServerMonitoringEndpoint = natsMonitorHostPort
      if (t.type === 'metrics-api') {
        const url = new URL(t.metadata.url)
        if (url.pathname !== '/apis/batch/v1/jobs') throw new Error(`unexpected warm trigger URL ${url}`)
        t.metadata.url = `${env.apiserverUrl}/apis/batch/v1/namespaces/${env.namespace}/jobs${url.search}`
      }
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

  // The warm trigger's TriggerAuthentication reads the probe's token Secret, which kube-controller-manager's token
  // controller fills in; KEDA resolves it when it builds the scalers, so it must be there first.
  const core = env.kc.makeApiClient(CoreV1Api)
  await waitFor(
    'the warm probe token Secret filled in (token, ca.crt)',
    async () => {
      const s = await core.readNamespacedSecret({
        name: build.name('model-backfill-warm-probe-token'),
        namespace: env.namespace,
      })
      return Boolean(s.data?.token && s.data['ca.crt'])
    },
    { timeoutMs: 30_000, intervalMs: 200 },
  )
  // What a KEDA install must trust to call the Kubernetes API over TLS (keda/README.md: the cluster CA in the
  // operator's --ca-dir, e.g. the kube-root-ca.crt ConfigMap mounted at /custom/ca).
  const rootCa = await waitFor('kube-root-ca.crt in the namespace', async () => {
    const cm = await core.readNamespacedConfigMap({ name: 'kube-root-ca.crt', namespace: env.namespace })
    return cm.data?.['ca.crt']
  })
  keda = await startKedaOperator({
    binary: env.binaries.kedaOperator as string,
    kubeconfigPath: env.kubeconfigPath,
    namespace: env.namespace,
    trustedCas: rootCa,
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
  it('the token controller fills in the warm probe token Secret the TriggerAuthentication reads', async () => {
    const s = await env.kc
      .makeApiClient(CoreV1Api)
      .readNamespacedSecret({ name: build.name('model-backfill-warm-probe-token'), namespace: env.namespace })
    const token = Buffer.from(s.data?.token ?? '', 'base64').toString()
    const claims = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString())
    expect(claims.sub).toBe(`system:serviceaccount:${env.namespace}:${build.name('model-backfill-warm-probe')}`)
    expect(Buffer.from(s.data?.['ca.crt'] ?? '', 'base64').toString()).toMatch(/BEGIN CERTIFICATE/)
  })

  it('accepts every ScaledObject (Ready) and every trigger reads its source without an error', async () => {
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
    // Every trigger of every ScaledObject has produced a value (lag, or active Jobs) and none has failed: a wrong
    // account, stream, consumer, URL, valueLocation or credential would show up as a scaler error.
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
    // The trigger types KEDA registered: the lag triggers (one per consumer, lifecycle-timers included) and the
    // two warm triggers.
    const registered = Object.fromEntries(
      samples.filter((s) => s.name === 'keda_trigger_registered_total').map((s) => [s.labels.type, s.value]),
    )
    expect(registered).toEqual({ 'nats-jetstream': 7, 'metrics-api': 2 })
  })

  it('with no lag and no active backfill Job, everything but the watcher scales to zero', async () => {
    for (const fn of FUNCTIONS) {
      const want = fn === 'source' ? 1 : 0
      await until(`${deployment(fn)} at ${want} replicas`, async () => (await replicas(fn)) === want)
    }
  })

  it("lag on demand's consumer scales demand 0→1; once acknowledged, it returns to 0 after the cooldown", async () => {
    expect(await replicas('demand')).toBe(0)
    const emitter = createForegroundEmitter(gateway)
    const n = 3
    for (let i = 0; i < n; i++) await emitter.emit({ namespace: env.namespace, model: `keda-${i}` })
    await emitter.close()
    await until('the lag on FLEXINFER_EVENTS/demand', async () => (await lag('FLEXINFER_EVENTS', 'demand')) === n)
    await until('KEDA to scale demand 0→1', async () => (await replicas('demand')) === 1)
    // Only demand's consumer takes foreground requests: cancel, admit and lifecycle stay at zero.
    expect(await replicas('cancel')).toBe(0)
    expect(await replicas('admit')).toBe(0)

    // The events are handled: a durable pull of demand's consumer, as the demand user, acknowledges them.
    const nc = await connect({ ...natsServerOptions(nats.url('demand')), name: 'keda-test-demand' })
    try {
      const consumer = await jetstream(nc).consumers.get('FLEXINFER_EVENTS', 'demand')
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
    await until('no lag on FLEXINFER_EVENTS/demand', async () => (await lag('FLEXINFER_EVENTS', 'demand')) === 0)
    await until(
      'KEDA to scale demand back to 0',
      async () => (await replicas('demand')) === 0,
      30_000 + COOLDOWN_S * 1000,
    )
  })

  it('an active backfill Job holds demand and cancel at ≥ 1 with zero lag; they return to 0 once it is gone', async () => {
    const batch = env.kc.makeApiClient(BatchV1Api)
    const name = 'keda-warm-1'
    const labels = { [LABEL_BACKFILL]: backfillLabelValue('keda-warm') }
    expect(await replicas('demand')).toBe(0)
    expect(await replicas('cancel')).toBe(0)
    // The Job controller creates its pod (Pending forever: no kubelet) and counts it in status.active.
    await batch.createNamespacedJob({
      namespace: env.namespace,
      body: {
        metadata: { name, labels },
        spec: {
          backoffLimit: 0,
          template: {
            metadata: { labels },
            spec: {
              restartPolicy: 'Never',
              automountServiceAccountToken: false,
              containers: [{ name: 'eval', image: 'busybox', command: ['true'] }],
            },
          },
        },
      },
    })
    await until(
      'the Job active',
      async () => ((await batch.readNamespacedJob({ name, namespace: env.namespace })).status?.active ?? 0) === 1,
    )
    await until('KEDA to scale demand and cancel 0→1 on the warm trigger', async () => {
      return (await replicas('demand')) === 1 && (await replicas('cancel')) === 1
    })
    expect(await lag('FLEXINFER_EVENTS', 'demand')).toBe(0)
    expect(await lag('FLEXINFER_EVENTS', 'cancel')).toBe(0)
    // It is the warm trigger (index 1) that is active, not the lag trigger (index 0)…
    const samples = await keda.metrics()
    for (const fn of ['demand', 'cancel'] as const) {
      expect(Object.fromEntries(perTrigger(samples, 'keda_scaler_active', fn)), fn).toEqual({ 0: 0, 1: 1 })
      expect(perTrigger(samples, 'keda_scaler_metrics_value', fn).get(1), fn).toBe(1)
    }
    // …and it holds them well past the cooldown (a bounded observation: every poll must still see ≥ 1 replica).
    const holdUntil = Date.now() + (COOLDOWN_S + 3 * POLLING_S) * 1000
    while (Date.now() < holdUntil) {
      expect(await replicas('demand')).toBeGreaterThanOrEqual(1)
      expect(await replicas('cancel')).toBeGreaterThanOrEqual(1)
      await new Promise((r) => setTimeout(r, 250))
    }

    await batch.deleteNamespacedJob({ name, namespace: env.namespace, propagationPolicy: 'Background' })
    await until('the Job gone', async () => {
      try {
        await batch.readNamespacedJob({ name, namespace: env.namespace })
        return false
      } catch (err) {
        return isApiError(err, 404)
      }
    })
    await until(
      'KEDA to scale demand and cancel back to 0',
      async () => (await replicas('demand')) === 0 && (await replicas('cancel')) === 0,
      30_000 + COOLDOWN_S * 1000,
    )
  })
})
