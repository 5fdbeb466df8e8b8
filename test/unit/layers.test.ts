// The layering rules of tools/layers/check.ts (run by `npm run lint`): they hold on this tree, and they catch an
// upward import, a sideways one, a cycle and an environment read below the composition root in a tree made to break
// them.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { checkLayers, readsEnvironment } from '../../tools/layers/check.js'
import { repoRoot } from '../env/binaries.js'

describe('layers', () => {
  it('the product code has no upward import and no cycle', () => {
    expect(checkLayers(repoRoot)).toEqual([])
  })

  const tree = mkdtempSync(join(tmpdir(), 'layers-'))
  afterAll(() => rmSync(tree, { recursive: true, force: true }))
  const write = (path: string, text: string) => {
    mkdirSync(dirname(join(tree, path)), { recursive: true })
    writeFileSync(join(tree, path), text)
  }

  it('reports an upward import, a sideways one and a cycle, with the files', () => {
    write('core/a.ts', "import { b } from '../events/b.js'\nexport const a = b\n")
    write('events/b.ts', 'export const b = 1\n')
    write('jetstream/c.ts', "import type { D } from '../kube/d.js'\nexport const c = 1\n")
    write('kube/d.ts', 'export type D = number\n')
    write('transport/e.ts', "import { f } from './f.js'\nexport const e = f\n")
    write('transport/f.ts', "export const f = async () => (await import('./e.js')).e\n")
    const found = checkLayers(tree).map((v) => `${v.file}: ${v.why}`)
    expect(found).toEqual([
      'core/a.ts: core may not import events',
      'jetstream/c.ts: jetstream may not import kube',
      'transport/e.ts: import cycle',
    ])
  })

  it('reports a read of process.env below process/, and none in process/, cli/ or clients/', () => {
    const env = mkdtempSync(join(tmpdir(), 'layers-env-'))
    try {
      const put = (path: string, text: string) => {
        mkdirSync(dirname(join(env, path)), { recursive: true })
        writeFileSync(join(env, path), text)
      }
      put('functions/cancel/x.ts', "export const pods = process.env.CANCEL_DELETE_PODS !== 'false'\n")
      put('transport/y.ts', "// process.env is read in process/config.ts only\nexport const y = process['env'].PORT\n")
      put('observability/z.ts', 'const { env } = process\nexport const z = env.LOG_LEVEL\n')
      put('kube/ok.ts', '// not process.env: a value passed in\nexport const ok = (env: { A?: string }) => env.A\n')
      put('process/config.ts', 'export const c = process.env.NATS_URL\n')
      put('cli/main.ts', 'export const c = process.env.NATS_URL\n')
      put('clients/ts/src/i.ts', 'export const c = process.env.NATS_URL\n')
      expect(
        checkLayers(env)
          .map((v) => `${v.file}: ${v.imports}`)
          .sort(),
      ).toEqual([
        'functions/cancel/x.ts: process.env',
        'observability/z.ts: process.env',
        'transport/y.ts: process.env',
      ])
    } finally {
      rmSync(env, { recursive: true, force: true })
    }
  })

  it('finds every form of the read, and not the word in a comment or a string', () => {
    expect(readsEnvironment('const a = process.env.A')).toBe(true)
    expect(readsEnvironment("const a = process['env']")).toBe(true)
    expect(readsEnvironment('const { env: e } = process')).toBe(true)
    expect(readsEnvironment("// process.env\nconst s = 'process.env'")).toBe(false)
    expect(readsEnvironment('const a = other.env.A')).toBe(false)
  })
})
