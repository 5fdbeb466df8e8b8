// kubectl mbf against a live backfill on the real servers: WaitingForIdle with its window counting down, Running,
// and after a foreground request cancelled it (the last cancel with its trigger and latency), in text and JSON;
// the bin shim as kubectl would run it; and one-line errors with a non-zero exit when NATS or the apiserver cannot
// be reached (a silent peer included: every call has a deadline).
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { writeFile } from 'node:fs/promises'
import { createServer, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Kvm } from '@nats-io/kv'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Explanation } from '../../../cmd/kubectl-mbf/explain.js'
import { main } from '../../../cmd/kubectl-mbf/kubectl-mbf.js'
import type { GetRow, TopRow } from '../../../cmd/kubectl-mbf/views.js'
import type { Runner } from '../../../cmd/manager/runner.js'
import { BUCKET_BACKFILLS } from '../../../events/catalog.js'
import { jobName } from '../../../pkg/core/names.js'
import { repoRoot } from '../../env/binaries.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld } from '../support/backfill-world.js'
import { startTestRunner, testInstance } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let world: BackfillWorld
const instance = testInstance()

beforeAll(async () => {
  runner = await startTestRunner(env, { instance })
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
})
afterAll(async () => {
  world?.close()
  await runner?.stop()
})

const mbf = (...args: string[]) =>
  main([...args, '--kubeconfig', env.kubeconfigPath, '--nats-url', env.natsUrl, '--instance', instance])
const ok = async (...args: string[]) => {
  const out = await mbf(...args)
  expect(out.stderr).toBe('')
  expect(out.code).toBe(0)
  return out.stdout
}
const explainJson = async (name: string) =>
  JSON.parse(await ok('explain', name, '-n', env.namespace, '-o', 'json')) as Explanation
const gate = (e: Explanation, name: string) => e.gates.find((g) => g.gate === name)

describe('a live backfill', () => {
  it('WaitingForIdle with the window countdown, Running, and after a cancel: text and JSON', async () => {
    const n = world.names('live')
    await world.model(n.model, { node: n.node })
    await world.template(n.template)
    // A long window first: the countdown is visible for as long as the assertions take on a loaded machine.
    await world.backfill(n.backfill, { modelRef: n.model, templateRef: n.template, idleFor: '10m' })
    await world.waitFor(n.backfill, 'WaitingForIdle', 'IdleWindow')

    const waiting = await explainJson(n.backfill)
    expect(waiting.status).toMatchObject({ phase: 'WaitingForIdle', reason: 'IdleWindow' })
    expect(gate(waiting, 'model')).toEqual({ gate: 'model', verdict: 'pass', evidence: `Model ${n.model} found` })
    expect(gate(waiting, 'node')).toEqual({
      gate: 'node',
      verdict: 'pass',
      evidence: `Model ${n.model} on node ${n.node}`,
    })
    expect(gate(waiting, 'idle window')?.verdict).toBe('wait')
    expect(gate(waiting, 'idle window')?.evidence).toMatch(/window completes in (9m|10m)/)
    expect(gate(waiting, 'preemption path')).toMatchObject({ verdict: 'pass' })
    expect(gate(waiting, 'claims')).toMatchObject({ verdict: 'pass', evidence: 'model and node are free' })
    expect(waiting.nextTimer).toMatchObject({ stored: true })
    expect(waiting.decideNow).toMatchObject({ phase: 'WaitingForIdle', wouldCreateJob: false })
    const text = await ok('explain', n.backfill, '-n', env.namespace)
    expect(text).toMatch(/WAIT\s+idle window\s+.*window completes in/)
    expect(text).toContain('Next timer:   in ')
    const rows = JSON.parse(await ok('get', '-n', env.namespace, '-o', 'json')).items as GetRow[]
    expect(rows).toHaveLength(1)
    expect(rows[0]?.windowLeftMs).toBeGreaterThan(8 * 60_000)
    expect(await ok('get', '-n', env.namespace)).toMatch(/live\s+live-model\s+WaitingForIdle\s+IdleWindow\s+(9m|10m)/)

    // A short window: admitted and running.
    await world.patchBackfillSpec(n.backfill, { idleFor: '2s' })
    await world.waitFor(n.backfill, 'Running', 'JobRunning')
    const job = jobName(n.backfill, 1)
    const running = await explainJson(n.backfill)
    expect(running.attempt).toMatchObject({ jobName: job, job: 'active' })
    expect(gate(running, 'claims')?.evidence).toContain('held by this backfill')
    expect(gate(running, 'idle window')?.verdict).toBe('pass')
    expect(running.decideNow).toMatchObject({ phase: 'Running', reason: 'JobRunning' })
    expect(running.lastCancel).toBeUndefined()

    // Cancelled by a foreground request: the trigger, the cancel request and the recorded transition.
    await world.holdPods(job)
    const sentAt = await world.foreground(n.model)
    await world.waitFor(n.backfill, 'Cancelling', 'ForegroundDemand')
    await world.releasePods(job)
    await world.waitFor(n.backfill, 'WaitingForIdle')
    await world.patchBackfillSpec(n.backfill, { idleFor: '10m' }) // no second attempt while we look
    const after = await explainJson(n.backfill)
    expect(after.lastCancel).toMatchObject({ jobName: job, reason: 'ForegroundDemand' })
    const trigger = Date.parse(after.lastCancel?.triggerAt ?? '')
    expect(trigger).toBeGreaterThanOrEqual(sentAt)
    expect(trigger).toBeLessThan(sentAt + 5_000)
    expect(after.lastCancel?.latencyMs).toBeGreaterThanOrEqual(0)
    expect(after.lastCancel?.latencyMs).toBeLessThan(30_000)
    expect(after.counters?.preemptions.foreground).toBe(1)
    const afterText = await ok('explain', n.backfill, '-n', env.namespace)
    expect(afterText).toMatch(new RegExp(`Last cancel:  Job ${job}, ForegroundDemand; trigger at .*latency \\d`))
    expect(await ok('get', '-n', env.namespace)).toContain('(ForegroundDemand)')

    const top = JSON.parse(await ok('top', '-n', env.namespace, '-o', 'json', '--interval', '1s')).items as TopRow[]
    expect(top).toMatchObject([{ namespace: env.namespace, model: n.model, backfills: 1, preemptions: 1 }])
    expect(top[0]?.requests).toBeGreaterThanOrEqual(1)
    expect(top[0]?.usefulSeconds).toBeGreaterThan(0)
    expect(await ok('top', '-n', env.namespace, '--interval', '0')).toMatch(/NAMESPACE\s+MODEL\s+BACKFILLS/)
  })

  it('an unreadable stored state is named on stderr and left out; top and get keep answering', async () => {
    const kv = await new Kvm(env.nc).open(BUCKET_BACKFILLS)
    const key = `${env.namespace}.hand-written`
    // A state without counters, as a hand edit or another release could leave: top used to crash on it.
    await kv.put(key, JSON.stringify({ namespace: env.namespace, name: 'hand-written', phase: 'Running' }))
    try {
      const top = await mbf('top', '-n', env.namespace, '-o', 'json', '--interval', '0')
      expect(top.code).toBe(0)
      expect(top.stderr).toContain(`kubectl-mbf: left out ${BUCKET_BACKFILLS} ${key}: `)
      expect(JSON.parse(top.stdout).items).toBeInstanceOf(Array)
      expect((await mbf('get', '-n', env.namespace)).code).toBe(0)
    } finally {
      await kv.delete(key)
    }
  })

  it('the bin runs as kubectl runs a plugin (environment: KUBECONFIG, NATS_URL)', async () => {
    await world.declare('bin', { idleFor: '10m' })
    const child = spawn(
      process.execPath,
      [join(repoRoot, 'cmd/kubectl-mbf/kubectl-mbf.mjs'), 'get', '-n', env.namespace],
      {
        env: { ...process.env, KUBECONFIG: env.kubeconfigPath, NATS_URL: env.natsUrl },
      },
    )
    let stdout = ''
    child.stdout.on('data', (d) => {
      stdout += d
    })
    const [code] = await once(child, 'exit')
    expect(code).toBe(0)
    expect(stdout).toMatch(/^NAME\s+MODEL\s+PHASE/)
    expect(stdout).toMatch(/\nbin\s+bin-model\s/)
  })
})

describe('unreachable servers', () => {
  let silent: Server
  let silentPort = 0
  beforeAll(async () => {
    // Accepts connections and never answers: only a deadline ends a call to it.
    silent = createServer(() => {}).listen(0, '127.0.0.1')
    await once(silent, 'listening')
    silentPort = (silent.address() as { port: number }).port
  })
  afterAll(() => {
    silent?.close()
  })

  it('NATS refusing or silent: one line, exit 1, within the deadline', async () => {
    const refused = await main([
      'explain',
      'x',
      '-n',
      env.namespace,
      '--kubeconfig',
      env.kubeconfigPath,
      '--nats-url',
      'nats://127.0.0.1:1',
    ])
    expect(refused.code).toBe(1)
    expect(refused.stderr).toMatch(/^kubectl-mbf: cannot reach NATS at nats:\/\/127\.0\.0\.1:1: .+\n$/)
    const started = Date.now()
    const hung = await main([
      'top',
      '--kubeconfig',
      env.kubeconfigPath,
      '--nats-url',
      `nats://127.0.0.1:${silentPort}`,
      '--timeout',
      '1s',
    ])
    expect(hung.code).toBe(1)
    expect(hung.stderr).toMatch(/^kubectl-mbf: cannot reach NATS at nats:\/\/127\.0\.0\.1:\d+: .+\n$/)
    expect(Date.now() - started).toBeLessThan(15_000)
  })

  it('apiserver refusing or silent: one line, exit 1, within the deadline', async () => {
    const kubeconfig = async (server: string) => {
      const path = join(tmpdir(), `mbf-kc-${process.pid}-${Math.random().toString(36).slice(2)}.yaml`)
      await writeFile(
        path,
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'Config',
          clusters: [{ name: 'c', cluster: { server, 'insecure-skip-tls-verify': true } }],
          users: [{ name: 'u', user: { token: 'x' } }],
          contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
          'current-context': 'x',
        }),
      )
      return path
    }
    const refused = await main([
      'get',
      '--kubeconfig',
      await kubeconfig('https://127.0.0.1:1'),
      '--nats-url',
      env.natsUrl,
    ])
    expect(refused.code).toBe(1)
    expect(refused.stderr).toMatch(
      /^kubectl-mbf: cannot reach the Kubernetes API at https:\/\/127\.0\.0\.1:1: .*ECONNREFUSED.*\n$/,
    )
    const started = Date.now()
    const hung = await main([
      'get',
      '-A',
      '--timeout',
      '1s',
      '--kubeconfig',
      await kubeconfig(`https://127.0.0.1:${silentPort}`),
    ])
    expect(hung.code).toBe(1)
    expect(hung.stderr).toMatch(/^kubectl-mbf: cannot reach the Kubernetes API at https:\/\/127\.0\.0\.1:\d+: .+\n$/)
    expect(Date.now() - started).toBeLessThan(15_000)
    const usage = await main(['explain'])
    expect(usage.code).toBe(2)
    expect(usage.stderr).toMatch(/^kubectl-mbf: explain needs the ModelBackfill name/)
  })
})
