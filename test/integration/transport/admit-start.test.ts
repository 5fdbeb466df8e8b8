// What admit's start waits for (transport/deps.ts openDeps): the watched copies it decides on hold their initial
// lists before it serves, and one that cannot be listed stops the start.
import { afterAll, expect, it } from 'vitest'
import { openDeps } from '../../../transport/deps.js'
import { useTestEnv } from '../../env/fixture.js'

const env = useTestEnv()
const closers: (() => Promise<void>)[] = []
afterAll(async () => {
  for (const close of closers) await close().catch(() => {})
})

/** A ServiceAccount that may list and watch Jobs and Models in the namespace and, cluster-wide, `clusterWide`. */
async function serviceAccount(sa: string, clusterWide: string) {
  const ns = env.namespace
  await env.kubectl(['create', 'serviceaccount', sa, '-n', ns])
  await env.kubectl(['create', 'role', sa, '-n', ns, '--verb=list,watch', '--resource=jobs.batch,models.ai.flexinfer'])
  await env.kubectl(['create', 'rolebinding', sa, '-n', ns, `--role=${sa}`, `--serviceaccount=${ns}:${sa}`])
  const clusterRole = `${sa}-${ns}`
  closers.push(async () => {
    await env.kubectl(['delete', 'clusterrolebinding', clusterRole, '--ignore-not-found'])
    await env.kubectl(['delete', 'clusterrole', clusterRole, '--ignore-not-found'])
  })
  const made = await env.kubectl([
    'create',
    'clusterrole',
    clusterRole,
    '--verb=list,watch',
    `--resource=${clusterWide}`,
  ])
  expect(made.code, made.stderr).toBe(0)
  await env.kubectl([
    'create',
    'clusterrolebinding',
    clusterRole,
    `--clusterrole=${clusterRole}`,
    `--serviceaccount=${ns}:${sa}`,
  ])
  return env.saKubeConfig(sa)
}

const openAdmit = async (kubeconfig: Awaited<ReturnType<typeof serviceAccount>>) =>
  openDeps({
    natsUrl: env.natsUrl,
    name: 'admit-start-test',
    functions: ['admit'],
    kubeconfig,
    namespaces: [env.namespace],
  })

it('a copy admit decides on that cannot be listed stops the start (an empty GPULease copy would admit onto leased GPUs)', async () => {
  const kubeconfig = await serviceAccount('admit-no-leases', 'gamingsessions.ai.flexinfer')
  await expect(openAdmit(kubeconfig)).rejects.toThrow()
}, 60_000)
