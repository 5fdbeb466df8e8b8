// clients/ts packs as users install it: `npm pack` builds it (prepack) and ships the JavaScript and declarations its
// package.json exports, no TypeScript source, and the packed module imports.
import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { repoRoot } from '../env/binaries.js'

const client = join(repoRoot, 'clients/ts')
mkdirSync(join(repoRoot, '.testenv'), { recursive: true })
// Below the repository: the packed module resolves its NATS dependencies from the workspace's node_modules.
const tmp = mkdtempSync(join(repoRoot, '.testenv', 'client-pack-'))
afterAll(() => rmSync(tmp, { recursive: true, force: true }))

describe('clients/ts package', () => {
  it('exports dist/ JavaScript and declarations, packs them and no source, and imports from the tarball', () => {
    const pkg = JSON.parse(readFileSync(join(client, 'package.json'), 'utf8'))
    expect(pkg.exports['.']).toEqual({ types: './dist/index.d.ts', import: './dist/index.js' })
    expect(pkg.exports['./connection']).toEqual({ types: './dist/connection.d.ts', import: './dist/connection.js' })
    const packed = JSON.parse(
      execFileSync('npm', ['pack', '--json', '--pack-destination', tmp], {
        cwd: client,
        encoding: 'utf8',
        timeout: 120_000,
      }),
    ) as { filename: string; files: { path: string }[] }[]
    const files = packed[0]?.files.map((f) => f.path) ?? []
    for (const target of Object.values(pkg.exports).flatMap((e) => Object.values(e as object))) {
      expect(files, target as string).toContain((target as string).slice(2))
    }
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([])
    execFileSync('tar', ['-xzf', join(tmp, packed[0]?.filename as string), '-C', tmp])
    const kind = execFileSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const m = await import(${JSON.stringify(join(tmp, 'package/dist/index.js'))}); console.log(typeof m.openForegroundEmitter)`,
      ],
      { cwd: tmp, encoding: 'utf8', timeout: 60_000 },
    )
    expect(kind.trim()).toBe('function')
  }, 180_000)
})
