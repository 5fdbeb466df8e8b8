// Job names derive from the backfill's name only, so two namespaces with a `nightly-eval` each (or a re-created
// backfill) have Jobs of the same name. A foreground request must still preempt each of them: the demand
// function's cancel de-duplication (in memory and JetStream's 60s duplicate window) is per admission, not per
// Job name. Found by running `npm run demo` twice within a minute.
import { CoreV1Api } from '@kubernetes/client-node'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { Runner } from '../../../cmd/manager/runner.js'
import { jobName } from '../../../pkg/core/names.js'
import { useTestEnv } from '../../env/fixture.js'
import { BackfillWorld, waitUntil } from '../support/backfill-world.js'
import { startTestRunner } from '../support/runner.js'

const env = useTestEnv()
let runner: Runner
let a: BackfillWorld
let b: BackfillWorld
let second: string

beforeAll(async () => {
  second = `${env.namespace}-b`
  await env.kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: second } } })
  await waitUntil('default ServiceAccount', async () => {
    try {
      return await env.kc.makeApiClient(CoreV1Api).readNamespacedServiceAccount({ name: 'default', namespace: second })
    } catch {
      return undefined
    }
  })
  runner = await startTestRunner(env, { namespaces: [env.namespace, second] })
  a = new BackfillWorld(env.kc, env.namespace, env.nc)
  b = new BackfillWorld(env.kc, second, env.nc)
})
afterAll(async () => {
  await runner?.stop()
  await env.kc
    .makeApiClient(CoreV1Api)
    .deleteNamespace({ name: second })
    .catch(() => {})
})

it('a foreground request preempts a same-named backfill in another namespace right after the first', async () => {
  await a.declare('twin')
  await b.declare('twin')
  await a.waitFor('twin', 'Running', 'JobRunning')
  await b.waitFor('twin', 'Running', 'JobRunning')
  const job = jobName('twin', 1)
  expect((await a.job(job))?.metadata?.name).toBe((await b.job(job))?.metadata?.name)

  await a.foreground(a.names('twin').model)
  await waitUntil('Job deleted in the first namespace', async () => ((await a.job(job)) === null ? true : undefined))
  await b.foreground(b.names('twin').model)
  await waitUntil(
    'Job deleted in the second namespace',
    async () => ((await b.job(job)) === null ? true : undefined),
    10_000,
  )
  // The Job can be gone a moment before the cancel function has committed the transition.
  const preemptions = await waitUntil('the preemption recorded', async () => {
    const counted = (await b.state('twin'))?.counters.preemptions
    return counted && Object.keys(counted).length ? counted : undefined
  })
  expect(preemptions).toEqual({ foreground: 1 })
})
