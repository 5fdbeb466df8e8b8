// The install manifests against the real schemas: the upstream Knative Serving/Eventing, KEDA and eventing-natss
// CRDs are installed into the test apiserver, and the `kubectl kustomize` output of both overlays (re-namespaced
// into this file's namespace) is applied with strict field validation — every object must be accepted.
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAllDocuments } from 'yaml'
import { APISERVER_TYPES, catalog } from '../../../events/catalog.js'
import { consumerName } from '../../../pkg/jetstream/names.js'
import { PULLING_FUNCTIONS } from '../../../pkg/transport/bridge.js'
import { repoRoot } from '../../env/binaries.js'
import { useTestEnv } from '../../env/fixture.js'
import {
  applyBuild,
  type Build,
  buildOverlay,
  deleteClusterScoped,
  FUNCTIONS,
  installUpstreamCrds,
  type Manifest,
  NATS_ACCOUNT,
  toYaml,
} from '../support/deploy.js'

const env = useTestEnv()
const builds: Build[] = []

beforeAll(async () => {
  await installUpstreamCrds(env)
})
afterAll(async () => {
  for (const b of builds) await deleteClusterScoped(env, b)
})

const kinds = (ms: Manifest[]) => ms.map((m) => m.kind)
const of = (ms: Manifest[], kind: string) => ms.filter((m) => m.kind === kind)

async function buildAndApply(overlay: 'knative' | 'keda') {
  const build = await buildOverlay(env, overlay, env.namespace)
  builds.push(build)
  const applied = await applyBuild(env, build)
  return { build, applied }
}

describe('kubectl kustomize knative/', () => {
  it('applies cleanly: Services, Broker on the JetStream channel, Triggers, ApiServerSources, RBAC', async () => {
    const { build, applied } = await buildAndApply('knative')
    const ms = build.manifests
    // No CRD (deploy/base/crds/ is a kustomization of its own); everything was created and is readable back.
    expect(of(ms, 'CustomResourceDefinition')).toEqual([])
    expect(applied).toHaveLength(ms.length)
    const services = of(ms, 'Service').filter((m) => m.apiVersion === 'serving.knative.dev/v1')
    expect(services.map((s) => s.metadata.name).sort()).toEqual(
      FUNCTIONS.map((f) => build.name(`model-backfill-${f}`)).sort(),
    )
    const got = await env.kubectl([
      'get',
      'ksvc,broker,trigger,apiserversource,sinkbinding',
      '-n',
      env.namespace,
      '-o',
      'name',
    ])
    expect(got.code).toBe(0)
    expect(got.stdout.trim().split('\n')).toHaveLength(
      services.length +
        ['Broker', 'Trigger', 'ApiServerSource', 'SinkBinding'].reduce((n, k) => n + of(ms, k).length, 0),
    )

    // The preemption path stays warm; the rest scales to zero.
    const minScale = Object.fromEntries(
      services.map((s) => [
        s.spec.template.spec.containers[0].env.find((e: { name: string }) => e.name === 'FUNCTION').value,
        s.spec.template.metadata.annotations['autoscaling.knative.dev/min-scale'],
      ]),
    )
    expect(minScale).toEqual({ source: '0', demand: '1', admit: '0', cancel: '1', lifecycle: '0' })
    // …and pulls from JetStream: the Broker is never on it. The rest is served over HTTP by the Broker.
    const transport = Object.fromEntries(
      services.map((s) => {
        const env = s.spec.template.spec.containers[0].env as { name: string; value?: string }[]
        return [env.find((e) => e.name === 'FUNCTION')?.value, env.find((e) => e.name === 'TRANSPORT')?.value]
      }),
    )
    expect(transport).toEqual({
      source: 'http',
      demand: 'jetstream',
      admit: 'http',
      cancel: 'jetstream',
      lifecycle: 'http',
    })

    // The JetStream → Broker bridge: an always-on Deployment, K_SINK from a SinkBinding on it, no Kubernetes role.
    const bridge = of(ms, 'Deployment').find((d) => d.metadata.name === build.name('model-backfill-bridge'))
    expect(bridge?.spec.template.spec.containers[0].env).toContainEqual({ name: 'FUNCTION', value: 'bridge' })
    const bridgeBinding = of(ms, 'SinkBinding').find((b) => b.spec.subject.kind === 'Deployment')
    expect(bridgeBinding?.spec.subject.name).toBe(bridge?.metadata.name)
    expect(bridgeBinding?.spec.sink.ref.name).toBe(build.name('model-backfill'))
    const bridgeSa = bridge?.spec.template.spec.serviceAccountName
    expect(
      [...of(ms, 'RoleBinding'), ...of(ms, 'ClusterRoleBinding')].filter((b) =>
        b.subjects?.some((s: { name: string }) => s.name === bridgeSa),
      ),
    ).toEqual([])
    // Its sender identity: the functions need authentication-oidc (HTTP_AUTH=kubernetes), and with it on the Broker's
    // ingress refuses POSTs without a token for its audience. Knative's SinkBinding keeps that token in a Secret and
    // its webhook mounts it at /oidc (`oidc-token`, knative.dev/eventing pkg/apis/sources/v1/sinkbinding_lifecycle.go):
    // the bridge reads it from there, and mounts nothing of its own at /oidc (the injected mount would clash).
    const oidc = services.some((s) =>
      s.spec.template.spec.containers[0].env.some((e: { name: string; value?: string }) => e.name === 'HTTP_AUTH'),
    )
    expect(oidc).toBe(true)
    const bridgePod = bridge?.spec.template.spec
    expect(bridgePod.containers[0].env).toContainEqual({ name: 'BRIDGE_SINK_TOKEN_FILE', value: '/oidc/token' })
    const mounts = bridgePod.containers.flatMap((c: { volumeMounts?: { mountPath: string }[] }) => c.volumeMounts ?? [])
    expect(mounts.filter((v: { mountPath: string }) => v.mountPath.startsWith('/oidc'))).toEqual([])
    expect(bridgePod.volumes?.map((v: { name: string }) => v.name)).not.toContain('oidc-token')

    // The Broker uses the NATS JetStream channel.
    const [broker] = of(ms, 'Broker')
    const channel = of(ms, 'ConfigMap').find((c) => c.metadata.name === broker?.spec.config.name)
    expect(channel?.data['channel-template-spec']).toContain('kind: NatsJetStreamChannel')

    // Every catalog type a Broker-served function takes has exactly one Trigger to that function.
    const routes = of(ms, 'Trigger').map((t) => `${t.spec.filter.attributes.type} -> ${t.spec.subscriber.ref.name}`)
    // (from the event catalog: each type's consumers but the pulling ones; ApiServerSource types go to source)
    const expected = [
      ...APISERVER_TYPES.map((type) => `${type} -> ${build.name('model-backfill-source')}`),
      ...Object.entries(catalog).flatMap(([type, entry]) =>
        (entry.consumers as readonly string[])
          .filter((fn) => !PULLING_FUNCTIONS.includes(fn))
          .map((fn) => `${type} -> ${build.name(`model-backfill-${fn}`)}`),
      ),
    ]
    expect(routes.some((r) => r.startsWith('ai.flexinfer.foreground.request'))).toBe(false)
    expect(routes.sort()).toEqual(expected.sort())

    // ApiServerSources in Resource mode for the five watched resources; Jobs only with the backfill label.
    const sources = of(ms, 'ApiServerSource')
    expect(sources.every((s) => s.spec.mode === 'Resource')).toBe(true)
    const watched = sources.flatMap((s) => s.spec.resources.map((r: { kind: string }) => r.kind))
    expect(watched.sort()).toEqual(['GPULease', 'GamingSession', 'Job', 'Model', 'ModelBackfill'])
    const jobs = sources.flatMap((s) => s.spec.resources).find((r: { kind: string }) => r.kind === 'Job')
    expect(jobs.selector.matchExpressions).toEqual([{ key: 'ai.flexinfer/model-backfill', operator: 'Exists' }])
  })

  it('the ApiServerSource ServiceAccount may list and watch what it sources, cluster-wide, and nothing more', async () => {
    const build = builds.find((b) => b.overlay === 'knative') as Build
    const sa = `system:serviceaccount:${env.namespace}:${build.name('model-backfill-apiserversource')}`
    const can = async (...args: string[]) => (await env.kubectl(['auth', 'can-i', '--as', sa, ...args])).stdout.trim()
    for (const r of [
      'modelbackfills.ai.flexinfer',
      'models.ai.flexinfer',
      'gamingsessions.ai.flexinfer',
      'gpuleases.ai.flexinfer',
      'jobs.batch',
    ]) {
      expect(await can('watch', r, '-A')).toBe('yes')
      expect(await can('list', r, '-A')).toBe('yes')
    }
    expect(await can('create', 'jobs.batch', '-n', env.namespace)).toBe('no')
    expect(await can('update', 'models.ai.flexinfer', '-n', env.namespace)).toBe('no')
  })
})

describe('kubectl kustomize keda/', () => {
  it('applies cleanly: Deployments, ScaledObjects with nats-jetstream triggers only, RBAC', async () => {
    const { build, applied } = await buildAndApply('keda')
    const ms = build.manifests
    expect(of(ms, 'CustomResourceDefinition')).toEqual([])
    expect(applied).toHaveLength(ms.length)
    // Nothing for KEDA to authenticate with: every trigger reads the NATS monitoring endpoint.
    expect(kinds(ms)).not.toContain('TriggerAuthentication')
    const got = await env.kubectl(['get', 'deploy,scaledobject', '-n', env.namespace, '-o', 'name'])
    // (this build's own: the knative build in the same namespace has a Deployment too, the bridge)
    expect(
      got.stdout
        .trim()
        .split('\n')
        .filter((n) => n.endsWith(build.suffix)),
    ).toHaveLength(['Deployment', 'ScaledObject'].reduce((n, k) => n + of(ms, k).length, 0))

    // Each ScaledObject scales its own Deployment on the real stream and durable consumer of every subscription.
    const scaled = of(ms, 'ScaledObject')
    expect(scaled).toHaveLength(FUNCTIONS.length)
    const functions = await (await import('../../../functions/registry.js')).loadFunctions()
    for (const fn of FUNCTIONS) {
      const so = scaled.find((s) => s.spec.scaleTargetRef.name === build.name(`model-backfill-${fn}`))
      expect(so, fn).toBeDefined()
      const nats = so?.spec.triggers.filter((t: { type: string }) => t.type === 'nats-jetstream')
      const expected = functions[fn]().subscriptions.map((s) => ({
        stream: s.stream,
        consumer: consumerName(fn, s.stream),
      }))
      const named = nats.map((t: { metadata: Record<string, string> }) => `${t.metadata.stream}/${t.metadata.consumer}`)
      expect(named.sort()).toEqual(expected.map((e) => `${e.stream}/${e.consumer}`).sort())
      for (const t of nats) expect(t.metadata.account).toBe(NATS_ACCOUNT)
      // Scale to zero everywhere but the watcher (the Kubernetes event source must always run in this overlay) and
      // the preemption path (admit creates a Job only while demand and cancel pull: pkg/admission/fence.ts).
      expect(so?.spec.minReplicaCount, fn).toBe(['source', 'demand', 'cancel'].includes(fn) ? 1 : 0)
      expect(so?.spec.triggers.length, `${fn}: lag triggers only`).toBe(nats.length)
    }

    // No ApiServerSource here: source runs the Kubernetes watcher, so its ServiceAccount may list and watch the five
    // resources cluster-wide (keda/watch.yaml).
    const sa = `system:serviceaccount:${env.namespace}:${build.name('model-backfill-source')}`
    for (const r of [
      'modelbackfills.ai.flexinfer',
      'models.ai.flexinfer',
      'gamingsessions.ai.flexinfer',
      'gpuleases.ai.flexinfer',
      'jobs.batch',
    ]) {
      for (const verb of ['list', 'watch']) {
        const can = await env.kubectl(['auth', 'can-i', verb, r, '-A', '--as', sa])
        expect(can.stdout.trim(), `source may ${verb} ${r}`).toBe('yes')
      }
    }
  })
})

describe('both overlays: NATS identities, the provision Job, the ingress', () => {
  interface EnvVar {
    name: string
    value?: string
    valueFrom?: { secretKeyRef?: { name: string; key: string } }
  }
  interface PodSpec {
    containers: { env: EnvVar[]; volumeMounts?: { name: string; mountPath: string }[] }[]
    volumes?: { name: string; secret?: { secretName: string } }[]
  }
  /** Every pod template of a build (Deployments, Knative Services, Jobs) with its first container's env. */
  const workloads = (build: Build) =>
    build.manifests
      .filter((m) => ['Deployment', 'Job'].includes(m.kind) || m.apiVersion === 'serving.knative.dev/v1')
      .map((m) => {
        const pod = m.spec.template.spec as PodSpec
        const env = pod.containers[0]?.env ?? []
        const get = (name: string) => env.find((e) => e.name === name)
        return { kind: m.kind as string, name: m.metadata.name as string, get, pod }
      })

  it.each(['knative', 'keda'] as const)(
    '%s: only the provision Job may create the NATS topology; every workload is its own NATS user with its own NKey Secret',
    (overlay) => {
      const build = builds.find((b) => b.overlay === overlay) as Build
      expect(build, `${overlay} built by the test above`).toBeDefined()
      const loads = workloads(build)
      expect(loads.length).toBeGreaterThan(FUNCTIONS.length)
      const secretsUsed = new Set<string>()
      for (const w of loads) {
        const fn = w.get('FUNCTION')?.value as string
        // NATS_URL=nats://<user>@… (no password anywhere), the seed file from a Secret of this function alone.
        const user = /^nats:\/\/([^:@]+)@/.exec(w.get('NATS_URL')?.value ?? '')?.[1]
        expect(user, `${w.name} NATS user`).toBe(fn)
        expect(w.get('NATS_PASSWORD'), w.name).toBeUndefined()
        const seedFile = w.get('NATS_NKEY_SEED_FILE')?.value ?? ''
        const mount = w.pod.containers[0]?.volumeMounts?.find((v) => seedFile.startsWith(`${v.mountPath}/`))
        const secretName = w.pod.volumes?.find((v) => v.name === mount?.name)?.secret?.secretName
        expect(secretName, w.name).toBe(build.name(`model-backfill-nats-${fn}`))
        const secret = of(build.manifests, 'Secret').find((m) => m.metadata.name === secretName)
        expect(Object.keys(secret?.stringData ?? {}), w.name).toEqual(['seed'])
        secretsUsed.add(secretName as string)
        expect(w.get('NATS_PROVISION')?.value, `${w.name} NATS_PROVISION`).toBe(
          fn === 'provision' ? undefined : 'false',
        )
      }
      // Each identity's Secret is mounted by that identity's workloads only.
      expect(secretsUsed.size).toBe(new Set(loads.map((w) => w.get('FUNCTION')?.value)).size)
      const job = loads.find((w) => w.kind === 'Job')
      expect(job?.get('FUNCTION')?.value).toBe('provision')
      // It makes exactly the durable consumers this overlay's workloads pull from.
      const pullers = overlay === 'keda' ? [...FUNCTIONS] : [...PULLING_FUNCTIONS, 'bridge']
      expect(job?.get('PROVISION_CONSUMERS')?.value?.split(',').sort()).toEqual(pullers.sort())
      // The HTTP ingress: always on (never scaled to zero: it is the first hop of a cancel), behind a Service.
      const ingress = of(build.manifests, 'Deployment').find(
        (d) => d.metadata.name === build.name('model-backfill-ingress'),
      )
      expect(ingress?.spec.replicas).toBeGreaterThanOrEqual(1)
      expect(ingress?.spec.template.spec.containers[0].env).toContainEqual({ name: 'FUNCTION', value: 'ingress' })
      expect(
        of(build.manifests, 'Service').some((svc) => svc.metadata.name === build.name('model-backfill-ingress')),
      ).toBe(true)
    },
  )
})

describe('the upstream schemas do validate (a typo fails here, not in a cluster)', () => {
  it('refuses a ScaledObject and a Knative Service with a misspelt field, a Trigger with a wrong type', async () => {
    const keda = builds.find((b) => b.overlay === 'keda') ?? (await buildOverlay(env, 'keda', env.namespace))
    const knative = builds.find((b) => b.overlay === 'knative') ?? (await buildOverlay(env, 'knative', env.namespace))
    const broken = [
      (() => {
        const so = structuredClone(of(keda.manifests, 'ScaledObject')[0] as Manifest)
        so.metadata.name = 'typo-scaledobject'
        so.spec.minReplicas = so.spec.minReplicaCount
        return so
      })(),
      (() => {
        const t = structuredClone(of(knative.manifests, 'Trigger')[0] as Manifest)
        // Trigger.spec preserves unknown fields (Knative's webhook checks them, and does not run here): a wrong type
        // is what the schema itself refuses.
        t.metadata.name = 'typo-trigger'
        t.spec.broker = { name: t.spec.broker }
        return t
      })(),
      (() => {
        const svc = structuredClone(
          of(knative.manifests, 'Service').find((m) => m.apiVersion === 'serving.knative.dev/v1') as Manifest,
        )
        svc.metadata.name = 'typo-ksvc'
        svc.spec.template.spec.containers[0].imagePullPolcy = 'Always'
        return svc
      })(),
    ]
    for (const m of broken) {
      const r = await env.kubectl(['apply', '--dry-run=server', '--validate=strict', '-f', '-'], { input: toYaml([m]) })
      expect(r.code, `${m.kind} ${m.metadata.name}`).not.toBe(0)
      expect(r.stderr).toMatch(/unknown field|must be of type|Invalid value/)
    }
  })
})

describe('uninstall safety: the CRD is a kustomization of its own', () => {
  it('deploy/base/crds/ builds exactly the generated ModelBackfill CRD, and the apiserver accepts it', async () => {
    const built = await env.kubectl(['kustomize', join(repoRoot, 'deploy/base/crds')])
    expect(built.code, built.stderr).toBe(0)
    const ms = parseAllDocuments(built.stdout).map((d) => d.toJS() as Manifest)
    expect(ms.map((m) => `${m.kind}/${m.metadata.name}`)).toEqual([
      'CustomResourceDefinition/modelbackfills.ai.flexinfer',
    ])
    const generated = parseAllDocuments(await readFile(join(repoRoot, 'crds/modelbackfill.yaml'), 'utf8'))[0]?.toJS()
    expect(ms[0]?.spec).toEqual(generated.spec)
    const dry = await env.kubectl(['apply', '--server-side', '--dry-run=server', '-f', '-'], { input: built.stdout })
    expect(dry.code, dry.stderr).toBe(0)
  })

  it('deleting an overlay as applied (kubectl delete -k) leaves the CRD and every ModelBackfill', async () => {
    const mbf = {
      apiVersion: 'ai.flexinfer/v1alpha2',
      kind: 'ModelBackfill',
      metadata: { name: 'survives-uninstall', namespace: env.namespace },
      spec: { modelRef: 'no-such-model', templateRef: 'no-such-template' },
    }
    const created = await env.kubectl(['apply', '-f', '-'], { input: toYaml([mbf as Manifest]) })
    expect(created.code, created.stderr).toBe(0)
    for (const overlay of ['keda', 'knative'] as const) {
      const build = builds.find((b) => b.overlay === overlay) as Build
      // Guard: were the CRD in the build, deleting it would delete every ModelBackfill of every test file here.
      expect(of(build.manifests, 'CustomResourceDefinition'), overlay).toEqual([])
      const deleted = await env.kubectl(['delete', '--ignore-not-found', '--wait=false', '-f', '-'], {
        input: toYaml(build.manifests),
      })
      expect(deleted.code, deleted.stderr).toBe(0)
      expect(deleted.stdout).toContain('deleted')
    }
    const crd = await env.kubectl(['get', 'crd', 'modelbackfills.ai.flexinfer', '-o', 'name'])
    expect(crd.stdout.trim()).toBe('customresourcedefinition.apiextensions.k8s.io/modelbackfills.ai.flexinfer')
    const left = await env.kubectl(['get', 'mbf', 'survives-uninstall', '-n', env.namespace, '-o', 'name'])
    expect(left.code, left.stderr).toBe(0)
  })
})
