// What the container runs: `npm run build` output (tsconfig.build.json → dist/, then dev/scripts/bundle.mjs →
// dist/bundle/) started as the Dockerfile's ENTRYPOINT does, with plain node (no tsx). There is no Docker engine here, so the image itself is not built; this
// checks the compiled entry point answers --help, serves the ingress and runs the bridge end to end, then stops on
// SIGTERM.
import { type ChildProcess, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import Fastify from 'fastify'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { decode, encode } from '../../../events/codec.js'
import { repoRoot } from '../../env/binaries.js'
import { run } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
// Inside node_modules so the compiled files resolve the repo's packages (and nothing is left in the tree).
const out = join(repoRoot, 'node_modules', '.cache', `build-test-${randomUUID().slice(0, 8)}`)
const main = join(out, 'bundle', 'main.js')
const children: ChildProcess[] = []

beforeAll(async () => {
  const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8'))
  expect(pkg.scripts.build).toBe('tsc -p tsconfig.build.json && node dev/scripts/bundle.mjs')
  const tsc = await run(join(repoRoot, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.build.json', '--outDir', out], {
    cwd: repoRoot,
    timeoutMs: 120_000,
  })
  expect(tsc.code, `${tsc.stdout}${tsc.stderr}`).toBe(0)
  const bundle = await run(process.execPath, [join(repoRoot, 'dev/scripts/bundle.mjs'), join(out, 'bundle')], {
    cwd: repoRoot,
    timeoutMs: 120_000,
  })
  expect(bundle.code, `${bundle.stdout}${bundle.stderr}`).toBe(0)
}, 240_000)
afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL')
  await rm(out, { recursive: true, force: true })
})

it('the Dockerfile runs the compiled entry point', () => {
  const dockerfile = readFileSync(join(repoRoot, 'Dockerfile'), 'utf8')
  expect(dockerfile).toMatch(/^FROM node:24-slim/m)
  expect(dockerfile).toContain('RUN npm run build')
  expect(dockerfile).toContain('ENTRYPOINT ["node", "dist/bundle/main.js"]')
  // The compile cache is filled as the user the pods run as (Node keeps it per uid): after USER node.
  expect(dockerfile).toMatch(/USER node\nRUN node dist\/bundle\/main\.js --warm-compile-cache/)
})

it('node dist/bundle/main.js --warm-compile-cache loads every module, connects nowhere and exits 0', async () => {
  // No NATS_URL, no KUBECONFIG: it starts nothing. On Node 20 (this machine) there is no compile cache to fill.
  const bare = { ...process.env, NATS_URL: '', KUBECONFIG: '/nonexistent', NODE_COMPILE_CACHE: '' }
  const warm = await run(process.execPath, [main, '--warm-compile-cache'], { env: bare, timeoutMs: 60_000 })
  expect(warm.code, `${warm.stdout}${warm.stderr}`).toBe(0)
  expect(warm.stdout).toContain('compile cache:')
})

it('node dist/bundle/model-eval.js (the evaluation workload) names each missing setting and exits 2', async () => {
  const bare = { PATH: process.env.PATH ?? '' }
  const r = await run(process.execPath, [join(out, 'bundle', 'model-eval.js')], { env: bare, timeoutMs: 30_000 })
  expect(r.code, `${r.stdout}${r.stderr}`).toBe(2)
  expect(r.stderr).toContain('OPENAI_BASE_URL is not set')
  expect(r.stderr).toContain('MODELS is not set')
})

it('node dist/bundle/main.js --help', async () => {
  const help = await run(process.execPath, [main, '--help'])
  expect(help.code).toBe(0)
  expect(help.stdout).toContain('FUNCTION')
  expect(help.stdout).toContain('INGRESS_TOKEN')
})

it('FUNCTION=provision (the provision Job) makes the consumers asked for and exits 0; an unknown owner exits 1', async () => {
  const base = { ...process.env, NATS_URL: env.natsUrl, FUNCTION: 'provision', LOG_LEVEL: 'info' }
  const jsm = await jetstreamManager(env.nc)
  try {
    const ok = await run(process.execPath, [main], { env: { ...base, PROVISION_CONSUMERS: 'bridge' } })
    expect(ok.code, `${ok.stdout}${ok.stderr}`).toBe(0)
    expect(ok.stdout).toContain('NATS topology provisioned')
    expect((await jsm.consumers.info('FLEXINFER_EVENTS', 'bridge')).config.durable_name).toBe('bridge')
    expect((await jsm.consumers.info('FLEXINFER_TIMERS', 'bridge-timers')).config.durable_name).toBe('bridge-timers')
    const bad = await run(process.execPath, [main], { env: { ...base, PROVISION_CONSUMERS: 'nobody' } })
    expect(bad.code).toBe(1)
    expect(`${bad.stdout}${bad.stderr}`).toContain('cannot provision consumers for \\"nobody\\"')
  } finally {
    // Production durables on the shared test server: the bridge test below makes (and removes) them too.
    await jsm.consumers.delete('FLEXINFER_EVENTS', 'bridge').catch(() => {})
    await jsm.consumers.delete('FLEXINFER_TIMERS', 'bridge-timers').catch(() => {})
  }
})

it('FUNCTION=ingress serves authenticated CloudEvents and stops cleanly on SIGTERM', async () => {
  const token = randomUUID()
  const child = spawn(process.execPath, [main], {
    env: {
      ...process.env,
      NATS_URL: env.natsUrl,
      KUBECONFIG: env.kubeconfigPath,
      FUNCTION: 'ingress',
      INGRESS_TOKEN: token,
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  children.push(child)
  let output = ''
  child.stdout?.on('data', (d) => {
    output += d
  })
  child.stderr?.on('data', (d) => {
    output += d
  })
  let url = ''
  for (let i = 0; ; i++) {
    const served = /"url":"(http:[^"]+)".*serving CloudEvents over HTTP/.exec(output)
    if (served?.[1]) {
      url = served[1]
      break
    }
    if (i > 200 || child.exitCode !== null) throw new Error(`ingress did not start:\n${output}`)
    await new Promise((r) => setTimeout(r, 50))
  }
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      'ce-specversion': '1.0',
      'ce-id': randomUUID(),
      'ce-source': 'image-test',
      'ce-type': 'ai.flexinfer.foreground.request',
    },
    body: JSON.stringify({ namespace: env.namespace, model: 'm-image' }),
  })
  expect(res.status).toBe(202)
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  child.kill('SIGTERM')
  expect(await exited).toBe(0)
  expect(output).not.toContain(token)
})

it('FUNCTION=bridge needs K_SINK, forwards to it, and stops cleanly on SIGTERM', async () => {
  const base = { ...process.env, NATS_URL: env.natsUrl, KUBECONFIG: env.kubeconfigPath, FUNCTION: 'bridge' }
  const noSink = await run(process.execPath, [main], { env: { ...base, K_SINK: '' } })
  expect(noSink.code).toBe(2)
  expect(`${noSink.stdout}${noSink.stderr}`).toContain('K_SINK')

  const received: string[] = []
  const sink = Fastify({ logger: false })
  sink.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => done(null, body))
  sink.post('/', async (req, reply) => {
    const d = decode(String(req.body))
    if (d.ok && (d.event.data as { namespace?: string }).namespace === env.namespace) received.push(d.event.type)
    return reply.code(202).send()
  })
  const sinkUrl = await sink.listen({ port: 0, host: '127.0.0.1' })
  const child = spawn(process.execPath, [main], {
    env: { ...base, K_SINK: sinkUrl, WATCH_NAMESPACES: env.namespace, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  children.push(child)
  let output = ''
  child.stdout?.on('data', (d) => {
    output += d
  })
  child.stderr?.on('data', (d) => {
    output += d
  })
  try {
    let health = ''
    for (let i = 0; ; i++) {
      const m = /"httpUrl":"(http:[^"]+)".*bridging JetStream to the sink/.exec(output)
      if (m?.[1]) {
        health = m[1]
        break
      }
      if (i > 200 || child.exitCode !== null) throw new Error(`bridge did not start:\n${output}`)
      await new Promise((r) => setTimeout(r, 50))
    }
    expect((await fetch(`${health}/readyz`)).status).toBe(200)
    // A backfill.admit: what the bridge forwards (to admit behind the Broker); foreground requests it does not.
    await jetstream(env.nc).publish(
      'flexinfer.events.backfill.admit',
      encode('ai.flexinfer.backfill.admit', { namespace: env.namespace, backfill: 'b-bridge' }),
    )
    for (let i = 0; !received.includes('ai.flexinfer.backfill.admit'); i++) {
      if (i > 200) throw new Error(`nothing reached the sink:\n${output}`)
      await new Promise((r) => setTimeout(r, 50))
    }
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
    child.kill('SIGTERM')
    expect(await exited).toBe(0)
  } finally {
    await sink.close()
    // The production durables (`bridge`, `bridge-timers`) it made on the shared test server.
    const jsm = await jetstreamManager(env.nc)
    await jsm.consumers.delete('FLEXINFER_EVENTS', 'bridge').catch(() => {})
    await jsm.consumers.delete('FLEXINFER_TIMERS', 'bridge-timers').catch(() => {})
  }
})

it('FUNCTION=cancel as deployed (NATS_PROVISION=false) serves /healthz, /readyz and /metrics and stops on SIGTERM', async () => {
  // The topology the provision Job makes; the function only binds to it.
  const prov = await run(process.execPath, [main], {
    env: { ...process.env, NATS_URL: env.natsUrl, FUNCTION: 'provision', PROVISION_CONSUMERS: 'cancel' },
  })
  expect(prov.code, `${prov.stdout}${prov.stderr}`).toBe(0)
  const child = spawn(process.execPath, [main], {
    env: {
      ...process.env,
      NATS_URL: env.natsUrl,
      KUBECONFIG: env.kubeconfigPath,
      FUNCTION: 'cancel',
      NATS_PROVISION: 'false',
      WATCH_NAMESPACES: env.namespace,
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  children.push(child)
  let output = ''
  child.stdout?.on('data', (d) => {
    output += d
  })
  child.stderr?.on('data', (d) => {
    output += d
  })
  try {
    let url = ''
    for (let i = 0; ; i++) {
      const m = /metrics at (http:\/\/[^/"]+)\/metrics/.exec(output)
      if (m?.[1]) {
        url = m[1]
        break
      }
      if (i > 600 || child.exitCode !== null) throw new Error(`cancel did not start:\n${output}`)
      await new Promise((r) => setTimeout(r, 50))
    }
    expect(await (await fetch(`${url}/healthz`)).json()).toEqual({ ok: true })
    const ready = await fetch(`${url}/readyz`)
    expect(ready.status).toBe(200)
    expect(((await ready.json()) as { functions: { name: string }[] }).functions.map((f) => f.name)).toEqual(['cancel'])
    const metrics = await fetch(`${url}/metrics`)
    expect(metrics.status).toBe(200)
    expect(await metrics.text()).toContain('# TYPE')
    expect((await fetch(`${url}/nothing`)).status).toBe(404)
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
    child.kill('SIGTERM')
    expect(await exited).toBe(0)
  } finally {
    // The production durable it bound to, on the shared test server (nothing else reads it).
    await (await jetstreamManager(env.nc)).consumers.delete('FLEXINFER_EVENTS', 'cancel').catch(() => {})
  }
})
