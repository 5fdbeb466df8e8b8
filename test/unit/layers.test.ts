// The layering rules of dev/tools/layers/check.ts (run by `npm run lint`): they hold on this tree, and they catch an
// upward import, a sideways one, a cycle and an environment read below the composition root in a tree made to break
// them.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { checkLayers, readsEnvironment } from '../../dev/tools/layers/check.js'
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

  it('reports an upward import, a sideways one, an import of tooling and a cycle, with the files', () => {
    write('functions/g.ts', "import { h } from '../test/h.js'\nexport const g = h\n")
    write('test/h.ts', 'export const h = 1\n')
    write('pkg/core/a.ts', "import { b } from '../../events/b.js'\nexport const a = b\n")
    write('events/b.ts', 'export const b = 1\n')
    write('pkg/jetstream/c.ts', "import type { D } from '../kube/d.js'\nexport const c = 1\n")
    write('pkg/kube/d.ts', 'export type D = number\n')
    write('pkg/transport/e.ts', "import { f } from './f.js'\nexport const e = f\n")
    write('pkg/transport/f.ts', "export const f = async () => (await import('./e.js')).e\n")
    const found = checkLayers(tree).map((v) => `${v.file}: ${v.why}`)
    expect(found).toEqual([
      'pkg/core/a.ts: pkg/core may not import events',
      'pkg/jetstream/c.ts: pkg/jetstream may not import pkg/kube',
      'functions/g.ts: functions may not import test',
      'pkg/transport/e.ts: import cycle',
    ])
  })

  it('reports a read of process.env below cmd/manager/, and none in cmd/manager/, cmd/kubectl-mbf/ or clients/', () => {
    const env = mkdtempSync(join(tmpdir(), 'layers-env-'))
    try {
      const put = (path: string, text: string) => {
        mkdirSync(dirname(join(env, path)), { recursive: true })
        writeFileSync(join(env, path), text)
      }
      put('functions/cancel/x.ts', "export const pods = process.env.CANCEL_DELETE_PODS !== 'false'\n")
      put(
        'pkg/transport/y.ts',
        "// process.env is read in cmd/manager/config.ts only\nexport const y = process['env'].PORT\n",
      )
      put('pkg/observability/z.ts', 'const { env } = process\nexport const z = env.LOG_LEVEL\n')
      put('pkg/kube/ok.ts', '// not process.env: a value passed in\nexport const ok = (env: { A?: string }) => env.A\n')
      put('cmd/manager/config.ts', 'export const c = process.env.NATS_URL\n')
      put('cmd/kubectl-mbf/main.ts', 'export const c = process.env.NATS_URL\n')
      put('clients/ts/src/i.ts', 'export const c = process.env.NATS_URL\n')
      expect(
        checkLayers(env)
          .map((v) => `${v.file}: ${v.imports}`)
          .sort(),
      ).toEqual([
        'functions/cancel/x.ts: process.env',
        'pkg/observability/z.ts: process.env',
        'pkg/transport/y.ts: process.env',
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
