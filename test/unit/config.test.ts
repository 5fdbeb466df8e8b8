// cmd/manager/config.ts: the environment parsed once, at start. Every default as the functions had it, every bad value
// named by its variable, all of them at once; and the settings `--help` (cmd/manager/main.ts) documents are the ones read.
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig, processSettings, SETTING_NAMES, tracingOptions } from '../../cmd/manager/config.js'
import { renderUsage } from '../../cmd/manager/usage.js'
import { FAILSAFE_BLIND_MS } from '../../pkg/core/fail-safe.js'
import { RESYNC_MS } from '../../pkg/core/resync.js'
import { HANDOVER_MS } from '../../pkg/observability/exporter-lease.js'

const problems = (env: Record<string, string>) => {
  try {
    loadConfig(env)
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError)
    return (err as ConfigError).problems
  }
  throw new Error(`no problem found in ${JSON.stringify(env)}`)
}

describe('loadConfig', () => {
  it('an empty environment is every default', () => {
    const c = loadConfig({})
    expect(c).toMatchObject({
      natsUrl: undefined,
      function: undefined,
      natsProvision: true,
      natsReplicas: 1,
      natsConnectWaitMs: 120_000,
      demandAckAll: false,
      transport: 'jetstream',
      port: undefined,
      watch: undefined,
      watchNamespaces: undefined,
      httpAuth: 'token',
      httpAuthAudience: '',
      kubeRequestTimeoutMs: 10_000,
      failSafeBlindMs: FAILSAFE_BLIND_MS,
      ingressReadyUrl: undefined,
      metricsHandoverMs: HANDOVER_MS,
      resyncMs: RESYNC_MS,
      cancelDeletePods: true,
      maxDeliver: 8,
      retryBackoffMs: 250,
      retryBackoffMaxMs: 30_000,
      logLevel: 'info',
      hostname: 'local',
      tracing: false,
    })
    expect(c.gate).toBeUndefined()
    expect(tracingOptions(c)).toBeUndefined()
  })

  it('empty values are the defaults too', () => {
    const env = Object.fromEntries(SETTING_NAMES.map((n) => [n, '']))
    const c = loadConfig(env)
    expect(c).toMatchObject({ natsReplicas: 1, failSafeBlindMs: FAILSAFE_BLIND_MS, maxDeliver: 8, logLevel: 'info' })
    expect(c.natsUrl).toBeUndefined()
    expect(c.kSink).toBeUndefined()
  })

  it('reads every value as the functions did', () => {
    const c = loadConfig({
      NATS_URL: 'nats://demand@nats:4222',
      FUNCTION: 'cancel',
      NATS_PROVISION: 'false',
      NATS_REPLICAS: '3',
      NATS_CONNECT_WAIT_MS: '5000',
      NATS_NKEY_SEED_FILE: '/var/run/nats/seed',
      PROVISION_CONSUMERS: ' demand, cancel ,,bridge',
      DEMAND_ACK_POLICY: 'all',
      TRANSPORT: 'http',
      PORT: '0',
      WATCH: 'false',
      WATCH_NAMESPACES: 'a, b,a',
      HTTP_AUTH: 'kubernetes',
      HTTP_AUTH_ALLOWED: 'system:serviceaccount:x:*',
      HTTP_BODY_LIMIT_BYTES: '1024',
      KUBE_REQUEST_TIMEOUT_MS: '2500',
      GATE_IMAGE: ' image:1 ',
      GATE_NATS_URL: 'nats://nats.nats:4222',
      FAILSAFE_BLIND_MS: '2000',
      INGRESS_READY_URL: 'http://model-backfill-ingress/readyz',
      METRICS_HANDOVER_MS: '0',
      RESYNC_MS: '10',
      CANCEL_DELETE_PODS: 'false',
      MAX_DELIVER: '3',
      RETRY_BACKOFF_MS: '200',
      RETRY_BACKOFF_MAX_MS: '1000',
      LOG_LEVEL: 'warn',
      HOSTNAME: 'cancel-7f9',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318',
    })
    expect(c).toMatchObject({
      natsProvision: false,
      natsReplicas: 3,
      natsConnectWaitMs: 5_000,
      provisionConsumers: ['demand', 'cancel', 'bridge'],
      demandAckAll: true,
      transport: 'http',
      port: 0,
      watch: false,
      watchNamespaces: ['a', 'b'],
      httpAuth: 'kubernetes',
      httpBodyLimitBytes: 1024,
      kubeRequestTimeoutMs: 2_500,
      gate: { image: 'image:1', natsUrl: 'nats://nats.nats:4222' },
      failSafeBlindMs: 2_000,
      ingressReadyUrl: 'http://model-backfill-ingress/readyz',
      metricsHandoverMs: 0,
      resyncMs: 1_000, // at least a second
      logLevel: 'warn',
      tracing: true,
    })
    expect(tracingOptions(c)).toEqual({ serviceName: 'model-backfill-cancel' })
    expect(tracingOptions(loadConfig({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SERVICE_NAME: 'x' }))).toEqual({
      serviceName: 'x',
    })
    // What the rooms below receive.
    expect(processSettings(c)).toEqual({
      settings: {
        maxDeliver: 3,
        retryBackoffMs: 200,
        retryBackoffMaxMs: 1_000,
        demandAckAll: true,
        cancelDeletePods: false,
        failSafeBlindMs: 2_000,
        ingressReadyUrl: 'http://model-backfill-ingress/readyz',
        resyncMs: 1_000,
      },
      gate: { image: 'image:1', natsUrl: 'nats://nats.nats:4222' },
      connectWaitMs: 5_000,
      natsCredentials: { NATS_CREDS_FILE: undefined, NATS_NKEY_SEED_FILE: '/var/run/nats/seed' },
      replicas: 3,
      kubeRequestTimeoutMs: 2_500,
      hostname: 'cancel-7f9',
    })
    expect(loadConfig({ RESYNC_MS: '0' }).resyncMs).toBe(0)
  })

  it('names each bad value by its variable', () => {
    const bad: Record<string, string> = {
      NATS_REPLICAS: '6',
      NATS_CONNECT_WAIT_MS: '0',
      DEMAND_ACK_POLICY: 'some',
      TRANSPORT: 'grpc',
      PORT: '80x',
      WATCH_NAMESPACES: 'Not_A_Namespace',
      HTTP_AUTH: 'basic',
      HTTP_BODY_LIMIT_BYTES: '-1',
      HTTP_REQUEST_TIMEOUT_MS: '1.5',
      KUBE_REQUEST_TIMEOUT_MS: '10s',
      FAILSAFE_BLIND_MS: '999',
      INGRESS_READY_URL: 'ftp://ingress/readyz',
      METRICS_HANDOVER_MS: '-5',
      RESYNC_MS: 'often',
      MAX_DELIVER: 'many',
      RETRY_BACKOFF_MS: '0',
      RETRY_BACKOFF_MAX_MS: '1e400',
      LOG_LEVEL: 'loud',
    }
    for (const [name, value] of Object.entries(bad)) {
      const found = problems({ [name]: value })
      expect(found, name).toHaveLength(1)
      expect(found[0], name).toContain(name)
    }
    expect(problems({ GATE_IMAGE: 'image:1' })).toEqual([
      'GATE_IMAGE and GATE_NATS_URL enable the background gate together; one is unset',
    ])
  })

  it('reports every bad value at once, in one error', () => {
    let error: Error | undefined
    try {
      loadConfig({ NATS_REPLICAS: 'three', FAILSAFE_BLIND_MS: '10', LOG_LEVEL: 'loud', MAX_DELIVER: '8' })
    } catch (err) {
      error = err as Error
    }
    expect(error).toBeInstanceOf(ConfigError)
    expect((error as ConfigError).problems).toHaveLength(3)
    for (const name of ['NATS_REPLICAS', 'FAILSAFE_BLIND_MS', 'LOG_LEVEL']) expect(error?.message).toContain(name)
    expect(error?.message).not.toContain('MAX_DELIVER')
  })
})

describe('the settings `--help` lists', () => {
  const main = readFileSync(new URL('../../cmd/manager/main.ts', import.meta.url), 'utf8')
  const usage = renderUsage()
  // Each entry starts two spaces in with its variables; its description follows, six spaces in.
  const headings = [...usage.matchAll(/^ {2}([A-Z][A-Z0-9_]*(?:, [A-Z][A-Z0-9_]*)*)$/gm)].flatMap((m) =>
    (m[1] as string).split(', '),
  )
  /** Named in the usage but read by others: the Kubernetes client, the SDK, the gate sidecar (cmd/gate/config.ts). */
  const elsewhere =
    /^(KUBECONFIG|OTEL_EXPORTER_OTLP_ENDPOINT|GATE_(UPSTREAM|NAMESPACE|MODEL|JOB|ENGINE|MAX_IN_FLIGHT|PORT|HEALTH_PORT|HEALTH_HOST|PRIORITY|NATS_BOUND_MS))$/

  it('is what main.ts prints', () => {
    expect(main).toMatch(/\$\{renderUsage\(\)\}/)
  })

  it('documents every setting that is read', () => {
    expect(SETTING_NAMES.filter((n) => !headings.includes(n))).toEqual([])
  })

  it('documents nothing that is not read', () => {
    expect(headings).toContain('NATS_URL')
    expect(headings).toContain('INGRESS_TOKEN_FILE')
    expect(headings.filter((n) => !SETTING_NAMES.includes(n) && !elsewhere.test(n))).toEqual([])
  })

  it('keeps every line within 120 columns', () => {
    expect(usage.split('\n').filter((l) => l.length > 120)).toEqual([])
  })
})
