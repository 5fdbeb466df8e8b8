// The upgrade from the previous release (0.1.0) onto the real node, as a platform team runs it: 0.1.0 installed as
// its own docs said (its chart in helm mode keda, release `mbf`, its image built from its own Dockerfile FROM
// node:20-slim by deploy/images/build.sh --app-from, NKey seeds made here as `nk` made them then, their public keys in
// nats-server's environment), a backfill Job's container running, then the procedure of docs/upgrade.md
// ("Upgrade"): `dev/scripts/install.sh nats-auth`, nats-server reloads in place, `dev/scripts/install.sh install` with the new
// image, same release. NATS is one nats-server pod whose JetStream store is a hostPath directory and whose auth
// Secret is mounted as a directory the kubelet updates (nats-server-reloadable.yaml). Proven:
//   - the script keeps 0.1.0's identities (read back from the release's Secrets) and the gateways' key: no pod and
//     no gateway is locked out when nats-server reloads; the 0.1.0 functions stay connected until they roll;
//   - the KV state is kept (every key, its value or a later revision; the attempts counter not reset) and no stream
//     was re-created (sequences only grow);
//   - the running attempt was not restarted: the same Job (UID), pod and container, which never got SIGTERM;
//   - a foreground request from a gateway pod (the 0.1.0 gateway identity) then cancels it: SIGTERM, exit;
//   - a later idle window admits a new Job, from the new release's functions (every function pod runs the new image).
// Slow (~5 min; the 0.1.0 image is built once and cached): `npm run test:upgrade` (MBF_INSTALL_TEST=1); skipped
// otherwise. Never beside test:install: one node per machine.
import { chown, cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { V1Pod } from '@kubernetes/client-node'
import { jetstreamManager } from '@nats-io/jetstream'
import { nkeyAuthenticator } from '@nats-io/nats-core'
import { createUser } from '@nats-io/nkeys'
import { connect } from '@nats-io/transport-node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { stringify } from 'yaml'
import { repoRoot } from '../../env/binaries.js'
import { run, runOk, waitFor } from '../../env/exec.js'
import { ensureNodeImages, type NodeImages, nodeUnavailableReason } from '../../env/node.js'
import type { Manifest } from '../support/deploy.js'
import { gatewayPod, type InstallCluster, startInstallCluster } from './install-cluster.js'
import { containerLog } from './node-support.js'

const unavailable =
  nodeUnavailableReason() ?? (process.env.MBF_INSTALL_TEST ? undefined : 'slow: npm run test:upgrade runs it')
/** The previous release: the project as it stood when 0.1.0 was cut. */
const PREVIOUS = '09d5768'
const NS = 'model-backfill'
const RELEASE = 'mbf' // 0.1.0's docs/install.md: `helm install mbf charts/model-backfill …`
const FULLNAME = 'mbf-model-backfill'
const TEAM = 'team-upgrade'
/** 0.1.0's nats/auth.conf identities (the operator came later), and the users its chart runs in mode keda. */
const OLD_USERS = ['source', 'demand', 'admit', 'cancel', 'lifecycle', 'ingress', 'gateway', 'bridge', 'provision']
const CHART_USERS = ['source', 'demand', 'admit', 'cancel', 'lifecycle', 'ingress', 'provision']
const STREAMS = [
  'FLEXINFER_EVENTS',
  'FLEXINFER_TIMERS',
  'FLEXINFER_DEADLETTER',
  'FLEXINFER_FOREGROUND',
  'FLEXINFER_FOREGROUND_LAST',
]
const BUCKETS = ['KV_flexinfer-backfills', 'KV_flexinfer-claims', 'KV_flexinfer-model-idle']

let c: InstallCluster
let images: NodeImages
let previousImage = ''
let natsIp = ''
const seeds: Record<string, { seed: string; publicKey: string }> = {}

const kubectl: InstallCluster['kubectl'] = (...a) => c.kubectl(...a)
const kubectlOk: InstallCluster['kubectlOk'] = (...a) => c.kubectlOk(...a)
const apply: InstallCluster['apply'] = (m) => c.apply(m)
const jsonOf: InstallCluster['jsonOf'] = (a) => c.jsonOf(a)
const appRef = () => (images.app as { ref: string }).ref
const natsRef = () => (images.nats as { ref: string }).ref
const settings = () => ({
  MBF_MODE: 'helm-keda',
  MBF_RELEASE: RELEASE,
  MBF_DIR: join(c.tmp, 'install'),
  MBF_NATS_REPLICAS: '1',
  MBF_IMAGE: appRef(),
  // KEDA runs beside the apiserver here, outside the cluster's DNS: the monitoring endpoint by its ClusterIP.
  MBF_NATS_MONITOR: `${natsIp}:8222`,
  MBF_GATEWAY_NKEY: seeds.gateway?.publicKey as string,
  MBF_TIMEOUT: '240s',
})
const script = (command: string, extra: Record<string, string> = {}) => c.script(command, { ...settings(), ...extra })

beforeAll(async () => {
  if (unavailable) return
  images = await ensureNodeImages({ app: true, nats: true })
  // 0.1.0's tree as a plain directory (git archive: nothing registered in the repository), and its image from its
  // own Dockerfile, its node:20-slim base made here as node:24-slim is.
  const previous = await mkdtemp(join(tmpdir(), 'upgrade-v0.1.0-'))
  try {
    await runOk('sh', ['-c', `git -C "${repoRoot}" archive ${PREVIOUS} | tar -x -C "${previous}"`], {
      timeoutMs: 60_000,
    })
    const built = await run('bash', [join(repoRoot, 'deploy/images/build.sh'), '--app-from', previous], {
      timeoutMs: 30 * 60_000,
    })
    if (built.code !== 0)
      throw new Error(`deploy/images/build.sh --app-from 0.1.0 failed:\n${built.stderr.slice(-3000)}`)
    const previousApp = JSON.parse(built.stdout.trim().split('\n').at(-1) as string) as { ref: string; archive: string }
    previousImage = previousApp.ref
    c = await startInstallCluster({
      tmpPrefix: 'upgrade-node-',
      crdsFrom: previous,
      namespace: NS,
      archives: [(images.nats as { archive: string }).archive, previousApp.archive],
    })
    // 0.1.0's chart, for its install.
    await cp(join(previous, 'charts'), join(c.tmp, 'v0.1.0-charts'), { recursive: true })
  } finally {
    await rm(previous, { recursive: true, force: true })
  }
}, 1_200_000)

afterAll(async () => {
  await c?.stop()
}, 180_000)

/** The platform's NATS: 0.1.0's auth.conf as its docs said (public keys from the environment), the store on disk. */
async function startNats(): Promise<void> {
  for (const u of OLD_USERS) {
    const pair = createUser()
    seeds[u] = { seed: new TextDecoder().decode(pair.getSeed()), publicKey: pair.getPublicKey() }
  }
  const data = join(c.tmp, 'nats-data')
  await mkdir(data)
  await chown(data, 1000, 1000)
  await kubectlOk(['create', 'namespace', 'nats'])
  const oldAuth = (await runOk('git', ['-C', repoRoot, 'show', `${PREVIOUS}:nats/auth.conf`])).stdout
  await apply([
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'nats-nkeys', namespace: 'nats' },
      stringData: Object.fromEntries(
        OLD_USERS.map((u) => [`FLEXINFER_${u.toUpperCase()}_NKEY`, seeds[u]?.publicKey as string]),
      ),
    } as Manifest,
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'model-backfill-nats-auth', namespace: 'nats' },
      stringData: { 'auth.conf': oldAuth },
    } as Manifest,
  ])
  const manifest = (await readFile(join(import.meta.dirname, 'nats-server-reloadable.yaml'), 'utf8'))
    .replaceAll('NATS_IMAGE', natsRef())
    .replaceAll('NATS_DATA_DIR', data)
  await kubectlOk(['apply', '-f', '-'], manifest)
  const rolled = await kubectl(['-n', 'nats', 'rollout', 'status', 'deploy/nats', '--timeout=90s'])
  if (rolled.code !== 0) {
    const logs = await kubectl(['-n', 'nats', 'logs', 'deploy/nats', '--tail=20'])
    throw new Error(`nats-server not ready: ${rolled.stderr}\n${logs.stdout}${logs.stderr}`)
  }
  natsIp = (await jsonOf(['-n', 'nats', 'get', 'service', 'nats'])).spec.clusterIP
}

/** 0.1.0's Helm install (its docs/install.md "Helm", its chart README), with the settings this cluster needs. */
async function installPrevious() {
  const values = join(c.tmp, 'v0.1.0-values.yaml')
  await writeFile(
    values,
    stringify({
      nats: { credentials: Object.fromEntries(CHART_USERS.map((u) => [u, { seed: seeds[u]?.seed }])) },
      ingress: { token: { value: 'a'.repeat(64) } },
    }),
    { mode: 0o600 },
  )
  const started = Date.now()
  await runOk(
    c.env.binaries.helm as string,
    [
      '--kubeconfig',
      c.env.kubeconfigPath,
      'install',
      RELEASE,
      join(c.tmp, 'v0.1.0-charts', 'model-backfill'),
      '-n',
      NS,
      '--create-namespace',
      '--set',
      'mode=keda',
      '-f',
      values,
      '--set',
      `image.repository=${previousImage.slice(0, previousImage.lastIndexOf(':'))}`,
      '--set-string',
      `image.tag=${previousImage.slice(previousImage.lastIndexOf(':') + 1)}`,
      '--set',
      `nats.monitoringEndpoint=${natsIp}:8222`,
    ],
    { timeoutMs: 180_000 },
  )
  const job = (await jsonOf(['-n', NS, 'get', 'job', '-l', 'app.kubernetes.io/component=provision'])).items[0]
  await kubectlOk(['-n', NS, 'wait', '--for=condition=complete', '--timeout=180s', `job/${job.metadata.name}`])
  for (const fn of ['source', 'demand', 'cancel', 'ingress'])
    await kubectlOk(['-n', NS, 'rollout', 'status', '--timeout=180s', `deploy/${FULLNAME}-${fn}`])
  console.log(`[upgrade] 0.1.0 installed and Ready in ${((Date.now() - started) / 1000).toFixed(1)} s`)
}

interface Entry {
  seq: number
  data: string
}
interface NatsState {
  streams: Record<string, { firstSeq: number; lastSeq: number; messages: number }>
  /** Per bucket stream, per subject (key): its newest entry. */
  kv: Record<string, Record<string, Entry>>
}

/** Streams and buckets as 0.1.0's `cancel` identity reads them (stream info, message gets): kept before and after. */
async function natsState(): Promise<NatsState> {
  const nc = await connect({
    servers: `nats://${natsIp}:4222`,
    authenticator: nkeyAuthenticator(new TextEncoder().encode(seeds.cancel?.seed as string)),
    inboxPrefix: '_INBOX_cancel',
    timeout: 5000,
    reconnect: false,
  })
  try {
    const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: 5000 })
    const state: NatsState = { streams: {}, kv: {} }
    for (const name of [...STREAMS, ...BUCKETS]) {
      const info = await jsm.streams.info(name, BUCKETS.includes(name) ? { subjects_filter: '>' } : undefined)
      state.streams[name] = {
        firstSeq: info.state.first_seq,
        lastSeq: info.state.last_seq,
        messages: info.state.messages,
      }
      if (!BUCKETS.includes(name)) continue
      const kv: Record<string, Entry> = {}
      for (const subject of Object.keys(info.state.subjects ?? {})) {
        const m = await jsm.streams.getMessage(name, { last_by_subj: subject })
        if (m) kv[subject] = { seq: m.seq, data: m.string() }
      }
      state.kv[name] = kv
    }
    return state
  } finally {
    await nc.close()
  }
}

const podsOf = async (ns: string, selector: string) =>
  (await jsonOf(['-n', ns, 'get', 'pods', '-l', selector])).items as V1Pod[]
const runningWith = async (line: string, exclude: string[] = []) =>
  waitFor(
    `a backfill Job's container printed ${line}`,
    async () => {
      for (const p of await podsOf(TEAM, 'job-name')) {
        if (exclude.includes(p.metadata?.uid as string)) continue
        if (!p.status?.containerStatuses?.[0]?.state?.running) continue
        if ((await containerLog(c.node, p, 'eval')).some((l) => l.text === line)) return p
      }
      return undefined
    },
    { timeoutMs: 180_000, intervalMs: 500 },
  )

/** The backfill: a Job template running busybox, a Ready Model, a ModelBackfill idle after 2 s. */
async function startBackfill() {
  // Where the platform's gateways run: 0.1.0's gateway identity, which nats-server knows by its public key.
  await c.busyboxTemplate(TEAM, 30, [
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'model-backfill-gateway', namespace: TEAM },
      stringData: { seed: seeds.gateway?.seed as string },
    } as Manifest,
  ])
  await apply([
    {
      apiVersion: 'ai.flexinfer/v1alpha2',
      kind: 'ModelBackfill',
      metadata: { name: 'eval-gemma', namespace: TEAM },
      spec: { modelRef: 'gemma', templateRef: 'eval', idleFor: '2s' },
    } as Manifest,
  ])
}

/** A foreground request from a gateway pod (the nats CLI as the gateway identity), as install.test.ts sends it. */
async function foregroundRequest() {
  await apply([gatewayPod(TEAM, natsRef())])
}

const natsLog = async () => (await kubectlOk(['-n', 'nats', 'logs', 'deploy/nats'])).split('\n')

describe.skipIf(unavailable)('the upgrade from 0.1.0 on the real node', () => {
  it('keeps the identities, the KV state and the running attempt; the new release preempts it and admits the next', {
    timeout: 1_200_000,
  }, async () => {
    await startNats()
    await installPrevious()
    await startBackfill()
    const pod = await runningWith('started')
    const jobName = pod.metadata?.labels?.['job-name'] as string
    const job = await jsonOf(['-n', TEAM, 'get', 'job', jobName])
    const containerId = (pod.status?.containerStatuses?.[0]?.containerID ?? '').replace(/^containerd:\/\//, '')
    // The 0.1.0 functions have recorded the attempt: its state and claims are in KV before anything changes.
    const status = await waitFor(
      'the attempt in the status',
      async () => {
        const s = (await jsonOf(['-n', TEAM, 'get', 'mbf', 'eval-gemma'])).status
        return s?.attempts >= 1 ? s : undefined
      },
      { timeoutMs: 60_000 },
    )
    const before = await natsState()
    const keys = (bucket: string) => Object.keys(before.kv[bucket] ?? {})
    expect(keys('KV_flexinfer-backfills').length, JSON.stringify(before.kv)).toBeGreaterThanOrEqual(1)
    expect(keys('KV_flexinfer-claims').length, JSON.stringify(before.kv)).toBeGreaterThanOrEqual(1)
    const oldPods = (await podsOf(NS, `app.kubernetes.io/instance=${RELEASE}`)).filter(
      (p) => p.status?.containerStatuses?.[0]?.state?.running,
    )
    expect(oldPods.every((p) => p.spec?.containers[0]?.image === previousImage)).toBe(true)
    console.log(
      `[upgrade] 0.1.0 running Job ${jobName} (uid ${job.metadata.uid}); status attempts ${status.attempts}; KV keys: ${keys('KV_flexinfer-backfills').length} backfills, ${keys('KV_flexinfer-claims').length} claims`,
    )

    // The upgrade, as docs/upgrade.md says. 1: the NATS identities (kept: read back from the release's Secrets).
    const upgradeStarted = Date.now()
    const auth = await script('nats-auth')
    expect(auth.code, auth.stderr).toBe(0)
    expect(auth.stderr).toMatch(/keeping the NATS identities and the ingress token of the installation already/)
    const generated = await readFile(join(c.tmp, 'install', 'secrets', 'nats', 'secret.yaml'), 'utf8')
    for (const u of [...CHART_USERS, 'gateway']) expect(generated, u).toContain(`nkey: ${seeds[u]?.publicKey}`)
    // 2: nats-server reloads once the kubelet has updated the mounted Secret (the operator user is new there).
    await waitFor(
      'the new auth.conf in the nats pod',
      async () => {
        const r = await kubectl(['-n', 'nats', 'exec', 'deploy/nats', '--', 'cat', '/etc/nats-auth/auth.conf'])
        return r.stdout.includes('_INBOX_operator') && r.stdout.includes(seeds.demand?.publicKey as string)
      },
      { timeoutMs: 120_000, intervalMs: 1000 },
    )
    const natsPod = (await podsOf('nats', 'app.kubernetes.io/name=nats'))[0] as V1Pod
    await kubectlOk(['-n', 'nats', 'exec', 'deploy/nats', '--', 'nats-server', '--signal', 'reload=1'])
    await waitFor(
      'nats-server reloaded',
      async () => (await natsLog()).some((l) => /Reloaded server configuration/.test(l)),
      {
        timeoutMs: 30_000,
      },
    )
    // 3: the install with the new image, same release and mode.
    const installed = await script('install', { MBF_WAIT: 'true' })
    expect(installed.code, installed.stderr).toBe(0)
    console.log(`[upgrade] nats-auth + reload + install in ${((Date.now() - upgradeStarted) / 1000).toFixed(1)} s`)

    // nats-server was reloaded in place (same pod, never restarted) and refused no one during the upgrade.
    const natsAfter = (await podsOf('nats', 'app.kubernetes.io/name=nats'))[0] as V1Pod
    expect(natsAfter.metadata?.uid).toBe(natsPod.metadata?.uid)
    expect(natsAfter.status?.containerStatuses?.[0]?.restartCount).toBe(0)
    // (nats-server logs a refused NKey as an authentication error; the client sees an Authorization Violation.)
    const refused = (await natsLog()).filter((l) => /authentication error|authorization (violation|error)/i.test(l))
    expect(refused.slice(0, 5)).toEqual([])
    // The CRD is the release's now, kept on uninstall.
    const crd = await jsonOf(['get', 'crd', 'modelbackfills.ai.flexinfer'])
    expect(crd.metadata.annotations['meta.helm.sh/release-name']).toBe(RELEASE)
    expect(crd.metadata.annotations['helm.sh/resource-policy']).toBe('keep')
    for (const fn of ['source', 'demand', 'cancel', 'ingress']) {
      const d = await jsonOf(['-n', NS, 'get', 'deploy', `${FULLNAME}-${fn}`])
      expect(d.spec.template.spec.containers[0].image, fn).toBe(appRef())
    }

    // The running attempt: the same Job, pod and container, running, never signalled.
    const jobAfter = await jsonOf(['-n', TEAM, 'get', 'job', jobName])
    expect(jobAfter.metadata.uid).toBe(job.metadata.uid)
    const podAfter = await jsonOf(['-n', TEAM, 'get', 'pod', pod.metadata?.name as string])
    expect(podAfter.metadata.uid).toBe(pod.metadata?.uid)
    expect(podAfter.metadata.deletionTimestamp).toBeUndefined()
    expect(podAfter.status.containerStatuses[0].containerID).toBe(pod.status?.containerStatuses?.[0]?.containerID)
    expect(podAfter.status.containerStatuses[0].state.running).toBeDefined()
    expect((await containerLog(c.node, pod, 'eval')).map((l) => l.text)).toEqual(['started'])

    // The KV state: every key still there, with its value or a later revision; streams never re-created.
    const after = await natsState()
    for (const [name, s] of Object.entries(before.streams)) {
      const a = after.streams[name] as { firstSeq: number; lastSeq: number }
      expect(a.lastSeq, name).toBeGreaterThanOrEqual(s.lastSeq)
      expect(a.firstSeq, name).toBeGreaterThanOrEqual(Math.min(s.firstSeq, 1))
    }
    for (const bucket of ['KV_flexinfer-backfills', 'KV_flexinfer-claims']) {
      for (const [subject, entry] of Object.entries(before.kv[bucket] ?? {})) {
        const now = after.kv[bucket]?.[subject]
        expect(now, `${subject} kept`).toBeDefined()
        if (now?.seq === entry.seq) expect(now.data, subject).toBe(entry.data)
        else expect(now?.seq, subject).toBeGreaterThan(entry.seq)
      }
    }
    const statusAfter = (await jsonOf(['-n', TEAM, 'get', 'mbf', 'eval-gemma'])).status
    expect(statusAfter.attempts).toBeGreaterThanOrEqual(status.attempts)
    console.log(
      `[upgrade] kept: Job uid ${jobAfter.metadata.uid}, container ${containerId.slice(0, 12)} running, no SIGTERM; status attempts ${status.attempts} → ${statusAfter.attempts}; streams' last sequences ${STREAMS.map((s) => `${before.streams[s]?.lastSeq}→${after.streams[s]?.lastSeq}`).join(', ')}`,
    )

    // The new release's preemption path cancels the attempt 0.1.0 started, for 0.1.0's gateway identity.
    const requestAt = Date.now()
    await foregroundRequest()
    const sigterm = await waitFor(
      'SIGTERM in the backfill container',
      async () => (await containerLog(c.node, pod, 'eval')).find((l) => l.text === 'SIGTERM'),
      { timeoutMs: 60_000, intervalMs: 100 },
    )
    const exitNs = await c.events.exitOf(containerId, 45_000)
    // The preemption can be over before the kubelet reports the gateway's container as started: its log once it ran.
    await kubectlOk(['-n', TEAM, 'wait', '--for=jsonpath={.status.phase}=Succeeded', '--timeout=60s', 'pod/gateway'])
    expect(await kubectlOk(['-n', TEAM, 'logs', 'gateway'])).toMatch(/Stored in Stream: FLEXINFER_FOREGROUND_LAST/)
    await waitFor(`Job ${jobName} gone`, async () => (await kubectl(['-n', TEAM, 'get', 'job', jobName])).code !== 0, {
      timeoutMs: 60_000,
    })
    // Cancelled for the foreground request, which demand took (nothing dead-lettered): the state counts it as such.
    const preempted = await natsState()
    expect(preempted.streams.FLEXINFER_DEADLETTER?.lastSeq).toBe(after.streams.FLEXINFER_DEADLETTER?.lastSeq)
    const entry = Object.values(preempted.kv['KV_flexinfer-backfills'] ?? {})[0] as Entry
    const counters = (JSON.parse(entry.data) as { counters?: { preemptions?: Record<string, number> } }).counters
    expect(counters?.preemptions?.foreground, entry.data).toBeGreaterThanOrEqual(1)
    const gatewayPod = await jsonOf(['-n', TEAM, 'get', 'pod', 'gateway'])
    const publishedAt = Date.parse(gatewayPod.status.containerStatuses[0].state.terminated.finishedAt)
    const told = (await jsonOf(['-n', TEAM, 'get', 'events', '--field-selector', 'involvedObject.name=eval-gemma']))
      .items as { reason: string; message: string }[]
    console.log(
      `[upgrade] gateway pod created → SIGTERM ${sigterm.at - requestAt} ms, → exited ${Number(exitNs / 1_000_000n) - requestAt} ms; its publish (container finished, 1 s resolution) → SIGTERM ${sigterm.at - publishedAt} ms; preemptions ${JSON.stringify(counters?.preemptions)}; events: ${told.map((e) => `${e.reason}: ${e.message}`).join(' | ')}`,
    )

    // A later idle window: a new Job, admitted by the new release (no 0.1.0 function pod is left).
    const next = await runningWith('started', [pod.metadata?.uid as string])
    expect(next.metadata?.labels?.['job-name']).not.toBe(jobName)
    const functions = (await podsOf(NS, `app.kubernetes.io/instance=${RELEASE}`)).filter(
      (p) => p.metadata?.labels?.['app.kubernetes.io/component'] !== 'provision' && !p.metadata?.deletionTimestamp,
    )
    expect(functions.length).toBeGreaterThanOrEqual(4)
    for (const p of functions) expect(p.spec?.containers[0]?.image, p.metadata?.name).toBe(appRef())
    const final = (await jsonOf(['-n', TEAM, 'get', 'mbf', 'eval-gemma'])).status
    expect(final.attempts).toBeGreaterThan(statusAfter.attempts)
    console.log(`[upgrade] next window: Job ${next.metadata?.labels?.['job-name']} running; attempts ${final.attempts}`)
    await kubectlOk(['-n', TEAM, 'delete', 'mbf', 'eval-gemma', '--timeout=90s'])
  })
})
