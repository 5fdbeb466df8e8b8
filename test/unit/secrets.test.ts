// dev/tools/secrets/generate.ts without a server: the identities come from deploy/nats/auth.conf itself, every one gets a
// key, the filled auth.conf names no variable, the outputs are what kustomize and the chart read, and bad input is
// refused with a message that names it. The real nats-server loading the output is
// test/integration/security/generated-secrets.test.ts.
import { mkdtemp, readFile, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fromSeed } from '@nats-io/nkeys'
import { describe, expect, it } from 'vitest'
import { parse, parseAllDocuments } from 'yaml'
import {
  AUTH_CONF,
  accountsOnly,
  authConfIdentities,
  DEFAULTS,
  fillAuthConf,
  generate,
  generateKeeping,
  parseArgs,
  parseKept,
  render,
  updateGates,
  writeOutput,
} from '../../dev/tools/secrets/generate.js'
import { NATS_USERS } from '../integration/support/deploy.js'

const authConf = () => readFile(AUTH_CONF, 'utf8')
const docs = (text: string) => parseAllDocuments(text).map((d) => d.toJS())

describe('the identities', () => {
  it('are exactly the users deploy/nats/auth.conf names: nine workload and gateway users and the operator', async () => {
    const users = authConfIdentities(await authConf())
    expect(users.sort()).toEqual([...NATS_USERS].sort())
    expect(users).toHaveLength(10)
    expect(users).toContain('operator')
  })

  it('each gets its own pair; the filled auth.conf carries every public key and no variable', async () => {
    const text = await authConf()
    const users = authConfIdentities(text)
    const g = generate(users)
    const publics = users.map((u) => g.identities[u]?.publicKey)
    expect(new Set(publics).size).toBe(users.length)
    for (const u of users) {
      const id = g.identities[u] as { seed: string; publicKey: string }
      expect(id.seed).toMatch(/^SU[A-Z2-7]{56}$/)
      expect(fromSeed(new TextEncoder().encode(id.seed)).getPublicKey()).toBe(id.publicKey)
    }
    const filled = fillAuthConf(text, Object.fromEntries(users.map((u) => [u, g.identities[u]?.publicKey as string])))
    const body = filled
      .split('\n')
      .filter((l) => !l.trimStart().startsWith('#'))
      .join('\n')
    expect(body).not.toMatch(/\$FLEXINFER_/)
    for (const p of publics) expect(body).toContain(`nkey: ${p}`)
    expect(g.ingressToken).toMatch(/^[0-9a-f]{64}$/)
  })

  it('refuses a missing or malformed public key, and a file that names no identity', async () => {
    const text = await authConf()
    expect(() => fillAuthConf(text, {})).toThrow(/no public key for the NATS user source/)
    const users = authConfIdentities(text)
    const keys = Object.fromEntries(users.map((u) => [u, generate([u]).identities[u]?.publicKey as string]))
    expect(() => fillAuthConf(text, { ...keys, demand: 'SUAAAA' })).toThrow(/public key of demand is not a user NKey/)
    expect(() => authConfIdentities('accounts {}\n# nkey: $FLEXINFER_X_NKEY\n')).toThrow(/names no/)
  })
})

describe('the outputs', () => {
  const opts = { ...DEFAULTS, outDir: '/secrets' }

  it('kustomize: a Secret per workload identity plus the ingress token; gateway and operator stay outside', async () => {
    const text = await authConf()
    const g = generate(authConfIdentities(text))
    const files = render(text, g, opts)
    expect(Object.keys(files).sort()).toEqual([
      'gateway/secret.yaml',
      'model-backfill/kustomization.yaml',
      'model-backfill/secrets.yaml',
      'nats/kustomization.yaml',
      'nats/secret.yaml',
      'operator/env.sh',
      'operator/nats-context.json',
      'operator/seed.nk',
      'public-keys.env',
    ])
    expect(parse(files['model-backfill/kustomization.yaml'] as string)).toMatchObject({
      namespace: 'model-backfill',
      resources: ['secrets.yaml'],
    })
    const secrets = docs(files['model-backfill/secrets.yaml'] as string)
    const byName = Object.fromEntries(secrets.map((s) => [s.metadata.name, s.stringData]))
    expect(Object.keys(byName).sort()).toEqual(
      [
        ...['source', 'demand', 'admit', 'cancel', 'lifecycle', 'ingress', 'bridge', 'provision'].map(
          (u) => `model-backfill-nats-${u}`,
        ),
        'model-backfill-ingress-token',
      ].sort(),
    )
    expect(byName['model-backfill-nats-admit']).toEqual({ seed: g.identities.admit?.seed })
    expect(byName['model-backfill-ingress-token']).toEqual({ token: g.ingressToken })
    // Nobody in the install namespace holds the gateway's or the operator's seed.
    const all = files['model-backfill/secrets.yaml'] as string
    expect(all).not.toContain(g.identities.gateway?.seed)
    expect(all).not.toContain(g.identities.operator?.seed)
    const [natsSecret] = docs(files['nats/secret.yaml'] as string)
    expect(natsSecret.metadata.name).toBe('model-backfill-nats-auth')
    expect(natsSecret.stringData['auth.conf']).toContain(`nkey: ${g.identities.operator?.publicKey}`)
    // accounts.conf: the same accounts, without the block around them (a server with accounts of its own includes it
    // inside its block): wrapped back in one, it is auth.conf's block line for line.
    const accounts = natsSecret.stringData['accounts.conf'] as string
    expect(accounts).not.toMatch(/^accounts\s*\{/m)
    expect(accounts).toMatch(/^ {2}FLEXINFER \{$/m)
    expect(accounts).toContain('include "gates.conf"')
    expect(natsSecret.stringData['auth.conf']).toContain(`accounts {\n${accounts}}`)
    // No seed reaches nats-server's namespace.
    for (const id of Object.values(g.identities)) expect(files['nats/secret.yaml']).not.toContain(id.seed)
    expect(parse(files['nats/kustomization.yaml'] as string).namespace).toBe('nats')
    expect(files['public-keys.env']).toContain(`FLEXINFER_OPERATOR_NKEY=${g.identities.operator?.publicKey}\n`)
    expect(JSON.parse(files['operator/nats-context.json'] as string)).toEqual({
      description: 'ModelBackfill read-only operator',
      url: 'nats://nats.nats.svc.cluster.local:4222',
      nkey: '/secrets/operator/seed.nk',
      inbox_prefix: '_INBOX_operator',
    })
    expect(files['operator/env.sh']).toContain("NATS_URL='nats://operator@nats.nats.svc.cluster.local:4222'")
  })

  it('helm: the chart values for every user the chart knows and the token, no Secret manifests', async () => {
    const text = await authConf()
    const g = generate(authConfIdentities(text))
    const files = render(text, g, { ...opts, format: 'helm' })
    expect(Object.keys(files)).not.toContain('model-backfill/secrets.yaml')
    const values = parse(files['values.yaml'] as string)
    const chartUsers = Object.keys(
      parse(await readFile(new URL('../../deploy/charts/model-backfill/values.yaml', import.meta.url), 'utf8')).nats
        .credentials,
    )
    expect(Object.keys(values.nats.credentials).sort()).toEqual(chartUsers.sort())
    expect(values.nats.credentials.provision).toEqual({ seed: g.identities.provision?.seed })
    expect(values.ingress.token.value).toBe(g.ingressToken)
  })

  it("gates: a user per opted-in namespace in gates.conf, its seed only in that namespace's Secret", async () => {
    const text = await authConf()
    const g = generate(authConfIdentities(text), ['team-a', 'team-b'])
    const files = render(text, g, { ...opts, gateNamespaces: ['team-a', 'team-b'] })
    const [natsSecret] = docs(files['nats/secret.yaml'] as string)
    const gates = natsSecret.stringData['gates.conf'] as string
    for (const ns of ['team-a', 'team-b']) {
      const id = g.gates[ns] as { seed: string; publicKey: string }
      expect(fromSeed(new TextEncoder().encode(id.seed)).getPublicKey()).toBe(id.publicKey)
      expect(gates).toContain(`nkey: ${id.publicKey}`)
      expect(gates).toContain(`"flexinfer.preempt.${ns}.>"`)
      const [secret] = docs(files[`gates/${ns}/secret.yaml`] as string)
      expect(secret.metadata).toMatchObject({ name: 'model-backfill-gate', namespace: ns })
      expect(secret.stringData).toEqual({ seed: id.seed })
      expect(files['nats/secret.yaml']).not.toContain(id.seed)
      expect(files['model-backfill/secrets.yaml']).not.toContain(id.seed)
    }
    expect(gates).not.toMatch(/\$FLEXINFER_/)
    expect(files['public-keys.env']).toContain(`FLEXINFER_GATE_TEAM_A_NKEY=${g.gates['team-a']?.publicKey}\n`)
    // Without gate namespaces the account has no user (the shipped deploy/nats/gates.conf).
    const none = docs(render(text, generate(authConfIdentities(text)), opts)['nats/secret.yaml'] as string)[0]
    expect(none.stringData['gates.conf']).toContain('users: []')
  })

  it('--update-gates: namespaces added and removed, existing gate seeds and every other identity kept', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gen-secrets-'))
    const text = await authConf()
    const g = generate(authConfIdentities(text), ['team-a'])
    writeOutput(dir, render(text, g, { ...opts, outDir: dir, gateNamespaces: ['team-a'] }))
    const authBefore = docs(await readFile(join(dir, 'nats/secret.yaml'), 'utf8'))[0].stringData['auth.conf']
    const { files, removed } = updateGates(dir, text, ['team-b'])
    expect(removed).toEqual([join(dir, 'gates/team-a')])
    expect(Object.keys(files).sort()).toEqual(['gates/team-b/secret.yaml', 'nats/secret.yaml', 'public-keys.env'])
    const [natsSecret] = docs(files['nats/secret.yaml'] as string)
    expect(natsSecret.stringData['auth.conf']).toBe(authBefore)
    expect(natsSecret.stringData['gates.conf']).not.toContain(g.gates['team-a']?.publicKey)
    writeOutput(dir, files, true)
    // Again with team-a back and team-b kept: team-b's seed is the one just written.
    const teamB = docs(await readFile(join(dir, 'gates/team-b/secret.yaml'), 'utf8'))[0].stringData.seed
    const again = updateGates(dir, text, ['team-a', 'team-b'])
    expect(docs(again.files['gates/team-b/secret.yaml'] as string)[0].stringData.seed).toBe(teamB)
    expect(again.files['public-keys.env']).toContain(`FLEXINFER_ADMIT_NKEY=${g.identities.admit?.publicKey}`)
    expect(() => updateGates(join(dir, 'nothing'), text, ['x'])).toThrow(/holds no generated secrets/)
    expect(() => parseArgs(['--out', 'd', '--gate-namespaces', 'ok,Not_OK'])).toThrow(
      '--gate-namespaces: not namespace names: Not_OK',
    )
    expect(() => parseArgs(['--out', 'd', '--update-gates', '--force'])).toThrow(/--force would rotate/)
  })

  it('never overwrites an existing output (that would rotate every identity at once) unless forced', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gen-secrets-'))
    const text = await authConf()
    const files = render(text, generate(authConfIdentities(text)), { ...opts, outDir: dir })
    writeOutput(dir, files)
    expect((await stat(join(dir, 'operator/seed.nk'))).mode & 0o777).toBe(0o600)
    expect((await stat(join(dir, 'operator'))).mode & 0o777).toBe(0o700)
    const before = await readFile(join(dir, 'operator/seed.nk'), 'utf8')
    expect(() => writeOutput(dir, render(text, generate(authConfIdentities(text)), opts))).toThrow(
      /already holds secrets.*--force/,
    )
    expect(await readFile(join(dir, 'operator/seed.nk'), 'utf8')).toBe(before)
    writeOutput(dir, render(text, generate(authConfIdentities(text)), opts), true)
    expect(await readFile(join(dir, 'operator/seed.nk'), 'utf8')).not.toBe(before)
    // An empty directory (made by hand) is fine.
    const empty = await mkdtemp(join(tmpdir(), 'gen-secrets-'))
    writeOutput(empty, { 'x/y': 'z' })
    expect(await readFile(join(empty, 'x/y'), 'utf8')).toBe('z')
  })

  it('--keep: the seeds, public keys and token of an existing installation are used as they are, the rest made new', async () => {
    const text = await authConf()
    const users = authConfIdentities(text)
    const old = generate(users)
    const id = (u: string) => old.identities[u] as { seed: string; publicKey: string }
    const kept = parseKept(
      [
        '# read back from the cluster',
        `FLEXINFER_DEMAND_SEED=${id('demand').seed}`,
        `FLEXINFER_CANCEL_SEED=${id('cancel').seed}`,
        `FLEXINFER_GATEWAY_NKEY=${id('gateway').publicKey}`,
        `INGRESS_TOKEN=${old.ingressToken}`,
        '',
      ].join('\n'),
    )
    const g = generateKeeping(users, [], kept)
    expect(g.identities.demand).toEqual(id('demand'))
    expect(g.identities.cancel).toEqual(id('cancel'))
    expect(g.identities.gateway).toEqual({ seed: '', publicKey: id('gateway').publicKey })
    expect(g.identities.operator?.publicKey).not.toBe(id('operator').publicKey)
    expect(g.ingressToken).toBe(old.ingressToken)
    const files = render(text, g, { ...opts, format: 'helm' })
    const auth = (docs(files['nats/secret.yaml'] as string)[0] as { stringData: Record<string, string> }).stringData
    for (const u of ['demand', 'cancel', 'gateway']) expect(auth['auth.conf']).toContain(`nkey: ${id(u).publicKey}`)
    const values = parse(files['values.yaml'] as string)
    expect(values.nats.credentials.demand.seed).toBe(id('demand').seed)
    expect(values.ingress.token.value).toBe(old.ingressToken)
    // The gateways keep their own seed: their Secret here carries the token only.
    const gateway = (docs(files['gateway/secret.yaml'] as string)[0] as { stringData: Record<string, string> })
      .stringData
    expect(gateway).toEqual({ token: old.ingressToken })
    // A workload's seed is written: a public key alone cannot stand for it.
    const unseeded = { ...g, identities: { ...g.identities, admit: { seed: '', publicKey: id('admit').publicKey } } }
    expect(() => render(text, unseeded, opts)).toThrow(/kept by public key alone.*admit/)
    expect(() => parseKept(`FLEXINFER_DEMAND_SEED=${id('demand').publicKey}`)).toThrow(/line 1: not an NKey user seed/)
    expect(() => parseKept(`FLEXINFER_GATEWAY_NKEY=${id('demand').seed}`)).toThrow(/line 1: not an NKey user public/)
    expect(() => parseKept('PASSWORD=x')).toThrow(/line 1: expected/)
    expect(() => parseArgs(['--out', 'd', '--keep', 'f', '--update-gates'])).toThrow(/--keep is for a new output/)
  })

  it('refuses bad arguments by name', async () => {
    expect(() => parseArgs([])).toThrow('--out DIR is required')
    expect(() => parseArgs(['--out'])).toThrow('--out needs a value')
    expect(() => parseArgs(['--out', 'd', '--format', 'json'])).toThrow('--format must be kustomize or helm, not json')
    expect(() => parseArgs(['--out', 'd', '--bogus'])).toThrow(/unknown argument --bogus/)
    expect(parseArgs(['--out', 'd', '--format', 'helm', '--force'])).toMatchObject({
      out: 'd',
      format: 'helm',
      force: true,
    })
    const text = await authConf()
    const g = generate(authConfIdentities(text))
    expect(() => render(text, g, { ...opts, namespace: 'Bad_NS' })).toThrow(
      '--namespace "Bad_NS" is not a namespace name',
    )
    expect(() => render(text, { ...g, identities: {} }, opts)).toThrow(/no key generated for source/)
  })
})

describe('accountsOnly', () => {
  it('refuses a file without a top-level accounts block, or with settings outside it', () => {
    expect(() => accountsOnly('port: 4222\n')).toThrow(/no top-level `accounts \{`/)
    expect(() => accountsOnly('accounts {\n  A {}\n}\nport: 4222\n')).toThrow(/settings outside .*port: 4222/)
    expect(accountsOnly('# c\naccounts {\n  A { users: [] }\n}\n')).toBe('  A { users: [] }\n')
  })
})
