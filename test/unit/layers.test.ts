// The layering rule of tools/layers/check.ts (run by `npm run lint`): it holds on this tree, and it catches an upward
// import, a sideways one and a cycle in a tree made to break it.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { checkLayers } from '../../tools/layers/check.js'
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
})
