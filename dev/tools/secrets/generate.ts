// Every secret a deployment needs, made in one command: an NKey per NATS identity deploy/nats/auth.conf names (its
// `$FLEXINFER_<USER>_NKEY` references are the one list of identities), the HTTP ingress's bearer token, and
// deploy/nats/auth.conf with the public keys filled in for nats-server. Seeds are made with @nats-io/nkeys (no `nk`
// binary) and written only into the output directory (mode 0700, files 0600), never to stdout.
//
//   npm run gen:secrets -- --out DIR [--format kustomize|helm] [--namespace model-backfill] [--nats-namespace nats]
//                          [--nats-url nats://nats.nats.svc.cluster.local:4222] [--gate-namespaces a,b] [--force]
//   npm run gen:secrets -- --out DIR --update-gates --gate-namespaces a,b,c
//   npm run gen:secrets -- --out DIR --keep FILE ...    the identities of an existing installation kept (below)
//
// DIR/nats/               the Secret `model-backfill-nats-auth` for nats-server's namespace: auth.conf (an `accounts`
//                         block), accounts.conf (the same accounts without the block, for a server that has accounts
//                         of its own: deploy/nats/official-chart-values.yaml) and gates.conf (included by both)
// DIR/model-backfill/     (kustomize) a Secret per workload identity and the ingress token, for the install namespace
// DIR/values.yaml         (helm) the same as chart values: nats.credentials.<user>.seed, ingress.token.value
// DIR/gateway/            the gateways' identity and the ingress token, as a Secret to apply where gateways run
// DIR/operator/           the read-only operator identity (nats CLI, kubectl mbf): its seed and a nats context
// DIR/gates/<ns>/         per namespace whose backfills opt into the background gate: its Secret `model-backfill-gate`
// DIR/public-keys.env     FLEXINFER_<USER>_NKEY=U… for a nats-server that reads deploy/nats/auth.conf unchanged
//
// An existing DIR is never overwritten (that would rotate every identity at once) unless --force is given.
// --keep FILE takes the identities an installation already has instead of making new ones (dev/scripts/install.sh
// reads them from the cluster when it meets an installation without its MBF_DIR, e.g. one made by a 0.1.0 chart):
// lines `FLEXINFER_<USER>_SEED=SU…` (a seed, e.g. read back from a function's Secret), `FLEXINFER_<USER>_NKEY=U…`
// (a public key only, for an identity whose seed lives elsewhere: the gateways'), `INGRESS_TOKEN=…`. Identities it
// does not name are made new. Replacing a key that nats-server and the running pods share would lock those pods
// out the moment nats-server reloads; rotation is its own step (--force).
// --update-gates changes only the gates' part of an existing DIR to the namespaces listed: a namespace already there
// keeps its seed, a new one gets its own, one no longer listed loses its user; every other identity stays as it is.
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { createUser, fromSeed } from '@nats-io/nkeys'
import { parseAllDocuments, stringify } from 'yaml'
import { GATE_SECRET } from '../../../pkg/core/gate.js'
import { gateNkeyEnv, gatesConf } from '../../../pkg/jetstream/gates-conf.js'

export const AUTH_CONF = new URL('../../../deploy/nats/auth.conf', import.meta.url)
/** The Secret nats-server mounts (at /etc/nats-auth) and includes. */
export const NATS_AUTH_SECRET = 'model-backfill-nats-auth'
/** Identities whose seed does not belong in the install namespace: gateways run elsewhere, the operator is a human. */
export const OUTSIDE_IDENTITIES = ['gateway', 'operator'] as const
const NKEY_VAR = /\$FLEXINFER_([A-Z0-9_]+)_NKEY\b/g
const NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/

/** The identities deploy/nats/auth.conf expects, in the order it names them (lower case: the NATS user name). */
export function authConfIdentities(authConf: string): string[] {
  const seen = new Set<string>()
  for (const line of authConf.split('\n')) {
    if (line.trimStart().startsWith('#')) continue
    for (const m of line.matchAll(NKEY_VAR)) seen.add((m[1] as string).toLowerCase())
  }
  if (seen.size === 0) throw new Error('deploy/nats/auth.conf names no $FLEXINFER_<USER>_NKEY: is it the right file?')
  return [...seen]
}

/** auth.conf with every `$FLEXINFER_<USER>_NKEY` replaced by that user's public key; refuses a missing or bad key. */
export function fillAuthConf(authConf: string, publicKeys: Record<string, string>): string {
  return authConf
    .split('\n')
    .map((line) =>
      line.trimStart().startsWith('#')
        ? line
        : line.replace(NKEY_VAR, (_, user: string) => {
            const key = publicKeys[user.toLowerCase()]
            if (!key)
              throw new Error(`no public key for the NATS user ${user.toLowerCase()} (deploy/nats/auth.conf names it)`)
            if (!/^U[A-Z2-7]{55}$/.test(key))
              throw new Error(`the public key of ${user.toLowerCase()} is not a user NKey`)
            return key
          }),
    )
    .join('\n')
}

/**
 * The accounts of a filled auth.conf without the `accounts { … }` around them, to include inside a server's own
 * `accounts` block: nats-server keeps only the last of two `accounts` keys, so a second block would drop the first's.
 */
export function accountsOnly(authConf: string): string {
  const lines = authConf.split('\n')
  const open = lines.findIndex((l) => /^accounts\s*\{\s*$/.test(l))
  // The first top-level `}` after the opening line closes the block (nested braces are indented).
  const close = lines.findIndex((l, i) => i > open && /^\}\s*$/.test(l))
  if (open < 0 || close < 0) throw new Error('auth.conf has no top-level `accounts {` … `}` block')
  const rest = [...lines.slice(0, open), ...lines.slice(close + 1)].filter(
    (l) => l.trim() && !l.trimStart().startsWith('#'),
  )
  if (rest.length > 0) throw new Error(`auth.conf has settings outside its accounts block: ${rest[0]?.trim()}`)
  return `${lines.slice(open + 1, close).join('\n')}\n`
}

export interface Identity {
  seed: string
  publicKey: string
}
export interface Generated {
  identities: Record<string, Identity>
  ingressToken: string
  /** The background gates' users, one per namespace (deploy/nats/gates.conf). */
  gates: Record<string, Identity>
}

const newIdentity = (): Identity => {
  const pair = createUser()
  return { seed: new TextDecoder().decode(pair.getSeed()), publicKey: pair.getPublicKey() }
}
const identityOf = (seed: string): Identity => ({
  seed,
  publicKey: fromSeed(new TextEncoder().encode(seed)).getPublicKey(),
})

/** A fresh NKey pair per identity and per gate namespace, and a 256-bit ingress token. */
export function generate(identities: readonly string[], gateNamespaces: readonly string[] = []): Generated {
  const out: Record<string, Identity> = {}
  for (const user of identities) out[user] = newIdentity()
  const gates = Object.fromEntries(gateNamespaces.map((ns) => [ns, newIdentity()]))
  return { identities: out, ingressToken: randomBytes(32).toString('hex'), gates }
}

/** What --keep names: identities (a seed, or a public key alone: `seed` is then empty) and the ingress token. */
export interface Kept {
  identities: Record<string, Identity>
  ingressToken?: string
}

/** Parses a --keep file; refuses anything that is not a user seed, a user public key or the token, by line. */
export function parseKept(text: string): Kept {
  const kept: Kept = { identities: {} }
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim()
    if (!line || line.startsWith('#')) continue
    const seedLine = /^FLEXINFER_([A-Z0-9_]+)_SEED=(\S+)$/.exec(line)
    const keyLine = /^FLEXINFER_([A-Z0-9_]+)_NKEY=(\S+)$/.exec(line)
    const tokenLine = /^INGRESS_TOKEN=(\S+)$/.exec(line)
    if (seedLine) {
      const [, user, seed] = seedLine as unknown as [string, string, string]
      if (!/^SU[A-Z2-7]{56}$/.test(seed)) throw new Error(`--keep line ${i + 1}: not an NKey user seed (SU…)`)
      kept.identities[user.toLowerCase()] = identityOf(seed)
    } else if (keyLine) {
      const [, user, key] = keyLine as unknown as [string, string, string]
      if (!/^U[A-Z2-7]{55}$/.test(key)) throw new Error(`--keep line ${i + 1}: not an NKey user public key (U…)`)
      kept.identities[user.toLowerCase()] ??= { seed: '', publicKey: key }
    } else if (tokenLine) {
      kept.ingressToken = tokenLine[1] as string
    } else {
      throw new Error(`--keep line ${i + 1}: expected FLEXINFER_<USER>_SEED=, FLEXINFER_<USER>_NKEY= or INGRESS_TOKEN=`)
    }
  }
  return kept
}

/** generate(), keeping what `kept` names: a kept identity or token is used as it is, the rest are made new. */
export function generateKeeping(
  identities: readonly string[],
  gateNamespaces: readonly string[],
  kept: Kept,
): Generated {
  const g = generate(identities, gateNamespaces)
  for (const user of identities) {
    const k = kept.identities[user]
    if (k) g.identities[user] = k
  }
  return { ...g, ingressToken: kept.ingressToken ?? g.ingressToken }
}

/** The name fillAuthConf knows a gate namespace's key by: `$FLEXINFER_GATE_TEAM_A_NKEY` → `gate_team_a`. */
const gateUser = (namespace: string) => gateNkeyEnv(namespace).slice('FLEXINFER_'.length, -'_NKEY'.length).toLowerCase()

export interface Options {
  format: 'kustomize' | 'helm'
  /** The install namespace (kustomize output; an overlay of yours that sets `namespace` overrides it). */
  namespace: string
  natsNamespace: string
  /** Where the operator's nats context and kubectl mbf connect (host:port or nats://host:port). */
  natsUrl: string
  /** The absolute output directory: the operator's context and env.sh name its seed file by path. */
  outDir: string
  /** Namespaces whose backfills opt into the background gate (docs/gate.md): a NATS user and a Secret each. */
  gateNamespaces: string[]
}
export const DEFAULTS: Options = {
  format: 'kustomize',
  namespace: 'model-backfill',
  natsNamespace: 'nats',
  natsUrl: 'nats://nats.nats.svc.cluster.local:4222',
  outDir: '.',
  gateNamespaces: [],
}

const secret = (name: string, namespace: string | undefined, component: string, data: Record<string, string>) => ({
  apiVersion: 'v1',
  kind: 'Secret',
  metadata: {
    name,
    ...(namespace ? { namespace } : {}),
    labels: { 'app.kubernetes.io/part-of': 'model-backfill', 'app.kubernetes.io/component': component },
  },
  type: 'Opaque',
  stringData: data,
})
const yamlDocs = (docs: object[]) => docs.map((d) => stringify(d)).join('---\n')
const kustomization = (namespace: string, resources: string[]) =>
  stringify({ apiVersion: 'kustomize.config.k8s.io/v1beta1', kind: 'Kustomization', namespace, resources })

/** Every output file (path relative to the output directory → content), from generated secrets. */
export function render(authConf: string, g: Generated, opts: Options): Record<string, string> {
  for (const [what, v] of [
    ['--namespace', opts.namespace],
    ['--nats-namespace', opts.natsNamespace],
  ] as const) {
    if (!NAME.test(v) || v.length > 63) throw new Error(`${what} ${JSON.stringify(v)} is not a namespace name`)
  }
  const users = authConfIdentities(authConf)
  const missing = [
    ...users.filter((u) => !g.identities[u]),
    ...opts.gateNamespaces.filter((ns) => !g.gates[ns]).map((ns) => `the gate of ${ns}`),
  ]
  if (missing.length > 0) throw new Error(`no key generated for ${missing.join(', ')}`)
  const publicKeys = Object.fromEntries(users.map((u) => [u, g.identities[u]?.publicKey as string]))
  const gateKeys = Object.fromEntries(opts.gateNamespaces.map((ns) => [gateUser(ns), g.gates[ns]?.publicKey as string]))
  const seed = (u: string) => g.identities[u]?.seed as string
  const workloads = users.filter((u) => !(OUTSIDE_IDENTITIES as readonly string[]).includes(u))
  // (updateGates renders public keys alone and no token: it writes none of the files that hold seeds.)
  const unseeded = [...workloads, 'operator'].filter((u) => users.includes(u) && g.identities[u] && !seed(u))
  if (g.ingressToken && unseeded.length > 0)
    throw new Error(`kept by public key alone, but their seed is written here: ${unseeded.join(', ')}`)
  const natsUrl = opts.natsUrl.includes('://') ? opts.natsUrl : `nats://${opts.natsUrl}`
  const files: Record<string, string> = {}

  files['nats/kustomization.yaml'] = kustomization(opts.natsNamespace, ['secret.yaml'])
  files['nats/secret.yaml'] = yamlDocs([
    // auth.conf includes gates.conf from beside itself: the background gates' account, one user per namespace that
    // opts in (pkg/jetstream/gates-conf.ts), public keys filled in as for auth.conf.
    secret(NATS_AUTH_SECRET, undefined, 'nats-auth', {
      'auth.conf': fillAuthConf(authConf, publicKeys),
      'accounts.conf': accountsOnly(fillAuthConf(authConf, publicKeys)),
      'gates.conf': fillAuthConf(gatesConf(opts.gateNamespaces), gateKeys),
    }),
  ])
  files['public-keys.env'] = [...Object.entries(publicKeys), ...Object.entries(gateKeys)]
    .map(([u, key]) => `FLEXINFER_${u.toUpperCase()}_NKEY=${key}\n`)
    .join('')
  for (const ns of opts.gateNamespaces) {
    // Applied in the user's namespace: the gate sidecar admit injects mounts it (and only the sidecar does).
    files[`gates/${ns}/secret.yaml`] = yamlDocs([
      secret(GATE_SECRET, ns, 'gate', { seed: g.gates[ns]?.seed as string }),
    ])
  }

  if (opts.format === 'kustomize') {
    files['model-backfill/kustomization.yaml'] = kustomization(opts.namespace, ['secrets.yaml'])
    files['model-backfill/secrets.yaml'] = yamlDocs([
      ...workloads.map((u) => secret(`model-backfill-nats-${u}`, undefined, u, { seed: seed(u) })),
      secret('model-backfill-ingress-token', undefined, 'ingress', { token: g.ingressToken }),
    ])
  } else {
    files['values.yaml'] = stringify({
      nats: { credentials: Object.fromEntries(workloads.map((u) => [u, { seed: seed(u) }])) },
      ingress: { token: { value: g.ingressToken } },
    })
  }

  if (users.includes('gateway')) {
    // What a gateway mounts: its NKey seed (NATS_NKEY_SEED_FILE) or, for gateways that POST, the ingress token.
    // A gateway identity kept by its public key alone (--keep) has its seed where the gateways already run.
    files['gateway/secret.yaml'] = yamlDocs([
      secret('model-backfill-gateway', undefined, 'gateway', {
        ...(seed('gateway') ? { seed: seed('gateway') } : {}),
        token: g.ingressToken,
      }),
    ])
  }
  if (users.includes('operator')) {
    files['operator/seed.nk'] = `${seed('operator')}\n`
    // `nats --context <this file>` (or copy it to ~/.config/nats/context/); the inbox prefix is the only one the
    // operator user may subscribe to.
    files['operator/nats-context.json'] = `${JSON.stringify(
      {
        description: 'ModelBackfill read-only operator',
        url: natsUrl,
        nkey: join(opts.outDir, 'operator/seed.nk'),
        inbox_prefix: '_INBOX_operator',
      },
      null,
      2,
    )}\n`
    files['operator/env.sh'] = [
      '# . operator/env.sh: kubectl mbf and the runtime helpers read NATS as the operator user (read-only).',
      `export NATS_URL='${natsUrl.replace('nats://', 'nats://operator@')}'`,
      `export NATS_NKEY_SEED_FILE='${join(opts.outDir, 'operator/seed.nk')}'`,
      '',
    ].join('\n')
  }
  return files
}

/** Writes the files under `dir` (created mode 0700, files 0600); refuses a non-empty `dir` unless `force`. */
export function writeOutput(dir: string, files: Record<string, string>, force = false) {
  if (existsSync(dir) && readdirSync(dir).length > 0 && !force) {
    throw new Error(
      `${dir} already holds secrets; generating again would replace every NATS identity and the ingress token at once. ` +
        'Use another --out, or --force to rotate them all (nats-server and every workload must then get the new ones).',
    )
  }
  for (const [rel, content] of Object.entries(files)) {
    const path = join(dir, rel)
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 })
    writeFileSync(path, content, { mode: 0o600 })
  }
}

/**
 * --update-gates: the gates' part of an existing output rewritten for `namespaces`, every other identity kept (read
 * back from the output: the workload users' public keys from public-keys.env, the gates' seeds from their Secrets).
 * Returns the files to write and the gate directories to remove.
 */
export function updateGates(
  dir: string,
  authConf: string,
  namespaces: readonly string[],
): { files: Record<string, string>; removed: string[] } {
  const envFile = join(dir, 'public-keys.env')
  if (!existsSync(envFile))
    throw new Error(`${dir} holds no generated secrets (no public-keys.env): generate them first`)
  const keys = Object.fromEntries(
    readFileSync(envFile, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const m = /^FLEXINFER_([A-Z0-9_]+)_NKEY=(U[A-Z2-7]{55})$/.exec(line)
        if (!m) throw new Error(`${envFile}: not a FLEXINFER_<USER>_NKEY=U… line: ${line.slice(0, 40)}`)
        return [(m[1] as string).toLowerCase(), m[2] as string]
      }),
  )
  const existing = existsSync(join(dir, 'gates')) ? readdirSync(join(dir, 'gates')) : []
  const gates: Record<string, Identity> = {}
  for (const ns of namespaces) {
    const file = join(dir, 'gates', ns, 'secret.yaml')
    const seed = existsSync(file)
      ? (parseAllDocuments(readFileSync(file, 'utf8'))[0]?.toJS() as { stringData?: { seed?: string } })?.stringData
          ?.seed
      : undefined
    gates[ns] = seed ? identityOf(seed) : newIdentity()
  }
  const users = authConfIdentities(authConf)
  const all = render(
    authConf,
    {
      // Only public keys go into what is rewritten (the auth Secret, public-keys.env, gates/): the workload seeds and
      // the rest of the output (nats/kustomization.yaml names the namespace given at generation) stay untouched.
      identities: Object.fromEntries(users.map((u) => [u, { seed: '', publicKey: keys[u] ?? '' }])),
      ingressToken: '',
      gates,
    },
    { ...DEFAULTS, outDir: dir, gateNamespaces: [...namespaces] },
  )
  const files = Object.fromEntries(
    Object.entries(all).filter(
      ([rel]) => rel === 'nats/secret.yaml' || rel.startsWith('gates/') || rel === 'public-keys.env',
    ),
  )
  return { files, removed: existing.filter((ns) => !namespaces.includes(ns)).map((ns) => join(dir, 'gates', ns)) }
}

/** A comma-separated list of namespace names, each checked. */
function namespaceList(raw: string): string[] {
  const list = [
    ...new Set(
      raw
        .split(',')
        .map((n) => n.trim())
        .filter(Boolean),
    ),
  ]
  const bad = list.filter((n) => !NAME.test(n) || n.length > 63)
  if (bad.length) throw new Error(`--gate-namespaces: not namespace names: ${bad.join(', ')}`)
  return list
}

export function parseArgs(
  argv: string[],
): Omit<Options, 'outDir'> & { out: string; force: boolean; updateGates: boolean; keep: string } {
  const opts = { ...DEFAULTS, out: '', force: false, updateGates: false, keep: '' }
  for (let i = 0; i < argv.length; i++) {
    const value = () => {
      const v = argv[++i]
      if (v === undefined || v.startsWith('--')) throw new Error(`${argv[i - 1]} needs a value`)
      return v
    }
    const arg = argv[i]
    if (arg === '--out') opts.out = value()
    else if (arg === '--format') {
      const f = value()
      if (f !== 'kustomize' && f !== 'helm') throw new Error(`--format must be kustomize or helm, not ${f}`)
      opts.format = f
    } else if (arg === '--namespace') opts.namespace = value()
    else if (arg === '--nats-namespace') opts.natsNamespace = value()
    else if (arg === '--nats-url') opts.natsUrl = value()
    else if (arg === '--gate-namespaces') opts.gateNamespaces = namespaceList(value())
    else if (arg === '--update-gates') opts.updateGates = true
    else if (arg === '--force') opts.force = true
    else if (arg === '--keep') opts.keep = value()
    else
      throw new Error(
        `unknown argument ${arg} (--out DIR [--format kustomize|helm] [--namespace ns] [--nats-namespace ns] [--nats-url url] [--gate-namespaces a,b] [--keep FILE] [--update-gates] [--force])`,
      )
  }
  if (!opts.out) throw new Error('--out DIR is required (where the Secrets are written)')
  if (opts.updateGates && opts.force)
    throw new Error('--update-gates keeps every identity; --force would rotate them all')
  if (opts.updateGates && opts.keep)
    throw new Error("--update-gates keeps the output's own identities; --keep is for a new output")
  return opts
}

/**
 * The command: `npm run gen:secrets -- …` here, or the release's bundled model-backfill-secrets.mjs, which has
 * auth.conf built in (there is no repository beside it to read it from).
 */
export function main(argv: string[], authConf: string): void {
  try {
    const opts = parseArgs(argv)
    const out = resolve(opts.out)
    if (opts.updateGates) {
      const { files, removed } = updateGates(out, authConf, opts.gateNamespaces)
      for (const dir of removed) rmSync(dir, { recursive: true, force: true })
      writeOutput(out, files, true)
      process.stdout.write(
        `gen:secrets: gates for ${opts.gateNamespaces.join(', ') || 'no namespace'}; wrote ${Object.keys(files).sort().join(', ')} under ${out}\n`,
      )
    } else {
      const users = authConfIdentities(authConf)
      const kept = opts.keep ? parseKept(readFileSync(opts.keep, 'utf8')) : { identities: {} }
      const unknown = Object.keys(kept.identities).filter((u) => !users.includes(u))
      if (unknown.length > 0)
        throw new Error(`--keep names identities deploy/nats/auth.conf does not: ${unknown.join(', ')}`)
      const files = render(authConf, generateKeeping(users, opts.gateNamespaces, kept), {
        ...opts,
        outDir: out,
      })
      writeOutput(out, files, opts.force)
      const keptNames = Object.keys(kept.identities)
      process.stdout.write(
        `gen:secrets: wrote ${Object.keys(files).sort().join(', ')} under ${out}${keptNames.length ? `; kept ${keptNames.join(', ')}${kept.ingressToken ? ' and the ingress token' : ''}` : ''}\n`,
      )
    }
  } catch (err) {
    process.stderr.write(`gen:secrets: ${(err as Error).message}\n`)
    process.exit(2)
  }
}

// The release bundle (dev/scripts/release.ts) defines MBF_RELEASE_BUNDLE and calls main() itself.
declare const MBF_RELEASE_BUNDLE: boolean | undefined
if (typeof MBF_RELEASE_BUNDLE === 'undefined' && import.meta.url === `file://${process.argv[1]}`) {
  main(process.argv.slice(2), readFileSync(AUTH_CONF, 'utf8'))
}
