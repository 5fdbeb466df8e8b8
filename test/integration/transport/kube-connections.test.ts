// The Kubernetes client reuses its TLS connections (pkg/kube/http.ts PooledAuthentication): client-node alone opens
// a new TCP + TLS connection for every call, which was most of the time between a cancel request and its DELETE.
// Against the real apiserver: sequential calls share one connection, each still authenticated from the KubeConfig
// (RBAC decides per request), and a different identity gets connections of its own.
import tls from 'node:tls'
import { afterAll, expect, it } from 'vitest'
import { Kube } from '../../../pkg/kube/client.js'
import { isApiError, useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
const kubes: Kube[] = []
afterAll(() => {
  for (const k of kubes) k.close()
})

it('sequential API calls share one TLS connection', async () => {
  const kube = new Kube(env.kc)
  kubes.push(kube)
  for (let i = 0; i < 10; i++) expect(await kube.deleteJob(env.namespace, `absent-${i}`)).toBe('absent')
  expect(kube.auth.connections).toBe(1)
})

it('concurrent calls open connections of their own, all on one TLS context (the credentials parsed once)', async () => {
  const kube = new Kube(env.kc)
  kubes.push(kube)
  const real = tls.createSecureContext
  let made = 0
  tls.createSecureContext = (options) => {
    made++
    return real(options)
  }
  try {
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) => kube.deleteJob(env.namespace, `absent-c-${i}`)),
    )
    expect(results.every((r) => r === 'absent')).toBe(true)
  } finally {
    tls.createSecureContext = real
  }
  expect(kube.auth.connections).toBeGreaterThan(1)
  expect(made).toBe(1)
})

it('credentials are still applied per request: a ServiceAccount without rights is refused on the pooled client', async () => {
  const sa = 'pool-no-rights'
  await env.kubectl(['create', 'serviceaccount', sa, '-n', env.namespace])
  const kube = new Kube(await env.saKubeConfig(sa))
  kubes.push(kube)
  for (let i = 0; i < 3; i++) {
    const refused = await kube.deleteJob(env.namespace, 'x').then(
      () => false,
      (err) => isApiError(err, 403),
    )
    expect(refused).toBe(true)
  }
  // Its own connection (another identity), reused across its calls.
  expect(kube.auth.connections).toBe(1)
})
