#!/usr/bin/env node
// The `kubectl-mbf` executable (package.json bin): kubectl runs it as `kubectl mbf …` once it is on PATH, and
// `npx kubectl-mbf …` runs it from a clone. It loads the TypeScript plugin with tsx (a dependency of a clone after
// `npm ci`), so there is nothing to build first.
import process from 'node:process'

let tsImport
try {
  ;({ tsImport } = await import('tsx/esm/api'))
} catch {
  process.stderr.write('kubectl-mbf: tsx is not installed here; run `npm ci` in the model-backfill checkout first\n')
  process.exit(1)
}
const { main } = await tsImport('./kubectl-mbf.ts', import.meta.url)
const out = await main(process.argv.slice(2))
process.stdout.write(out.stdout)
process.stderr.write(out.stderr)
process.exitCode = out.code
