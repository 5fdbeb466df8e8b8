// Helpers for the deployment tests: the upstream Knative/KEDA/eventing-natss CRDs installed into the test
// apiserver, `kubectl kustomize` builds of the overlays re-namespaced into a test namespace (names suffixed, so
// cluster-scoped RBAC of parallel builds never collides), and a dedicated nats-server running nats/auth.conf.
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { createWriteStream, existsSync } from 'node:fs'
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { createUser } from '@nats-io/nkeys'
import { parseAllDocuments, stringify } from 'yaml'
import {
  AUTH_CONF,
  authConfIdentities,
  DEFAULTS,
  generate,
  render,
  writeOutput,
} from '../../../dev/tools/secrets/generate.js'
import { gateNkeyEnv, gatesConf } from '../../../pkg/jetstream/gates-conf.js'
import { repoRoot } from '../../env/binaries.js'
import { waitFor } from '../../env/exec.js'
import type { TestEnv } from '../../env/fixture.js'
import { freePorts, LOOPBACK } from '../../env/net.js'

export const UPSTREAM_CRDS = process.env.UPSTREAM_CRDS_DIR ?? join(repoRoot, '../shared/upstream-crds')
export const FUNCTIONS = ['source', 'demand', 'admit', 'cancel', 'lifecycle'] as const
export type FunctionName = (typeof FUNCTIONS)[number]

export type Manifest = {
  apiVersion: string
  kind: string
  metadata: { name: string; namespace?: string }
  // biome-ignore lint/suspicious/noExplicitAny: manifests are free-form YAML
  [k: string]: any
}

const parseYaml = (text: string): Manifest[] =>
  parseAllDocuments(text)
    .map((d) => d.toJS() as Manifest | null)
    .filter((d): d is Manifest => Boolean(d?.kind))

/** The CRDs of upstream-crds/, with spec.conversion stripped (no conversion webhook runs in the test env). */
export async function upstreamCrds(): Promise<Manifest[]> {
  const crds: Manifest[] = []
  for (const folder of ['knative-serving', 'knative-eventing', 'keda', 'eventing-natss']) {
    const dir = join(UPSTREAM_CRDS, folder)
    for (const file of (await readdir(dir)).filter((f) => /\.ya?ml$/.test(f)).sort()) {
      for (const doc of parseYaml(await readFile(join(dir, file), 'utf8'))) {
        if (doc.kind !== 'CustomResourceDefinition') continue
        delete doc.spec.conversion
        crds.push(doc)
      }
    }
  }
  return crds
}

/** Installs the upstream CRDs (idempotent: server-side apply, one field manager) and waits until Established. */
export async function installUpstreamCrds(env: TestEnv): Promise<string[]> {
  const crds = await upstreamCrds()
  return applyCrds(env, crds.map((c) => stringify(c)).join('---\n'), 'upstream CRDs')
}

/**
 * Applies CRDs (a multi-document YAML) the way every deploy test does — server-side, one field manager, so it is
 * idempotent across files — and waits until each is Established; `what` names them in an error.
 */
export async function applyCrds(env: TestEnv, input: string, what: string): Promise<string[]> {
  const applied = await env.kubectl(
    [
      'apply',
      '--server-side',
      '--force-conflicts',
      '--field-manager=modelbackfill-deploy-tests',
      '-o',
      'name',
      '-f',
      '-',
    ],
    { input },
  )
  if (applied.code !== 0) throw new Error(`applying ${what} failed:\n${applied.stderr}`)
  const names = applied.stdout.split('\n').filter((l) => l.startsWith('customresourcedefinition'))
  const wait = await env.kubectl(['wait', '--for=condition=Established', '--timeout=60s', ...names])
  if (wait.code !== 0) throw new Error(`${what} not established:\n${wait.stderr}`)
  return names
}

export interface Build {
  overlay: string
  namespace: string
  suffix: string
  manifests: Manifest[]
  /** Name after the suffix (what the overlay calls `name`). */
  name(name: string): string
}

/**
 * `kubectl kustomize` of an overlay wrapped in a throwaway kustomization that sets the namespace and a name
 * suffix, with the Secrets `npm run gen:secrets` makes beside it — the way a user installs it (dev/scripts/install.sh).
 * The overlay's own Namespace object is left out (the test owns its own).
 */
export async function buildOverlay(env: TestEnv, overlay: 'knative' | 'keda', namespace: string): Promise<Build> {
  const suffix = `-${randomBytes(3).toString('hex')}`
  const dir = await mkdtemp(join(tmpdir(), `kustomize-${overlay}-`))
  try {
    const authConf = await readFile(AUTH_CONF, 'utf8')
    const secrets = join(dir, 'secrets')
    writeOutput(secrets, render(authConf, generate(authConfIdentities(authConf)), { ...DEFAULTS, outDir: secrets }))
    await writeFile(
      join(dir, 'kustomization.yaml'),
      stringify({
        apiVersion: 'kustomize.config.k8s.io/v1beta1',
        kind: 'Kustomization',
        namespace,
        nameSuffix: suffix,
        resources: [relative(dir, join(repoRoot, overlay)), 'secrets/model-backfill'],
      }),
    )
    const built = await env.kubectl(['kustomize', dir])
    if (built.code !== 0) throw new Error(`kubectl kustomize ${overlay} failed:\n${built.stderr}`)
    const manifests = parseYaml(built.stdout).filter((m) => m.kind !== 'Namespace')
    return { overlay, namespace, suffix, manifests, name: (n) => `${n}${suffix}` }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

export const toYaml = (manifests: Manifest[]) => manifests.map((m) => stringify(m)).join('---\n')
export const isCrd = (m: Manifest) => m.kind === 'CustomResourceDefinition'

/**
 * Applies a build: the CRDs server-side dry-run only (the environment already serves them; a real apply would
 * change the shared CRD under other test files), everything else for real with strict field validation.
 */
export async function applyBuild(env: TestEnv, build: Build): Promise<string[]> {
  const crds = build.manifests.filter(isCrd)
  if (crds.length > 0) {
    const dry = await env.kubectl(['apply', '--dry-run=server', '--validate=strict', '-f', '-'], {
      input: toYaml(crds),
    })
    if (dry.code !== 0) throw new Error(`CRDs of ${build.overlay} refused:\n${dry.stderr}`)
  }
  const rest = build.manifests.filter((m) => !isCrd(m))
  const applied = await env.kubectl(['apply', '--validate=strict', '-o', 'name', '-f', '-'], { input: toYaml(rest) })
  if (applied.code !== 0) throw new Error(`kubectl apply of ${build.overlay} failed:\n${applied.stderr}`)
  return applied.stdout.split('\n').filter(Boolean)
}

/** Deletes what applyBuild created outside the test namespace (cluster-scoped RBAC); never the CRDs. */
export async function deleteClusterScoped(env: TestEnv, build: Build) {
  const cluster = build.manifests.filter((m) => !isCrd(m) && !m.metadata.namespace)
  if (cluster.length === 0) return
  await env.kubectl(['delete', '--ignore-not-found', '--wait=false', '-f', '-'], { input: toYaml(cluster) })
}

export const NATS_ACCOUNT = 'FLEXINFER'

/** Every stream the provision step makes, the KV buckets' included. */
export const NATS_STREAMS = [
  'FLEXINFER_EVENTS',
  'FLEXINFER_TIMERS',
  'FLEXINFER_DEADLETTER',
  'FLEXINFER_FOREGROUND',
  'FLEXINFER_FOREGROUND_LAST',
  'KV_flexinfer-model-idle',
  'KV_flexinfer-backfills',
  'KV_flexinfer-claims',
] as const

/** The server's answer to a request on `subject`: 'refused' (a permissions violation), 'answered' or 'timeout'. */
export async function requestOutcome(
  nc: { request(subject: string, body: string, opts: { timeout: number }): Promise<unknown> },
  subject: string,
  body = '{}',
): Promise<'refused' | 'answered' | 'timeout'> {
  try {
    await nc.request(subject, body, { timeout: 3_000 })
    return 'answered'
  } catch (err) {
    const text = `${(err as Error).message} ${String((err as { cause?: unknown }).cause ?? '')}`
    if (/permissions violation/i.test(text)) return 'refused'
    if (/timeout/i.test(text)) return 'timeout'
    return 'answered'
  }
}

/** The users of deploy/nats/auth.conf (test/unit/secrets.test.ts keeps this list equal to the file's). */
export const NATS_USERS = [...FUNCTIONS, 'ingress', 'gateway', 'bridge', 'provision', 'operator'] as const
export type NatsUser = (typeof NATS_USERS)[number]

export interface AuthNats {
  /**
   * The URL a user of deploy/nats/auth.conf connects with: `nats://<user>@host:port?nkey_seed_file=<its seed>` (the user
   * names the inbox prefix, the seed file authenticates; pkg/jetstream/connect.ts natsServerOptions).
   */
  url(user: NatsUser): string
  /** Path of a user's NKey seed file (what its mounted Secret holds when deployed). */
  seedFile(user: NatsUser): string
  /** Seed file of a namespace's gate user (what its `model-backfill-gate` Secret holds). */
  gateSeedFile(namespace: string): string
  /** Public NKey of a user (what nats-server is given). */
  publicKey(user: NatsUser): string
  hostPort: string
  monitorUrl: string
  log(): Promise<string>
  stop(): Promise<void>
}

/** Fresh NKeys for every user of deploy/nats/auth.conf: what nats-server is given, and each user's seed file. */
export interface NatsNkeys {
  /** FLEXINFER_<USER>_NKEY = public key, for nats-server's environment (auth.conf reads them). */
  serverEnv: Record<string, string>
  /** Path of a user's seed file (mode 0600, what its mounted Secret holds when deployed). */
  seedFile(user: NatsUser): string
  publicKey(user: NatsUser): string
}

/** Makes an NKey pair per user of deploy/nats/auth.conf and writes the seeds under `<dir>/seeds`. */
export async function makeNatsNkeys(dir: string): Promise<NatsNkeys> {
  const { identities } = generate(NATS_USERS)
  const serverEnv: Record<string, string> = {}
  await mkdir(join(dir, 'seeds'), { mode: 0o700 })
  for (const user of NATS_USERS) {
    serverEnv[`FLEXINFER_${user.toUpperCase()}_NKEY`] = identities[user]?.publicKey as string
    await writeFile(join(dir, 'seeds', `${user}.nk`), identities[user]?.seed as string, { mode: 0o600 })
  }
  return {
    serverEnv,
    seedFile: (user) => join(dir, 'seeds', `${user}.nk`),
    publicKey: (user) => identities[user]?.publicKey as string,
  }
}

/**
 * A nats-server of its own (free loopback ports, temp JetStream dir) running deploy/nats/auth.conf with fresh NKeys given
 * in its environment — or, with `generated`, the auth.conf `npm run gen:secrets` filled in (mounted beside the
 * server's config as in a pod: `include "../nats-auth/auth.conf"`), with no key in the environment. Beside it
 * the generated gates.conf, or deploy/nats/gates.conf as shipped, or with `gateNamespaces` as `npm run nats:gates` writes it for those namespaces, each
 * gate user with a fresh NKey (`gateSeedFile`).
 */
export async function startAuthNats(
  natsServer: string,
  generated?: { authConf: string; gatesConf?: string; nkeys: Pick<NatsNkeys, 'seedFile' | 'publicKey'> },
  opts: { gateNamespaces?: string[] } = {},
): Promise<AuthNats> {
  const dir = await mkdtemp(join(tmpdir(), 'nats-auth-'))
  const [port, monitorPort] = (await freePorts(2)) as [number, number]
  const nkeys = generated?.nkeys ?? (await makeNatsNkeys(dir))
  const serverEnv: Record<string, string> = generated ? {} : { ...(nkeys as NatsNkeys).serverEnv }
  await mkdir(join(dir, 'js'))
  await mkdir(join(dir, 'nats-config'))
  await mkdir(join(dir, 'nats-auth'))
  if (generated) await writeFile(join(dir, 'nats-auth', 'auth.conf'), generated.authConf)
  else await copyFile(join(repoRoot, 'deploy/nats/auth.conf'), join(dir, 'nats-auth', 'auth.conf'))
  // auth.conf includes gates.conf from beside itself.
  const gateSeeds = new Map<string, string>()
  if (generated?.gatesConf) await writeFile(join(dir, 'nats-auth', 'gates.conf'), generated.gatesConf)
  else if (opts.gateNamespaces) {
    await writeFile(join(dir, 'nats-auth', 'gates.conf'), gatesConf(opts.gateNamespaces))
    await mkdir(join(dir, 'gate-seeds'), { mode: 0o700 })
    for (const ns of opts.gateNamespaces) {
      const pair = createUser()
      serverEnv[gateNkeyEnv(ns)] = pair.getPublicKey()
      const file = join(dir, 'gate-seeds', `${ns}.nk`)
      await writeFile(file, new TextDecoder().decode(pair.getSeed()), { mode: 0o600 })
      gateSeeds.set(ns, file)
    }
  } else await copyFile(join(repoRoot, 'deploy/nats/gates.conf'), join(dir, 'nats-auth', 'gates.conf'))
  const conf = join(dir, 'nats-config', 'nats-server.conf')
  await writeFile(
    conf,
    [
      'server_name: modelbackfill-auth-test',
      `listen: "${LOOPBACK}:${port}"`,
      `http: "${LOOPBACK}:${monitorPort}"`,
      `jetstream { store_dir: ${JSON.stringify(join(dir, 'js'))}, max_memory_store: 64MB, max_file_store: 2GB }`,
      // nats-server resolves includes relative to the including file: auth.conf is mounted beside the config
      // directory, as a ConfigMap or Secret volume would be (deploy/nats/README.md).
      'include "../nats-auth/auth.conf"',
      '',
    ].join('\n'),
  )
  const logPath = join(dir, 'nats-server.log')
  const out = createWriteStream(logPath)
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^FLEXINFER_.*_NKEY$/.test(k)))
  const child: ChildProcess = spawn(natsServer, ['-c', conf], {
    env: { ...inherited, ...serverEnv },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  child.stdout?.pipe(out)
  child.stderr?.pipe(out)
  const monitorUrl = `http://${LOOPBACK}:${monitorPort}`
  const log = async () => (existsSync(logPath) ? readFile(logPath, 'utf8') : '')
  try {
    await waitFor(
      'nats-server with deploy/nats/auth.conf',
      async () => {
        if (child.exitCode !== null) throw new Error(`nats-server exited ${child.exitCode}:\n${await log()}`)
        return (await fetch(`${monitorUrl}/healthz`)).status === 200
      },
      { timeoutMs: 20_000, intervalMs: 100 },
    )
  } catch (err) {
    child.kill('SIGKILL')
    throw err
  }
  const hostPort = `${LOOPBACK}:${port}`
  return {
    url: (user) => `nats://${user}@${hostPort}?nkey_seed_file=${encodeURIComponent(nkeys.seedFile(user))}`,
    gateSeedFile: (namespace) => {
      const file = gateSeeds.get(namespace)
      if (!file) throw new Error(`no gate user for namespace ${namespace} (startAuthNats gateNamespaces)`)
      return file
    },
    seedFile: nkeys.seedFile,
    publicKey: nkeys.publicKey,
    hostPort,
    monitorUrl,
    log,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve))
        child.kill('SIGTERM')
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))])
        if (child.exitCode === null) child.kill('SIGKILL')
      }
      out.end()
      await rm(dir, { recursive: true, force: true })
    },
  }
}
