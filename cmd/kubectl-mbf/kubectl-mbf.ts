// `kubectl mbf`: the operator's questions about ModelBackfill answered from the apiserver and NATS (read-only).
// Run as a kubectl plugin (the `kubectl-mbf` bin on PATH), with `npx kubectl-mbf`, or `tsx cmd/kubectl-mbf/kubectl-mbf.ts`.
// Errors are one line on stderr and a non-zero exit: 2 for a usage error, 1 for anything unreachable or failing.
import { pathToFileURL } from 'node:url'
import { type Args, parseArgs, USAGE, UsageError } from './args.js'
import { explain } from './explain.js'
import { renderExplanation } from './explain-render.js'
import {
  allIdle,
  allStates,
  backfillEvents,
  classify,
  defaultNamespace,
  fetchMetrics,
  gatherExplain,
  type KubeSession,
  kubeError,
  listBackfills,
  openKube,
  openSession,
  ReachError,
  type Session,
  sampleIdle,
  takeWarnings,
} from './read.js'
import { getRow, metricsByModel, renderGet, renderTop, topRows } from './views.js'

export interface Output {
  stdout: string
  stderr: string
  code: number
}

async function runCommand(args: Args, s: KubeSession, open: () => Promise<Session>): Promise<string> {
  const namespace = args.allNamespaces ? undefined : (args.namespace ?? defaultNamespace(s.kc))
  const now = () => Date.now()
  const kube = <T>(p: Promise<T>) => p.catch((err) => Promise.reject(kubeError(err, s.apiserver)))
  const classified = <T>(n: Session, p: Promise<T>) => p.catch((err) => Promise.reject(classify(err, n)))
  if (args.command === 'explain') {
    const nats = await open()
    const input = await classified(nats, gatherExplain(nats, namespace ?? 'default', args.name as string))
    const e = explain(input)
    if (!e.exists) throw new ReachError(`ModelBackfill ${namespace}/${args.name} not found`)
    return args.output === 'json' ? JSON.stringify(e, null, 2) : renderExplanation(e)
  }
  const backfills = (await kube(listBackfills(s, namespace))).filter((b) => !args.name || b.metadata.name === args.name)
  if (args.command === 'get') {
    if (args.name && !backfills.length) throw new ReachError(`ModelBackfill ${namespace}/${args.name} not found`)
    const namespaces = [...new Set(backfills.map((b) => b.metadata.namespace))]
    const events = new Map<string, Awaited<ReturnType<typeof backfillEvents>>>()
    for (const ns of namespaces) {
      for (const e of await kube(backfillEvents(s, ns))) {
        const key = `${ns}/${e.name}`
        events.set(key, [...(events.get(key) ?? []), e])
      }
    }
    const rows = backfills
      .map((b) => getRow(b, events.get(`${b.metadata.namespace}/${b.metadata.name}`) ?? [], now()))
      .sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`))
    return args.output === 'json' ? JSON.stringify({ items: rows }, null, 2) : renderGet(rows, now(), namespace)
  }
  // top
  const nats = await open()
  const inScope = (ns: string) => namespace === undefined || ns === namespace
  const [states, idle] = await classified(nats, Promise.all([allStates(nats), allIdle(nats)]))
  const metrics = args.metricsUrl ? metricsByModel(await fetchMetrics(args.metricsUrl, args.timeoutMs)) : undefined
  const samples = new Map<string, { entries: typeof idle; from: number; to: number }>()
  if (args.intervalMs > 0) {
    const sample = await classified(
      nats,
      sampleIdle(nats, args.intervalMs, (v) => inScope(v.namespace)),
    )
    for (const [key, entries] of sample.seen) samples.set(key, { entries, from: sample.from, to: sample.to })
    // A model with no write during the sample: its one entry as it stood (the watch replays it first).
    for (const i of idle) {
      const key = `${i.namespace}/${i.model}`
      if (!samples.has(key) && inScope(i.namespace))
        samples.set(key, { entries: [i], from: sample.from, to: sample.to })
    }
  }
  const rows = topRows(
    states.filter((x) => inScope(x.namespace)),
    backfills,
    idle.filter((x) => inScope(x.namespace)),
    samples,
    metrics,
  ).filter((r) => r.backfills > 0)
  return args.output === 'json'
    ? JSON.stringify({ sampledMs: args.intervalMs, metricsUrl: args.metricsUrl ?? null, items: rows }, null, 2)
    : renderTop(rows, now())
}

/** The whole plugin as a function (the tests call it in-process as well as through the bin). */
export async function main(argv: string[]): Promise<Output> {
  let args: Args
  try {
    args = parseArgs(argv)
  } catch (err) {
    if (err instanceof UsageError) return { stdout: '', stderr: `kubectl-mbf: ${err.message}\n\n${USAGE}\n`, code: 2 }
    throw err
  }
  if (args.command === 'help') return { stdout: `${USAGE}\n`, stderr: '', code: 0 }
  let session: KubeSession | undefined
  try {
    // `get` reads the apiserver only; explain and top open NATS too (and then use that session for both).
    const kube = await openKube(args)
    session = kube
    const open = async () => {
      const full = await openSession(args, kube)
      session = full
      return full
    }
    const stdout = `${await runCommand(args, kube, open)}\n`
    return {
      stdout,
      stderr: takeWarnings()
        .map((w) => `kubectl-mbf: ${w}\n`)
        .join(''),
      code: 0,
    }
  } catch (err) {
    const message = err instanceof ReachError ? err.message : `unexpected error: ${(err as Error)?.message ?? err}`
    takeWarnings()
    return { stdout: '', stderr: `kubectl-mbf: ${message}\n`, code: 1 }
  } finally {
    await session?.close()
  }
}

// Run directly (`tsx cmd/kubectl-mbf/kubectl-mbf.ts`); the bin shim (cmd/kubectl-mbf/kubectl-mbf.mjs) and the release's
// single-file bundle (dev/scripts/release.ts, which defines MBF_RELEASE_BUNDLE) import main() instead.
declare const MBF_RELEASE_BUNDLE: boolean | undefined
if (
  typeof MBF_RELEASE_BUNDLE === 'undefined' &&
  process.argv[1] &&
  import.meta.url === pathToFileURL(process.argv[1]).href
) {
  void main(process.argv.slice(2)).then((out) => {
    process.stdout.write(out.stdout)
    process.stderr.write(out.stderr)
    process.exit(out.code)
  })
}
