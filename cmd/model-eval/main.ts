// model-eval: the reference backfill workload (the model-eval-gauntlet template's command). One attempt of a run:
// it finds what its run already did (the run identity FLEXINFER_RUN_ID, the same in every attempt; the attempt
// FLEXINFER_ATTEMPT), does only the rest against the OpenAI-compatible endpoint (OPENAI_BASE_URL: the gate in front
// of the engine), records each item as it completes, and writes the run's artifact once every item is done. SIGTERM
// (a preemption) stops sending at once, and the process exits within a second with what it had recorded. The
// container's termination message is its progress: {"runId","done","total"}.
// Exit codes: 0 the attempt ended (run done, or nothing left for it); 2 the settings are wrong (the run fails: no
// retry fixes them); 1 a store could not be used (the Job's backoffLimit retries); 143 stopped by SIGTERM.
import { randomBytes } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { type ArtifactSink, type ProgressStore, runAttempt } from './attempt.js'
import { gateProfile } from './gate-profile.js'
import { planItems } from './items.js'
import { OpenAiClient } from './openai.js'
import { probeSet } from './probes.js'
import { readSettings, type Settings } from './settings.js'
import { executor } from './work.js'

/** How long a stop may take before the process exits anyway: inside the second the pod is given to go. */
const STOP_WITHIN_MS = 800
const SA_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace'
/**
 * After the gate closed, how long the attempt waits for the SIGTERM of its Job's deletion before it exits on its own
 * (a gate closed because NATS went away is not followed by one; the Job then retries with a fresh gate).
 */
const GATE_CLOSED_WAIT_MS = 60_000

const log = (level: 'info' | 'warn' | 'error', msg: string, fields: Record<string, unknown> = {}) =>
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`)

let settings: Settings
try {
  settings = readSettings(process.env, () => randomBytes(6).toString('hex'))
} catch (err) {
  log('error', (err as Error).message)
  process.exit(2)
}
if (!settings.runIdFromController)
  log('warn', `no FLEXINFER_RUN_ID: this is run ${settings.runId}, and a later attempt cannot resume it`)

const probes = probeSet(settings.expect)
const plan = planItems(
  settings.models.map((m) => m.name),
  probes.map((p) => p.id),
  settings.iters,
)
let done = 0
const writeTermination = () => {
  try {
    writeFileSync(settings.terminationLogPath, JSON.stringify({ runId: settings.runId, done, total: plan.length }))
  } catch (err) {
    log('warn', `cannot write the termination message to ${settings.terminationLogPath}: ${(err as Error).message}`)
  }
}

const stop = new AbortController()
let closers: (() => Promise<void>)[] = []
let gateClosed = false
process.once('SIGTERM', () => {
  log('info', 'SIGTERM: stopping; the item in flight is not recorded', { runId: settings.runId, done })
  stop.abort()
  setTimeout(() => {
    writeTermination()
    process.exit(143)
  }, STOP_WITHIN_MS).unref()
})

async function openStores(): Promise<{ progress: ProgressStore; sinks: ArtifactSink[] }> {
  const sinks: ArtifactSink[] = []
  let progress: ProgressStore | undefined
  if (settings.databaseUrl) {
    // Loaded only when configured: a run without PostgreSQL never parses its client.
    const { PostgresStores } = await import('./store-postgres.js')
    const pg = new PostgresStores(settings.databaseUrl, settings)
    closers.push(() => pg.close())
    const applied = await pg.migrate().catch((err) => {
      // The connection string holds a password: only its host is named.
      const host = new URL(settings.databaseUrl as string).host
      throw new Error(`PostgreSQL at ${host} (DATABASE_URL): ${(err as Error).message}`)
    })
    if (applied.length) log('info', `PostgreSQL schema migrated to version ${applied.at(-1)}`)
    progress = pg
    sinks.push(pg.runSink())
  }
  if (settings.configMaps) {
    const [{ CoreV1Api }, http, { ConfigMapStores }] = await Promise.all([
      import('@kubernetes/client-node'),
      import('../../pkg/kube/http.js'),
      import('./store-configmap.js'),
    ])
    const kc = http.loadKubeConfig()
    const auth = new http.PooledAuthentication(kc)
    closers.push(async () => auth.close())
    const core = http.makePooledClient(kc, auth, CoreV1Api)
    const namespace = settings.namespace ?? saNamespace() ?? kc.getContextObject(kc.getCurrentContext())?.namespace
    if (!namespace) throw new Error('no namespace for the ConfigMaps: set POD_NAMESPACE (the downward API)')
    const cms = new ConfigMapStores(core, namespace, settings, (line) => log('warn', line))
    progress ??= cms
    sinks.push(cms.benchmarkSink())
  }
  if (!progress) throw new Error('no store configured')
  return { progress, sinks }
}

function saNamespace(): string | undefined {
  try {
    return readFileSync(SA_NAMESPACE, 'utf8').trim() || undefined
  } catch {
    return undefined
  }
}

let code = 0
try {
  const gate = await gateProfile(settings.baseUrl)
  if (gate) {
    settings = { ...settings, gate }
    log('info', `the background gate is in front of the endpoint (at most ${gate.maxInFlight} requests in flight)`, {
      gate,
      batchSize: settings.batchSize,
    })
  }
  const { progress, sinks } = await openStores()
  const client = new OpenAiClient({
    baseUrl: settings.baseUrl,
    apiKey: settings.apiKey,
    workloadClass: settings.workloadClass,
    requestTimeoutMs: settings.requestTimeoutMs,
    maxRetries: settings.maxRetries,
    signal: stop.signal,
    gate: gate && {
      onGateClosed: () => {
        if (gateClosed) return
        gateClosed = true
        log(
          'info',
          'the background gate closed (foreground has the model): stopping; the item in flight is not recorded',
          {
            runId: settings.runId,
            done,
          },
        )
        stop.abort()
      },
    },
  })
  const result = await runAttempt({
    runId: settings.runId,
    attempt: settings.attempt,
    plan,
    progress,
    sinks,
    execute: executor(client, settings, probes, stop.signal),
    signal: stop.signal,
    onProgress: (n) => {
      done = n
    },
  })
  done = result.done
  log('info', result.complete ? 'run complete' : 'attempt stopped', {
    runId: settings.runId,
    attempt: settings.attempt,
    ...result,
  })
  if (result.stopped) code = 143
} catch (err) {
  if (stop.signal.aborted) code = 143
  else {
    log('error', `attempt failed: ${(err as Error).message}`, { runId: settings.runId, attempt: settings.attempt })
    code = 1
  }
}
writeTermination()
await Promise.race([Promise.all(closers.map((c) => c())), new Promise((r) => setTimeout(r, 500).unref())])
closers = []
// Exiting now would fail the pod and have the Job start another while foreground has the model: the Job's deletion
// (SIGTERM, handled above) ends this process instead.
if (gateClosed) await new Promise((r) => setTimeout(r, GATE_CLOSED_WAIT_MS))
process.exit(code)
