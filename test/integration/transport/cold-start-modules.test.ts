// What a function's process loads at start (cold start, issue 11), checked without timing: the image's bundle
// (dev/scripts/bundle.mjs, with esbuild's metafile) is started as deployed, an ESM loader hook records every bundle file
// the process loads, and the metafile says which sources and packages are in them. demand, with tracing off, must
// handle its first event without loading @kubernetes/client-node or the OpenTelemetry SDK and exporter: a later
// static import cannot bring them back silently. The control: cancel with an OTLP endpoint set loads both (so the
// check sees them when they are there). On a nats-server of the test's own: the processes create the production
// consumers, which the shared server's other files must not see.
import { type ChildProcess, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { readFileSync, realpathSync, writeFileSync } from 'node:fs'
import { mkdir, rm } from 'node:fs/promises'
import { basename, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { catalog, STREAM_FOREGROUND } from '../../../events/catalog.js'
import { encode } from '../../../events/codec.js'
import { ensureBinaries, repoRoot } from '../../env/binaries.js'
import { run, sleep } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { type OwnNats, startOwnNats } from './own-nats.js'

const env = useTestEnv()
// Inside node_modules like image.test.ts (nothing left in the tree).
const out = join(repoRoot, 'node_modules', '.cache', `cold-modules-${randomUUID().slice(0, 8)}`)
const bundle = join(out, 'bundle')
const metaPath = join(out, 'meta.json')
const hooks = join(out, 'hooks.mjs')
const register = join(out, 'register.mjs')
let nats: OwnNats
let nc: NatsConnection
const children: ChildProcess[] = []

/** Packages a process with tracing off and no Kubernetes calls must not load. */
const KUBE_CLIENT = /node_modules\/@kubernetes\/client-node\//
const OTEL_SDK = /node_modules\/@opentelemetry\/(sdk-|exporter-|otlp-|resources\/)/
/** The HTTP server of TRANSPORT=http and the ingress: a JetStream function serves /metrics on node:http. */
const FASTIFY = /node_modules\/(fastify|find-my-way|light-my-request|fast-json-stringify)\//

beforeAll(async () => {
  await mkdir(out, { recursive: true })
  const built = await run(process.execPath, [join(repoRoot, 'dev/scripts/bundle.mjs'), bundle, metaPath], {
    cwd: repoRoot,
    timeoutMs: 120_000,
  })
  expect(built.code, `${built.stdout}${built.stderr}`).toBe(0)
  // The hook runs on the loader's thread: it appends each file: URL loaded to the log it was given.
  writeFileSync(
    hooks,
    `import { appendFileSync } from 'node:fs'
let log
export function initialize(data) { log = data.log }
export async function load(url, context, next) {
  if (url.startsWith('file:')) appendFileSync(log, url + '\\n')
  return next(url, context)
}
`,
  )
  writeFileSync(
    register,
    `import { register } from 'node:module'
register(${JSON.stringify(pathToFileURL(hooks).href)}, { data: { log: process.env.LOADED_LOG } })
`,
  )
  nats = await startOwnNats(ensureBinaries().natsServer)
  nc = await connect({ servers: nats.url })
}, 180_000)

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
  await nc?.close()
  await nats?.destroy()
  await rm(out, { recursive: true, force: true })
})

/** The bundle's outputs (by file name) and the sources in each. */
function outputsBySource(): Map<string, string[]> {
  const meta = JSON.parse(readFileSync(metaPath, 'utf8')) as { outputs: Record<string, { inputs: object }> }
  return new Map(Object.entries(meta.outputs).map(([file, o]) => [basename(file), Object.keys(o.inputs)]))
}

/** The bundle files a process loaded, and every source in them. */
function loaded(log: string): { files: string[]; sources: string[] } {
  const outputs = outputsBySource()
  const files = [
    ...new Set(
      readFileSync(log, 'utf8')
        .split('\n')
        // node resolves the node_modules symlink: the loaded URLs carry the real path.
        .filter((u) => u.startsWith(pathToFileURL(realpathSync(bundle)).href))
        .map((u) => basename(new URL(u).pathname)),
    ),
  ]
  return { files, sources: files.flatMap((f) => outputs.get(f) ?? []) }
}

function spawnFunction(fn: string, log: string, extra: Record<string, string> = {}): ChildProcess {
  const env0 = { ...process.env }
  for (const k of Object.keys(env0)) if (k.startsWith('OTEL_')) delete env0[k]
  const child = spawn(process.execPath, ['--import', register, join(bundle, 'main.js')], {
    env: {
      ...env0,
      NATS_URL: nats.url,
      KUBECONFIG: env.kubeconfigPath,
      WATCH_NAMESPACES: env.namespace,
      FUNCTION: fn,
      PORT: '0',
      LOG_LEVEL: 'info',
      LOADED_LOG: log,
      ...extra,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  children.push(child)
  return child
}

/** Resolves once `check` is true; fails with the process's output when it exits or 60 s pass. */
async function until(child: ChildProcess, what: string, check: () => Promise<boolean>) {
  let output = ''
  child.stdout?.on('data', (d) => {
    output = (output + d).slice(-4000)
  })
  child.stderr?.on('data', (d) => {
    output = (output + d).slice(-4000)
  })
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${what}: the process exited ${child.exitCode}:\n${output}`)
    if (await check().catch(() => false)) return
    await sleep(50)
  }
  throw new Error(`${what}: not within 60 s:\n${output}`)
}

async function stop(child: ChildProcess) {
  if (child.exitCode !== null) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  await Promise.race([exited, sleep(10_000).then(() => child.kill('SIGKILL'))])
}

it('the metafile maps the Kubernetes client and the OpenTelemetry SDK to bundle files (the check can see them)', () => {
  const all = [...outputsBySource().values()].flat()
  expect(all.some((s) => KUBE_CLIENT.test(s))).toBe(true)
  expect(all.some((s) => OTEL_SDK.test(s))).toBe(true)
})

it('the bundle carries no zod locale but English and no whatwg-url (dev/scripts/bundle.mjs)', () => {
  const all = [...outputsBySource().values()].flat()
  expect(all.filter((s) => /zod\/v4\/locales\/(?!en\.js)/.test(s) && !s.startsWith('zod-locales:'))).toEqual([])
  expect(all.filter((s) => /node_modules\/(whatwg-url|tr46)\//.test(s))).toEqual([])
})

it('demand, tracing off, handles its first event without loading the Kubernetes client or the OpenTelemetry SDK', async () => {
  const log = join(out, 'demand.loaded')
  writeFileSync(log, '')
  const child = spawnFunction('demand', log)
  const js = jetstream(nc)
  const jsm = await jetstreamManager(nc)
  // The stream exists once demand has provisioned; the event then waits on its consumer.
  await until(child, 'demand provisioned', async () =>
    Boolean(await jsm.consumers.info(STREAM_FOREGROUND, 'demand-foreground')),
  )
  const ack = await js.publish(
    catalog['ai.flexinfer.foreground.request'].subject,
    encode('ai.flexinfer.foreground.request', { namespace: env.namespace, model: 'cold-modules' }),
  )
  await until(child, 'the first event acked', async () => {
    const info = await jsm.consumers.info(STREAM_FOREGROUND, 'demand-foreground')
    return info.ack_floor.stream_seq >= ack.seq
  })
  const { files, sources } = loaded(log)
  await stop(child)
  // The hook saw the entry and demand's own code: an empty or partial log cannot pass.
  expect(files).toContain('main.js')
  expect(sources).toContain('functions/demand/index.ts')
  expect(sources.filter((s) => KUBE_CLIENT.test(s))).toEqual([])
  expect(sources.filter((s) => OTEL_SDK.test(s))).toEqual([])
}, 150_000)

it('admit, tracing off, is running (copies it decides on synced) without fastify or the OpenTelemetry SDK', async () => {
  const log = join(out, 'admit.loaded')
  writeFileSync(log, '')
  const child = spawnFunction('admit', log)
  let running = false
  child.stdout?.on('data', (d) => {
    if (String(d).includes('model-backfill running')) running = true
  })
  await until(child, 'admit running', async () => running)
  const { files, sources } = loaded(log)
  await stop(child)
  expect(files).toContain('main.js')
  expect(sources).toContain('functions/admit/index.ts')
  // It calls the apiserver: the client is there (the check would see it).
  expect(sources.some((s) => KUBE_CLIENT.test(s))).toBe(true)
  expect(sources.filter((s) => FASTIFY.test(s))).toEqual([])
  expect(sources.filter((s) => OTEL_SDK.test(s))).toEqual([])
}, 150_000)

it('control: cancel with an OTLP endpoint set loads both', async () => {
  const log = join(out, 'cancel.loaded')
  writeFileSync(log, '')
  // Nothing listens there; the exporter only fails to send (no span is made before the process stops).
  const child = spawnFunction('cancel', log, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' })
  let running = false
  child.stdout?.on('data', (d) => {
    if (String(d).includes('model-backfill running')) running = true
  })
  await until(child, 'cancel running', async () => running)
  const { sources } = loaded(log)
  await stop(child)
  expect(sources).toContain('functions/cancel/index.ts')
  expect(sources.some((s) => KUBE_CLIENT.test(s))).toBe(true)
  expect(sources.some((s) => OTEL_SDK.test(s))).toBe(true)
}, 150_000)
