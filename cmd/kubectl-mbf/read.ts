// The plugin's reads: the user's kubeconfig and NATS, read-only, every call with a deadline. Explain observes a
// backfill with the functions' own observe() (pkg/reconcile/observe.ts) and fence check (pkg/admission/fence.ts), so
// what it shows is what admit sees; nothing here writes anything (no stream, bucket or consumer is created).
import { existsSync, readFileSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import { type JetStreamManager, jetstream, jetstreamManager, PubHeaders } from '@nats-io/jetstream'
import { type KV, type KvEntry, Kvm } from '@nats-io/kv'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { pino } from 'pino'
import {
  BUCKET_BACKFILLS,
  BUCKET_CLAIMS,
  BUCKET_MODEL_IDLE,
  catalog,
  STREAM_EVENTS,
  STREAM_TIMERS,
  scheduleSubject,
} from '../../events/catalog.js'
import { checkFence } from '../../pkg/admission/fence.js'
import type { ModelBackfill } from '../../pkg/core/api.js'
import { ANNOTATION_GATE_ENDPOINT_ENV } from '../../pkg/core/gate.js'
import { backfillKey, claimKeys } from '../../pkg/core/names.js'
import {
  type BackfillState,
  type ModelIdleState,
  type Parsed,
  parseBackfillState,
  parseClaim,
  parseEntry,
  parseModelIdleState,
} from '../../pkg/core/state.js'
import { Bus } from '../../pkg/jetstream/bus.js'
import { natsServerOptions } from '../../pkg/jetstream/connect.js'
import { isNotFound } from '../../pkg/jetstream/errors.js'
import { lastBySubject } from '../../pkg/jetstream/streams.js'
import { Kube } from '../../pkg/kube/client.js'
import { observe } from '../../pkg/reconcile/observe.js'
import type { Deps } from '../../pkg/transport/function.js'
import type { Args } from './args.js'
import type { CancelRequestSeen, EventSeen, ExplainInput } from './explain.js'
import { gatePodSeen } from './explain-gate.js'

/** A failure the user can act on: printed as one line, exit code 1. */
export class ReachError extends Error {}

/** How many cancel requests explain looks at (newest window of FLEXINFER_EVENTS): bounds the scan. */
export const MAX_CANCEL_SCAN = 500

export function loadKubeConfig(args: Pick<Args, 'kubeconfig' | 'context'>): KubeConfig {
  const kc = new KubeConfig()
  try {
    if (args.kubeconfig) kc.loadFromFile(args.kubeconfig)
    else kc.loadFromDefault()
    if (args.context) kc.setCurrentContext(args.context)
  } catch (err) {
    throw new ReachError(`cannot load the kubeconfig: ${(err as Error).message}`)
  }
  if (args.context && !kc.getContextObject(args.context))
    throw new ReachError(`kubeconfig has no context "${args.context}"`)
  if (!kc.getCurrentCluster())
    throw new ReachError('the kubeconfig has no current cluster (set KUBECONFIG or --kubeconfig)')
  return kc
}

export function defaultNamespace(kc: KubeConfig): string {
  return kc.getContextObject(kc.getCurrentContext())?.namespace || 'default'
}

/**
 * NATS servers: --nats-url, $NATS_URL, a `nats` CLI context, else the local default. A context's `nkey` (the seed
 * file gen:secrets writes into operator/nats-context.json) rides on the URL as `?nkey_seed_file=`, and its
 * `inbox_prefix` `_INBOX_<user>` as the URL's user, because natsServerOptions reads both from there: without them the
 * server refuses the connection or the replies.
 */
export function natsUrlFrom(args: Pick<Args, 'natsUrl' | 'natsContext'>, env = process.env, home = homedir()): string {
  if (args.natsUrl) return args.natsUrl
  if (env.NATS_URL) return env.NATS_URL
  const name = args.natsContext ?? env.NATS_CONTEXT
  if (name) {
    const dir = join(env.XDG_CONFIG_HOME || join(home, '.config'), 'nats', 'context')
    const file = name.endsWith('.json') ? name : join(dir, `${name}.json`)
    if (!existsSync(file)) throw new ReachError(`NATS context "${name}" not found (${file})`)
    let ctx: { url?: string; user?: string; password?: string; nkey?: string; inbox_prefix?: string }
    try {
      ctx = JSON.parse(readFileSync(file, 'utf8'))
    } catch (err) {
      throw new ReachError(`NATS context ${file} is not valid JSON: ${(err as Error).message}`)
    }
    const url = ctx.url || 'nats://127.0.0.1:4222'
    const inboxUser = /^_INBOX_([^.*>\s]+)$/.exec(ctx.inbox_prefix ?? '')?.[1]
    const user = ctx.user || inboxUser
    const cred = user
      ? `${encodeURIComponent(user)}${!ctx.nkey && ctx.password ? `:${encodeURIComponent(ctx.password)}` : ''}@`
      : ''
    const seed = ctx.nkey ? `?nkey_seed_file=${encodeURIComponent(ctx.nkey)}` : ''
    return url
      .split(',')
      .map((u) => u.trim().replace(/^([a-z]+:\/\/)?/i, (p) => `${p}${cred}`))
      .map((u, i) => (i === 0 ? `${u}${seed}` : u))
      .join(',')
  }
  return 'nats://127.0.0.1:4222'
}

const redact = (url: string) => url.replace(/\/\/[^@/]*@/g, '//***@')

/** A promise that rejects with `what` after ms (the libraries' own timeouts do not cover every step). */
export function deadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      t = setTimeout(() => reject(new ReachError(`${what}: no answer within ${ms} ms`)), ms)
      t.unref()
    }),
  ]).finally(() => clearTimeout(t))
}

export interface Session extends KubeSession {
  kc: KubeConfig
  kube: Kube
  nc: NatsConnection
  jsm: JetStreamManager
  idle: KV
  backfills: KV
  claims: KV
  deps: Deps
  timeoutMs: number
  apiserver: string
  natsUrl: string
  close(): Promise<void>
}

/** What the apiserver said, or why it could not be reached, as one line. */
export function kubeError(err: unknown, server: string): Error {
  if (err instanceof ReachError) return err
  const code = (err as { code?: number }).code
  const body = (err as { body?: unknown }).body
  if (typeof code === 'number' && code >= 400) {
    let message = ''
    try {
      message = JSON.parse(String(body)).message
    } catch {}
    return new ReachError(`the Kubernetes API at ${server} answered ${code}${message ? `: ${message}` : ''}`)
  }
  const cause = (err as { cause?: { code?: string; message?: string } }).cause
  const why = cause?.code ?? cause?.message ?? (err as Error).message
  return new ReachError(`cannot reach the Kubernetes API at ${server}: ${why}`)
}

export interface KubeSession {
  kc: KubeConfig
  kube: Kube
  apiserver: string
  timeoutMs: number
  close(): Promise<void>
}

/** The apiserver alone (`get` needs nothing else): one cheap call first, so an unreachable one is reported at once. */
/** A failure during a command, attributed to the apiserver or to NATS. */
export function classify(err: unknown, s: Session): Error {
  if (err instanceof ReachError) return err
  const code = (err as { code?: unknown }).code
  const name = String((err as Error)?.name ?? '')
  if (typeof code === 'number' || name === 'KubeRequestTimeout' || name === 'ApiException' || name === 'FetchError')
    return kubeError(err, s.apiserver)
  return new ReachError(`NATS at ${s.natsUrl}: ${(err as Error)?.message ?? err}`)
}

export async function openKube(args: Args): Promise<KubeSession> {
  const kc = loadKubeConfig(args)
  const apiserver = kc.getCurrentCluster()?.server ?? '?'
  const kube = new Kube(kc, { requestTimeoutMs: args.timeoutMs })
  try {
    await deadline(
      kube.custom.getAPIResources({ group: 'ai.flexinfer', version: 'v1alpha2' }),
      args.timeoutMs,
      `cannot reach the Kubernetes API at ${apiserver}`,
    )
  } catch (err) {
    kube.close()
    throw kubeError(err, apiserver)
  }
  return {
    kc,
    kube,
    apiserver,
    timeoutMs: args.timeoutMs,
    async close() {
      kube.close()
    },
  }
}

/** The apiserver (`kube`, when already open) and NATS, read-only. */
export async function openSession(args: Args, opened?: KubeSession): Promise<Session> {
  const k = opened ?? (await openKube(args))
  const { kc, apiserver } = k
  const kube = k.kube
  const natsUrl = natsUrlFrom(args)
  let nc: NatsConnection
  try {
    nc = await deadline(
      connect({
        ...natsServerOptions(natsUrl, process.env),
        name: 'kubectl-mbf',
        timeout: args.timeoutMs,
        maxReconnectAttempts: 0,
      }),
      args.timeoutMs + 1000,
      'connecting',
    )
  } catch (err) {
    kube.close()
    throw new ReachError(`cannot reach NATS at ${redact(natsUrl)}: ${(err as Error).message}`)
  }
  try {
    const jsm = await jetstreamManager(nc, { timeout: args.timeoutMs })
    const kvm = new Kvm(jetstream(nc, { timeout: args.timeoutMs }))
    const open = async (name: string) => {
      try {
        const info = await jsm.streams.info(`KV_${name}`)
        return await kvm.open(name, { allow_direct: info.config.allow_direct })
      } catch (err) {
        if (isNotFound(err))
          throw new ReachError(
            `NATS at ${redact(natsUrl)} has no KV bucket ${name}: is ModelBackfill provisioned there?`,
          )
        throw err
      }
    }
    const [idle, backfills, claims] = [
      await open(BUCKET_MODEL_IDLE),
      await open(BUCKET_BACKFILLS),
      await open(BUCKET_CLAIMS),
    ]
    const bus = new Bus(nc, jsm, { idle, backfills, claims }, { provision: false })
    const deps: Deps = { kube, bus, log: pino({ level: 'silent' }), now: () => Date.now(), instance: args.instance }
    return {
      kc,
      kube,
      nc,
      jsm,
      idle,
      backfills,
      claims,
      deps,
      timeoutMs: args.timeoutMs,
      apiserver,
      natsUrl: redact(natsUrl),
      async close() {
        kube.close()
        await nc.close().catch(() => {})
      },
    }
  } catch (err) {
    kube.close()
    await nc.close().catch(() => {})
    if (err instanceof ReachError) throw err
    throw new ReachError(`NATS at ${redact(natsUrl)}: ${(err as Error).message}`)
  }
}

/**
 * A stored value in this release's shape, or null: absent, deleted, or unreadable. An unreadable value (another
 * release's, or written by hand) is named on stderr once and left out; it never stops the command.
 */
function stored<T>(entry: KvEntry | null, parse: (raw: unknown) => Parsed<T>): T | null {
  if (entry?.operation !== 'PUT') return null
  const r = parseEntry(entry.string(), parse)
  if (r.ok) return r.value
  const where = `${entry.bucket} ${entry.key}`
  if (!unreadable.has(where) && unreadable.size < 100) unreadable.set(where, `left out ${where}: ${r.error}`)
  return null
}
/** What one command left out, by bucket and key (bounded: a bucket full of them is named 100 times at most). */
const unreadable = new Map<string, string>()

/** The warnings of the command that just ran, once each, and forgets them. */
export function takeWarnings(): string[] {
  const out = [...unreadable.values()]
  unreadable.clear()
  return out
}

/** The ModelBackfill's Events (core/v1), oldest first. */
export async function backfillEvents(
  s: KubeSession,
  namespace: string,
  name?: string,
): Promise<(EventSeen & { name: string })[]> {
  const fieldSelector = ['involvedObject.kind=ModelBackfill', ...(name ? [`involvedObject.name=${name}`] : [])].join(
    ',',
  )
  const list = await s.kube.core.listNamespacedEvent({ namespace, fieldSelector, limit: 500 })
  return list.items
    .map((e) => ({
      name: e.involvedObject.name ?? '',
      type: e.type ?? '',
      reason: e.reason ?? '',
      message: e.message ?? '',
      time: (e.lastTimestamp ?? e.firstTimestamp ?? e.eventTime ?? e.metadata.creationTimestamp)?.toISOString?.(),
    }))
    .sort((a, b) => Date.parse(a.time ?? '') - Date.parse(b.time ?? ''))
}

/** Cancel requests for one backfill stored in FLEXINFER_EVENTS since `since` (bounded scan, oldest first). */
export async function cancelRequests(
  s: Session,
  namespace: string,
  name: string,
  since: number,
): Promise<CancelRequestSeen[]> {
  const subject = catalog['ai.flexinfer.backfill.cancel'].subject
  const out: CancelRequestSeen[] = []
  let query: Record<string, unknown> = { start_time: new Date(since).toISOString(), next_by_subj: subject }
  for (let i = 0; i < MAX_CANCEL_SCAN; i++) {
    let msg: Awaited<ReturnType<JetStreamManager['streams']['getMessage']>>
    try {
      msg = await s.jsm.streams.getMessage(STREAM_EVENTS, query as never)
    } catch (err) {
      if (isNotFound(err)) break
      throw err
    }
    if (!msg) break
    try {
      const ce = msg.json<{
        data?: { namespace?: string; backfill?: string; jobName?: string; reason?: string; at?: string }
      }>()
      const d = ce.data
      if (d?.namespace === namespace && d.backfill === name && d.jobName && d.reason && d.at) {
        out.push({ jobName: d.jobName, reason: d.reason, at: d.at, storedAt: msg.time.toISOString() })
      }
    } catch {
      // not JSON: not a cancel request we can read
    }
    query = { seq: msg.seq + 1, next_by_subj: subject }
  }
  return out
}

/** The backfill's state revisions (the bucket keeps 5), oldest first. */
export async function stateHistory(s: Session, namespace: string, name: string): Promise<BackfillState[]> {
  const out: BackfillState[] = []
  const iter = await s.backfills.history({ key: backfillKey(namespace, name) })
  for await (const e of iter) {
    const v = stored(e, parseBackfillState)
    if (v) out.push(v)
    if (out.length >= 20) break
  }
  return out
}

export async function timerSchedule(s: Session, namespace: string, name: string) {
  const msg = await lastBySubject(s.jsm, STREAM_TIMERS, scheduleSubject(namespace, name))
  // A disarmed timer leaves a tombstone (no schedule header) for a second: no timer.
  const schedule = msg?.header?.get(PubHeaders.Schedule)
  if (!schedule) return { stored: false }
  return { stored: true, schedule }
}

export async function gatherExplain(s: Session, namespace: string, name: string): Promise<ExplainInput> {
  const now = Date.now()
  const backfill = await s.kube.getBackfill(namespace, name)
  const state = stored(await s.backfills.get(backfillKey(namespace, name)), parseBackfillState)
  const { observed } = await observe(s.deps, namespace, name, state, backfill, 'admit')
  const model = observed.model
  const keys = backfill && model?.node ? claimKeys(namespace, backfill.spec.modelRef, model.node) : undefined
  const claimList: ExplainInput['claims'] = []
  if (keys) {
    for (const key of [keys.model, keys.node]) {
      const c = stored(await s.claims.get(key), parseClaim)
      if (c) claimList.push({ key, claim: c })
    }
  } else if (backfill) {
    const key = claimKeys(namespace, backfill.spec.modelRef, '').model
    const c = stored(await s.claims.get(key).catch(() => null), parseClaim)
    if (c) claimList.push({ key, claim: c })
  }
  const fence = await checkFence(s.deps).catch((err: Error) => ({ error: err.message }))
  const [timer, history, events] = await Promise.all([
    timerSchedule(s, namespace, name),
    stateHistory(s, namespace, name),
    backfillEvents(s, namespace, name),
  ])
  // Cancel requests from a little before the newest cancel the history or the Events show (else the last hour).
  const cancelling = [...history].reverse().find((h) => h.phase === 'Cancelling')
  const since = Math.min(Date.parse(cancelling?.updatedAt ?? '') || now, now) - 10 * 60_000
  const requests = await cancelRequests(s, namespace, name, Math.max(since, now - 3_600_000))
  // The attempt's gate sidecar, as the kubelet reports it (only for a backfill that asks for one).
  const gatePods =
    backfill && state?.jobName && backfill.metadata.annotations?.[ANNOTATION_GATE_ENDPOINT_ENV] !== undefined
      ? await s.kube.core
          .listNamespacedPod({ namespace, labelSelector: `job-name=${state.jobName}`, limit: 20 })
          .then((list) => list.items.map(gatePodSeen))
          .catch(() => undefined)
      : undefined
  return {
    gatePods,
    namespace,
    name,
    now: Date.now(),
    observed,
    claims: claimList,
    fence,
    timer,
    history,
    events,
    cancelRequests: requests,
  }
}

export async function listBackfills(s: KubeSession, namespace?: string): Promise<ModelBackfill[]> {
  return s.kube.listBackfills(namespace)
}

export async function allStates(s: Session): Promise<BackfillState[]> {
  const out: BackfillState[] = []
  const keys = await s.backfills.keys()
  for await (const k of keys) {
    const v = stored(await s.backfills.get(k), parseBackfillState)
    if (v) out.push(v)
    if (out.length >= 10_000) break
  }
  return out
}

export async function allIdle(s: Session): Promise<ModelIdleState[]> {
  const out: ModelIdleState[] = []
  const keys = await s.idle.keys()
  for await (const k of keys) {
    const v = stored(await s.idle.get(k), parseModelIdleState)
    if (v) out.push(v)
    if (out.length >= 10_000) break
  }
  return out
}

/** Watches the idle bucket for `ms`, collecting every entry written (with the current ones first). */
export async function sampleIdle(s: Session, ms: number, filter: (v: ModelIdleState) => boolean) {
  const from = Date.now()
  const seen = new Map<string, ModelIdleState[]>()
  const watch = await s.idle.watch()
  const done = (async () => {
    for await (const e of watch) {
      const v = stored(e, parseModelIdleState)
      if (!v || !filter(v)) continue
      const key = `${v.namespace}/${v.model}`
      const list = seen.get(key) ?? []
      if (list.length < 10_000) list.push(v)
      seen.set(key, list)
    }
  })()
  await new Promise((r) => setTimeout(r, ms))
  watch.stop()
  await deadline(done, s.timeoutMs, 'NATS KV watch').catch(() => {})
  return { from, to: Date.now(), seen }
}

export async function fetchMetrics(url: string, timeoutMs: number): Promise<string> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) })
    if (!res.ok) throw new Error(`HTTP ${res.status}`)
    return await res.text()
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code
    throw new ReachError(`cannot read metrics from ${url}: ${cause ?? (err as Error).message}`)
  }
}
