#!/usr/bin/env node
// The `kubectl-mbf` executable (package.json bin): kubectl runs it as `kubectl mbf …` once it is on PATH, and
// `npx kubectl-mbf …` runs it. An installed package runs the compiled plugin (`npm run build` → dist/cmd/kubectl-mbf/, plain
// JavaScript: tsx is a devDependency an install does not have); a clone without a build loads the TypeScript with
// tsx, so there is nothing to build first there. MBF_CLI_SOURCE=1 forces the TypeScript (a clone with a stale dist/).
import { existsSync } from 'node:fs'
import process from 'node:process'
import { fileURLToPath } from 'node:url'

const compiled = new URL('../../dist/cmd/kubectl-mbf/kubectl-mbf.js', import.meta.url)

async function load() {
  if (process.env.MBF_CLI_SOURCE !== '1' && existsSync(fileURLToPath(compiled))) return import(compiled.href)
  let tsImport
  try {
    ;({ tsImport } = await import('tsx/esm/api'))
  } catch {
    process.stderr.write(
      'kubectl-mbf: neither the compiled plugin (dist/cmd/kubectl-mbf/, `npm run build`) nor tsx (`npm ci` in a clone) is here\n',
    )
    process.exit(1)
  }
  return tsImport('./kubectl-mbf.ts', import.meta.url)
}

const { main } = await load()
const out = await main(process.argv.slice(2))
process.stdout.write(out.stdout)
process.stderr.write(out.stderr)
process.exitCode = out.code
