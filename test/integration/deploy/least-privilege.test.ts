// Least privilege, end to end: the keda overlay's ServiceAccounts and ClusterRoles are applied to the
// RBAC-enforcing apiserver, and every function runs in its own runner with its own ServiceAccount token and its own
// NATS user of deploy/nats/auth.conf on a dedicated nats-server, bound to the topology the provision step (its own user)
// created, as deployed. A backfill must reach Running and be preempted by a
// foreground request exactly as with admin rights, with no permission violation on either side; verbs outside a
// role are Forbidden and subjects outside a user's permissions are refused; each ScaledObject's stream and
// consumer exist in the configured account and /jsz reports their lag, as KEDA's nats-jetstream scaler reads it.

import { createForegroundEmitter } from '@flexinfer/gateway-emitter'
import {
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import Fastify from 'fastify'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { provision } from '../../../cmd/manager/provision.js'
import { type Runner, startRunner } from '../../../cmd/manager/runner.js'
import { encode } from '../../../events/codec.js'
import { INGRESS_TYPES, ingressFunction } from '../../../functions/ingress/index.js'
import { sweep } from '../../../functions/lifecycle/resync.js'
import { GROUP, VERSION } from '../../../pkg/core/api.js'
import { jobName, LABEL_BACKFILL } from '../../../pkg/core/names.js'
import { natsServerOptions } from '../../../pkg/jetstream/connect.js'
import { backfillPodsCache } from '../../../pkg/kube/cache.js'
import { startBridge } from '../../../pkg/transport/bridge.js'
import { startHttpFunction } from '../../../pkg/transport/http-adapter.js'
import { isApiError, useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import {
  type AuthNats,
  applyBuild,
  type Build,
  buildOverlay,
  deleteClusterScoped,
  FUNCTIONS,
  type FunctionName,
  installUpstreamCrds,
  NATS_ACCOUNT,
  type NatsUser,
  startAuthNats,
} from '../support/deploy.js'

const env = useTestEnv()
let nats: AuthNats
let build: Build
const kcs = {} as Record<FunctionName, KubeConfig>
const runners = new Map<FunctionName, Runner>()
let gateway: NatsConnection
let world: BackfillWorld

const start = (fn: FunctionName) =>
  // Scoped to this file's namespace: a second, independent system must not act on other files' objects.
  startRunner({
    natsUrl: nats.url(fn),
    kubeconfig: kcs[fn],
    functions: [fn],
    watch: fn === 'source',
    namespaces: [env.namespace],
    provision: false,
  })
let provisioned: Awaited<ReturnType<typeof provision>>

beforeAll(async () => {
  nats = await startAuthNats(env.binaries.natsServer as string)
  await installUpstreamCrds(env)
  build = await buildOverlay(env, 'keda', env.namespace)
  await applyBuild(env, build)
  for (const fn of FUNCTIONS) kcs[fn] = await env.saKubeConfig(build.name(`model-backfill-${fn}`))
  // As deployed: a function may start before the provision Job has run; it waits for the topology, then binds.
  const early = start('lifecycle')
  provisioned = await provision({ natsUrl: nats.url('provision'), consumers: [...FUNCTIONS, 'bridge'] })
  runners.set('lifecycle', await early)
  for (const fn of FUNCTIONS) if (!runners.has(fn)) runners.set(fn, await start(fn))
  gateway = await connect(natsServerOptions(nats.url('gateway')))
  world = new BackfillWorld(env.kc, env.namespace, gateway)
})

afterAll(async () => {
  for (const r of runners.values()) await r.stop().catch(() => {})
  await gateway?.close()
  await nats?.stop()
  if (build) await deleteClusterScoped(env, build)
})

const violations = async () => (await nats.log()).split('\n').filter((l) => /violation/i.test(l))

describe('each function with its own ServiceAccount and NATS user', () => {
  it('admits, runs and preempts a backfill, with no permission violation anywhere', async () => {
    await world.model('lp-model', { node: `lp-node-${env.namespace}` })
    await world.template('lp-tpl')
    await world.backfill('lp', { modelRef: 'lp-model', templateRef: 'lp-tpl', idleFor: '2s' })
    const running = await world.waitFor('lp', 'Running', 'JobRunning', 45_000)
    expect(running.metadata.finalizers).toContain('ai.flexinfer/modelbackfill')
    const first = jobName('lp', 1)
    expect(running.status?.jobName).toBe(first)

    // The gateway's user publishes a foreground request; demand → cancel deletes the Job.
    const emitter = createForegroundEmitter(gateway)
    await emitter.emit({ namespace: env.namespace, model: 'lp-model' })
    await waitUntil(
      'Job 1 deleted by cancel',
      async () => ((await world.job(first)) === null ? true : undefined),
      20_000,
    )
    const back = await world.waitFor('lp', 'WaitingForIdle', 'IdleWindow', 20_000)
    expect(back.status?.attempts).toBe(1)
    await emitter.close()

    // The status story was written by the functions' own identities (Events too).
    const events = await env.kubectl(['get', 'events', '-n', env.namespace, '-o', 'jsonpath={.items[*].reason}'])
    expect(events.stdout).toMatch(/Started/)
    expect(await violations()).toEqual([])
  })
})

describe('Kubernetes RBAC: a verb outside the role is Forbidden', () => {
  const forbidden = async (call: Promise<unknown>) => {
    try {
      await call
      return false
    } catch (err) {
      return isApiError(err, 403)
    }
  }
  const job = (name: string) => ({
    metadata: { name, namespace: env.namespace },
    spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'x', image: 'busybox' }] } } },
  })

  it('only admit creates Jobs', async () => {
    const batch = (fn: FunctionName) => kcs[fn].makeApiClient(BatchV1Api)
    for (const fn of ['cancel', 'lifecycle', 'demand', 'source'] as const) {
      expect(
        await forbidden(batch(fn).createNamespacedJob({ namespace: env.namespace, body: job(`x-${fn}`) })),
        fn,
      ).toBe(true)
    }
    await batch('admit').createNamespacedJob({ namespace: env.namespace, body: job('x-admit') })
    await batch('admit').deleteNamespacedJob({
      namespace: env.namespace,
      name: 'x-admit',
      propagationPolicy: 'Background',
    })
  })

  it('only cancel deletes pods, by collection only, and reads none', async () => {
    const core = (fn: FunctionName) => kcs[fn].makeApiClient(CoreV1Api)
    const selector = { namespace: env.namespace, labelSelector: 'batch.kubernetes.io/controller-uid=none' }
    for (const fn of ['admit', 'lifecycle', 'demand', 'source'] as const) {
      expect(await forbidden(core(fn).deleteCollectionNamespacedPod(selector)), fn).toBe(true)
    }
    await core('cancel').deleteCollectionNamespacedPod(selector)
    expect(await forbidden(core('cancel').listNamespacedPod({ namespace: env.namespace }))).toBe(true)
    expect(await forbidden(core('cancel').deleteNamespacedPod({ namespace: env.namespace, name: 'x' }))).toBe(true)
  })

  it('only lifecycle reads pods (get, list, watch: its pod watch); it writes none and reads no Secret', async () => {
    const core = (fn: FunctionName) => kcs[fn].makeApiClient(CoreV1Api)
    const namespace = env.namespace
    const admin = env.kc.makeApiClient(CoreV1Api)
    const pod = (name: string) => ({
      metadata: { name, namespace, labels: { [LABEL_BACKFILL]: 'none' } },
      spec: { containers: [{ name: 'x', image: 'busybox' }] },
    })
    // lifecycle's own watched copy of the attempts' pods, through its identity: a pod created after its list
    // arrives by the watch.
    const lifecycle = kcs.lifecycle
    const pods = backfillPodsCache(
      {
        kc: lifecycle,
        core: core('lifecycle'),
        batch: lifecycle.makeApiClient(BatchV1Api),
        custom: lifecycle.makeApiClient(CustomObjectsApi),
      },
      [namespace],
    )
    await pods.start()
    try {
      await admin.createNamespacedPod({ namespace, body: pod('lp-pod') })
      await waitUntil("the pod in lifecycle's watched copy", async () => pods.get(namespace, 'lp-pod') ?? undefined)
    } finally {
      await pods.stop()
    }
    expect((await core('lifecycle').readNamespacedPod({ namespace, name: 'lp-pod' })).metadata?.name).toBe('lp-pod')
    // Thunks: each request is sent only when its refusal is awaited.
    const refusals: Record<string, () => Promise<unknown>> = {
      delete: () => core('lifecycle').deleteNamespacedPod({ namespace, name: 'lp-pod' }),
      deletecollection: () =>
        core('lifecycle').deleteCollectionNamespacedPod({ namespace, labelSelector: LABEL_BACKFILL }),
      patch: () =>
        core('lifecycle').patchNamespacedPod(
          { namespace, name: 'lp-pod', body: { metadata: { labels: { x: 'y' } } } },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        ),
      create: () => core('lifecycle').createNamespacedPod({ namespace, body: pod('lp-pod-2') }),
      'list secrets': () => core('lifecycle').listNamespacedSecret({ namespace }),
      'get secret': () => core('lifecycle').readNamespacedSecret({ namespace, name: 'any' }),
    }
    for (const [what, call] of Object.entries(refusals)) expect(await forbidden(call()), `lifecycle ${what}`).toBe(true)
    for (const fn of ['admit', 'cancel', 'demand', 'source'] as const) {
      expect(await forbidden(core(fn).listNamespacedPod({ namespace })), `${fn} list pods`).toBe(true)
      expect(await forbidden(core(fn).readNamespacedPod({ namespace, name: 'lp-pod' })), `${fn} get pod`).toBe(true)
    }
    await admin.deleteNamespacedPod({ namespace, name: 'lp-pod', gracePeriodSeconds: 0 })
  })

  it('only cancel deletes Jobs by collection', async () => {
    const batch = (fn: FunctionName) => kcs[fn].makeApiClient(BatchV1Api)
    const selector = {
      namespace: env.namespace,
      labelSelector: 'ai.flexinfer/model-backfill in (none),ai.flexinfer/attempt in (none)',
      propagationPolicy: 'Background',
    }
    for (const fn of ['admit', 'lifecycle', 'demand', 'source'] as const) {
      expect(await forbidden(batch(fn).deleteCollectionNamespacedJob(selector)), fn).toBe(true)
    }
    await batch('cancel').deleteCollectionNamespacedJob(selector)
  })

  it('nobody writes a Model, a session or a lease; only admit and lifecycle list backfills, only admit CronJobs; demand reads nothing, source only reads', async () => {
    const custom = (fn: FunctionName) => kcs[fn].makeApiClient(CustomObjectsApi)
    const crd = (plural: string) => ({ group: GROUP, version: VERSION, namespace: env.namespace, plural })
    for (const fn of FUNCTIONS) {
      expect(
        await forbidden(
          custom(fn).patchNamespacedCustomObject({
            ...crd('models'),
            name: 'lp-model',
            body: { metadata: { labels: { x: 'y' } } },
          }),
        ),
        `${fn} patch models`,
      ).toBe(true)
      expect(
        await forbidden(
          custom(fn).createNamespacedCustomObject({
            ...crd('gpuleases'),
            body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'GPULease', metadata: { name: `x-${fn}` }, spec: {} },
          }),
        ),
        `${fn} create gpuleases`,
      ).toBe(true)
    }
    // demand makes no Kubernetes call at all; source (the watcher in this overlay) only reads what it watches.
    expect(await forbidden(custom('demand').getNamespacedCustomObject({ ...crd('modelbackfills'), name: 'lp' }))).toBe(
      true,
    )
    expect(await forbidden(custom('demand').getNamespacedCustomObject({ ...crd('models'), name: 'lp-model' }))).toBe(
      true,
    )
    await custom('source').getNamespacedCustomObject({ ...crd('modelbackfills'), name: 'lp' })
    expect(
      await forbidden(
        custom('source').patchNamespacedCustomObject(
          { ...crd('modelbackfills'), name: 'lp', body: { metadata: { labels: { x: 'y' } } } },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        ),
      ),
    ).toBe(true)
    expect(
      await forbidden(
        custom('cancel').listClusterCustomObject({ group: GROUP, version: VERSION, plural: 'modelbackfills' }),
      ),
    ).toBe(true)
    await custom('cancel').getNamespacedCustomObject({ ...crd('modelbackfills'), name: 'lp' })
    // admit and lifecycle list (and watch) them: their watched copies (pkg/kube/shared-caches.ts SharedCaches).
    for (const fn of ['admit', 'lifecycle'] as const) {
      await custom(fn).listClusterCustomObject({ group: GROUP, version: VERSION, plural: 'modelbackfills' })
    }
    // admit watches the CronJobs (the templates) too; cancel and lifecycle only GET the one they need.
    const batch = (fn: FunctionName) => kcs[fn].makeApiClient(BatchV1Api)
    await batch('admit').listCronJobForAllNamespaces()
    for (const fn of ['cancel', 'lifecycle'] as const) {
      expect(await forbidden(batch(fn).listCronJobForAllNamespaces()), `${fn} list cronjobs`).toBe(true)
    }
    // Nobody may replace a ModelBackfill's spec, nor delete one.
    for (const fn of ['admit', 'cancel', 'lifecycle'] as const) {
      expect(
        await forbidden(custom(fn).deleteNamespacedCustomObject({ ...crd('modelbackfills'), name: 'lp' })),
        fn,
      ).toBe(true)
    }
  })
})

describe('NATS permissions', () => {
  /** Publishes (or subscribes) as `user` and returns the permission error the server sends back, if any. */
  async function publishAs(user: NatsUser, subject: string, op: 'publish' | 'subscribe' = 'publish') {
    const nc = await connect({ ...natsServerOptions(nats.url(user)), name: `perm-test-${user}` })
    const errors: string[] = []
    const watching = (async () => {
      for await (const s of nc.status()) if (s.type === 'error') errors.push(String((s as { error?: unknown }).error))
    })()
    if (op === 'publish') nc.publish(subject, '{}')
    else nc.subscribe(subject, { callback: () => {} })
    await nc.flush()
    await new Promise((r) => setTimeout(r, 200))
    await nc.close()
    await watching
    return errors.find((e) => /permissions violation/i.test(e))
  }

  it('a function user cannot publish outside its permissions', async () => {
    expect(await publishAs('demand', 'flexinfer.events.backfill.admit')).toMatch(/Publish/)
    expect(await publishAs('cancel', 'flexinfer.events.backfill.cancel')).toMatch(/Publish/)
    expect(await publishAs('source', '$KV.flexinfer-claims.model.x.y')).toMatch(/Publish/)
    expect(await publishAs('gateway', 'flexinfer.events.model.ready')).toMatch(/Publish/)
    expect(await publishAs('demand', 'flexinfer.deadletter.admit')).toMatch(/Publish/)
    expect(await publishAs('admit', '$JS.API.STREAM.DELETE.FLEXINFER_EVENTS')).toMatch(/Publish/)
    // …and what it may publish goes through.
    expect(await publishAs('demand', 'flexinfer.events.backfill.cancel')).toBeUndefined()
    expect(await publishAs('gateway', 'flexinfer.events.foreground.request')).toBeUndefined()
    // Only the provision user may create or change streams and durable consumers, and it may touch no event.
    expect(await publishAs('admit', '$JS.API.STREAM.CREATE.FLEXINFER_EVENTS')).toMatch(/Publish/)
    expect(await publishAs('lifecycle', '$JS.API.STREAM.UPDATE.FLEXINFER_TIMERS')).toMatch(/Publish/)
    expect(await publishAs('demand', '$JS.API.CONSUMER.DURABLE.CREATE.FLEXINFER_FOREGROUND.demand-foreground')).toMatch(
      /Publish/,
    )
    expect(await publishAs('provision', 'flexinfer.events.backfill.cancel')).toMatch(/Publish/)
    expect(await publishAs('provision', '$JS.API.STREAM.DELETE.FLEXINFER_EVENTS')).toMatch(/Publish/)
    expect(await publishAs('provision', '$JS.API.CONSUMER.MSG.NEXT.FLEXINFER_FOREGROUND.demand-foreground')).toMatch(
      /Publish/,
    )
    // The server logs every refusal (so the empty log of the end-to-end run above means none happened there).
    expect((await violations()).some((l) => l.includes('flexinfer.events.backfill.admit'))).toBe(true)
  })

  it("each user receives replies on its own inbox prefix and cannot subscribe to another's", async () => {
    expect(natsServerOptions(nats.url('demand')).inboxPrefix).toBe('_INBOX_demand')
    expect(await publishAs('demand', '_INBOX_demand.x', 'subscribe')).toBeUndefined()
    expect(await publishAs('demand', '_INBOX_admit.>', 'subscribe')).toMatch(/Subscription/)
    expect(await publishAs('gateway', '_INBOX.>', 'subscribe')).toMatch(/Subscription/)
    expect(await publishAs('source', 'flexinfer.events.>', 'subscribe')).toMatch(/Subscription/)
  })

  it('the provision step made exactly the topology the functions bound to', () => {
    expect(provisioned.streams.sort()).toEqual(
      [
        'FLEXINFER_EVENTS',
        'FLEXINFER_FOREGROUND',
        'FLEXINFER_FOREGROUND_LAST',
        'FLEXINFER_TIMERS',
        'FLEXINFER_DEADLETTER',
      ].sort(),
    )
    expect(provisioned.consumers.sort()).toEqual(
      [
        'FLEXINFER_EVENTS/admit',
        'FLEXINFER_EVENTS/bridge',
        'FLEXINFER_EVENTS/cancel',
        'FLEXINFER_EVENTS/lifecycle',
        'FLEXINFER_EVENTS/source',
        'FLEXINFER_TIMERS/admit-timers',
        'FLEXINFER_TIMERS/bridge-timers',
        'FLEXINFER_FOREGROUND/demand-foreground',
        'FLEXINFER_FOREGROUND_LAST/demand-foreground_last',
        'FLEXINFER_TIMERS/lifecycle-timers',
      ].sort(),
    )
  })

  it("the resync sweep runs with lifecycle's own ServiceAccount and NATS user", async () => {
    const result = await sweep((runners.get('lifecycle') as Runner).deps)
    expect(result.backfills).toBeGreaterThan(0)
    expect(result.failed).toBe(0)
    expect(await violations()).not.toContainEqual(expect.stringContaining('"lifecycle"'))
  })

  it('the provision step stored the repeating resync schedule, readable by lifecycle', async () => {
    for (const user of ['provision', 'lifecycle'] as const) {
      const nc = await connect(natsServerOptions(nats.url(user)))
      try {
        const jsm = await jetstreamManager(nc)
        const stored = await jsm.streams.getMessage('FLEXINFER_TIMERS', { last_by_subj: 'flexinfer.schedules.resync' })
        expect(stored?.header.get('Nats-Schedule'), user).toBe('@every 30000ms')
        expect(stored?.header.get('Nats-Schedule-Target'), user).toBe('flexinfer.events.resync.due')
      } finally {
        await nc.close()
      }
    }
  })

  it('the gateway user cannot read the event streams', async () => {
    const js = jetstream(gateway)
    await expect(js.consumers.get('FLEXINFER_EVENTS', 'cancel')).rejects.toThrow()
    await expect(js.consumers.get('FLEXINFER_FOREGROUND', 'demand-foreground')).rejects.toThrow()
  })
})

describe('the HTTP ingress as its own NATS user', () => {
  it('publishes a POSTed foreground request with no permission violation', async () => {
    const ingressFn = await startHttpFunction(ingressFunction(), {
      natsUrl: nats.url('ingress'),
      provision: false,
      kubeconfig: kcs.demand,
      token: 'test-ingress-token',
      acceptTypes: INGRESS_TYPES,
      port: 0,
    })
    try {
      const res = await fetch(ingressFn.url, {
        method: 'POST',
        headers: { 'content-type': 'application/cloudevents+json', authorization: 'Bearer test-ingress-token' },
        body: JSON.stringify({
          specversion: '1.0',
          id: 'ingress-1',
          source: 'test-gateway',
          type: 'ai.flexinfer.foreground.request',
          time: new Date().toISOString(),
          datacontenttype: 'application/json',
          data: { namespace: env.namespace, model: 'via-ingress' },
        }),
      })
      expect(res.status).toBe(202)
    } finally {
      await ingressFn.stop()
    }
    expect(await violations()).not.toContainEqual(expect.stringContaining('"ingress"'))
  })
})

describe('the JetStream → Broker bridge (knative overlay) as its own NATS user', () => {
  it('forwards to the sink and dead-letters what the sink refuses, with no permission violation', async () => {
    const backfills: string[] = []
    const sink = Fastify({ logger: false })
    sink.post('/', async (req, reply) => {
      const data = (req.body as { data?: { namespace?: string; backfill?: string } }).data
      if (data?.namespace === env.namespace && data.backfill) backfills.push(data.backfill)
      return reply.code(data?.backfill === 'bridge-reject' ? 400 : 202).send()
    })
    sink.addContentTypeParser('application/cloudevents+json', { parseAs: 'string' }, (_req, body, done) =>
      done(null, JSON.parse(String(body))),
    )
    const bridge = await startBridge({
      natsUrl: nats.url('bridge'),
      provision: false,
      kubeconfig: kcs.source,
      sink: await sink.listen({ port: 0, host: '127.0.0.1' }),
      namespaces: [env.namespace],
    })
    // backfill.admit, as lifecycle publishes it (the bridge forwards what admit and lifecycle take).
    const asLifecycle = await connect(natsServerOptions(nats.url('lifecycle')))
    try {
      const js = jetstream(asLifecycle)
      for (const backfill of ['via-bridge', 'bridge-reject'])
        await js.publish(
          'flexinfer.events.backfill.admit',
          encode('ai.flexinfer.backfill.admit', { namespace: env.namespace, backfill }),
        )
      await waitUntil('both at the sink', async () =>
        backfills.includes('via-bridge') && backfills.includes('bridge-reject') ? true : undefined,
      )
      await waitUntil('the refused one dead-lettered', async () =>
        bridge.running.stats.deadLettered > 0 ? true : undefined,
      )
    } finally {
      await asLifecycle.close()
      await bridge.stop()
      await sink.close()
    }
    expect(await violations()).not.toContainEqual(expect.stringContaining('"bridge"'))
  })
})

describe('KEDA nats-jetstream triggers', () => {
  interface Jsz {
    account_details?: {
      name: string
      stream_detail?: {
        name: string
        consumer_detail?: { name: string; num_pending: number; num_ack_pending: number }[]
      }[]
    }[]
  }
  const consumers = async (account: string) => {
    const jsz = (await (await fetch(`${nats.monitorUrl}/jsz?acc=${account}&consumers=true`)).json()) as Jsz
    const acc = jsz.account_details?.find((a) => a.name === account)
    return new Map(
      (acc?.stream_detail ?? []).flatMap((s) =>
        (s.consumer_detail ?? []).map((c) => [`${s.name}/${c.name}`, c] as const),
      ),
    )
  }

  it("every ScaledObject's stream and durable consumer exist in its account, and /jsz reports their lag", async () => {
    const triggers = build.manifests
      .filter((m) => m.kind === 'ScaledObject')
      .flatMap((so) => so.spec.triggers)
      .filter((t: { type: string }) => t.type === 'nats-jetstream')
    expect(triggers.length).toBeGreaterThanOrEqual(FUNCTIONS.length)
    for (const t of triggers) {
      expect(t.metadata.account).toBe(NATS_ACCOUNT)
      const c = (await consumers(t.metadata.account)).get(`${t.metadata.stream}/${t.metadata.consumer}`)
      expect(c, `${t.metadata.stream}/${t.metadata.consumer}`).toBeDefined()
      expect(typeof c?.num_pending).toBe('number')
      expect(typeof c?.num_ack_pending).toBe('number')
    }
  })

  it("a stopped function's lag shows up where KEDA reads it", async () => {
    await runners.get('demand')?.stop()
    runners.delete('demand')
    const emitter = createForegroundEmitter(gateway)
    for (let i = 0; i < 5; i++) await emitter.emit({ namespace: env.namespace, model: `lag-${i}` })
    await emitter.close()
    // /jsz is a monitoring snapshot: give it a moment to count what was just stored. (The emitter publishes on
    // the per-model subjects: demand's consumer on FLEXINFER_FOREGROUND_LAST.)
    const pending = async () => {
      const demand = (await consumers(NATS_ACCOUNT)).get('FLEXINFER_FOREGROUND_LAST/demand-foreground_last')
      return (demand?.num_pending ?? 0) + (demand?.num_ack_pending ?? 0)
    }
    const deadline = Date.now() + 5000
    while ((await pending()) !== 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
    expect(await pending()).toBe(5)
  })
})
