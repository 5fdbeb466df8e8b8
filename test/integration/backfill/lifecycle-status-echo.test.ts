// What a re-arm on a busy model costs lifecycle (issue 11, bench runs E: "each status write comes back as a
// backfill.changed event and a lifecycle reconcile"), counted on the real servers. Three windows of 3 s on one
// model kept busy by a foreground request every second: each timer admit handles re-arms the window and writes the
// status (a new status.idleSince, user-visible, so it stays written), and each write comes back to lifecycle as a
// `backfill.changed` with the generation its state already has. lifecycle talks to the apiserver only through a
// counting proxy; every `backfill.changed` it handles is timed against the proxy's log: none may read or write the
// ModelBackfill (a reconcile's first step is that GET), i.e. the echo costs one KV read and no reconcile.
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { lifecycleFunction } from '../../../functions/lifecycle/index.js'
import { FUNCTION_NAMES } from '../../../functions/registry.js'
import { createLogger } from '../../../pkg/observability/log.js'
import { openDeps, scoped } from '../../../pkg/transport/deps.js'
import { type RunningFunction, runOnJetStream } from '../../../pkg/transport/jetstream-adapter.js'
import { sleep, waitFor } from '../../env/exec.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, handledAll } from '../support/backfill-world.js'
import { CountingProxy } from '../support/counting-proxy.js'
import { startTestRunner, testInstance } from '../support/runner.js'

const env = useTestEnv()
const instance = testInstance()
let runner: Runner
let world: BackfillWorld
let proxy: CountingProxy
let deps: Awaited<ReturnType<typeof openDeps>>
let lifecycle: RunningFunction
/** Each `backfill.changed` lifecycle handled: its backfill and the ModelBackfill requests made while it ran. */
const echoes: { backfill: string; requests: string[] }[] = []

beforeAll(async () => {
  runner = await startTestRunner(env, { instance, functions: FUNCTION_NAMES.filter((f) => f !== 'lifecycle') })
  world = new BackfillWorld(env.kc, env.namespace, env.nc)
  proxy = await CountingProxy.start(env.kc)
  deps = await openDeps({
    natsUrl: env.natsUrl,
    functions: ['lifecycle'],
    kubeconfig: proxy.kc,
    namespaces: [env.namespace],
    name: 'lifecycle-echo-test',
    logger: createLogger('lifecycle-echo-test'),
  })
  const fn = scoped(lifecycleFunction(), [env.namespace], instance)
  lifecycle = await runOnJetStream(deps, {
    ...fn,
    async handle(event, d) {
      if (event.type !== 'ai.flexinfer.backfill.changed') return fn.handle(event, d)
      const backfill = (event.data as { backfill: string }).backfill
      const from = proxy.requests.length
      await fn.handle(event, d)
      const requests = proxy.requests
        .slice(from)
        .filter((r) => !r.watch && r.path.endsWith(`/modelbackfills/${backfill}`))
        .map((r) => `${r.method} ${r.path}`)
      echoes.push({ backfill, requests })
    },
  })
}, 120_000)

afterAll(async () => {
  await lifecycle?.stop()
  await deps?.close()
  await proxy?.stop()
  world?.close()
  await runner?.stop()
})

it('a status write made by a re-arm on a busy model costs lifecycle no reconcile', { timeout: 150_000 }, async () => {
  await world.model('m', { node: `node-${env.namespace}` })
  await world.template('tpl')
  // Busy from before the windows exist to the end: a foreground request every second, bounded in count and time.
  let busy = true
  const keepBusy = (async () => {
    const until = Date.now() + 100_000
    for (let i = 0; i < 100 && busy && Date.now() < until; i++) {
      await world.foreground('m')
      await sleep(1_000) // time is the subject: the model is busy at this pace
    }
  })()
  try {
    const names = ['w-0', 'w-1', 'w-2']
    for (const name of names) await world.backfill(name, { modelRef: 'm', templateRef: 'tpl', idleFor: '3s' })
    const firstIdle = new Map<string, string | undefined>()
    for (const name of names) {
      const b = await world.waitFor(name, 'WaitingForIdle', 'IdleWindow', 60_000)
      firstIdle.set(name, b.status?.idleSince)
    }
    // The first decisions (finalizer, first status) are made and their echoes handled by lifecycle.
    await handledAll(runner)
    await handledAll({ deps: runner.deps, functions: [lifecycle] })
    const settled = echoes.length

    // Each window's timer fires every ~3 s (its idleFor) on the busy model and is re-armed, with a status write each
    // time: wait for the events themselves, two re-arm echoes of every window handled by lifecycle, not a clock.
    await waitFor(
      'two re-arm echoes of every window',
      () => names.every((n) => echoes.slice(settled).filter((e) => e.backfill === n).length >= 2),
      { timeoutMs: 60_000, intervalMs: 250 },
    )
    for (const name of names) {
      const b = await world.getBackfill(name)
      expect(b?.status?.phase).toBe('WaitingForIdle')
      expect(b?.status?.idleSince).not.toBe(firstIdle.get(name)) // re-armed, and the new idleSince written
    }
    const rearms = echoes.slice(settled)
    // Several re-arm echoes per window reached lifecycle (each a status write)…
    expect(rearms.length).toBeGreaterThanOrEqual(names.length * 2)
    // …and not one of them read or wrote the ModelBackfill: no reconcile.
    expect(rearms.filter((e) => e.requests.length > 0)).toEqual([])
  } finally {
    busy = false
    await keepBusy
  }
})
