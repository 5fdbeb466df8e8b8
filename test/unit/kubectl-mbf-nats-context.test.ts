// kubectl mbf --nats-context: the generated operator context (dev/tools/secrets/generate.ts) names an NKey seed file
// and an inbox prefix, no password; both must reach the connection options, or nats-server refuses the operator.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { natsUrlFrom } from '../../cmd/kubectl-mbf/read.js'
import { natsServerOptions } from '../../pkg/jetstream/connect.js'

const SEED = 'SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4'

function context(body: object): { home: string; file: string } {
  const home = mkdtempSync(join(tmpdir(), 'mbf-ctx-'))
  const dir = join(home, '.config', 'nats', 'context')
  const file = join(dir, 'ops.json')
  mkdirSync(dir, { recursive: true })
  writeFileSync(file, JSON.stringify(body))
  return { home, file }
}

describe('natsUrlFrom with a nats CLI context', () => {
  it("uses the context's nkey seed file and its inbox prefix's user", () => {
    const seedFile = join(mkdtempSync(join(tmpdir(), 'mbf-seed-')), 'seed.nk')
    writeFileSync(seedFile, `${SEED}\n`)
    const { home } = context({ url: 'nats://a:4222,nats://b:4222', nkey: seedFile, inbox_prefix: '_INBOX_operator' })
    const url = natsUrlFrom({ natsContext: 'ops' }, {}, home)
    const opts = natsServerOptions(url, {})
    expect(opts.servers).toEqual(['nats://a:4222', 'nats://b:4222'])
    expect(opts.inboxPrefix).toBe('_INBOX_operator')
    expect(opts.authenticator).toBeTypeOf('function')
    expect(opts.pass).toBeUndefined()
  })

  it('takes a path to the .json file as well as a name', () => {
    const { file, home } = context({ url: 'nats://h:4222', user: 'u', password: 'p' })
    expect(natsUrlFrom({ natsContext: file }, {}, '/nowhere')).toBe('nats://u:p@h:4222')
    expect(natsUrlFrom({ natsContext: 'ops' }, {}, home)).toBe('nats://u:p@h:4222')
  })

  it('names a missing context', () => {
    expect(() => natsUrlFrom({ natsContext: 'absent' }, {}, '/nowhere')).toThrow(/NATS context "absent" not found/)
  })
})
