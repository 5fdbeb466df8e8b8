// `npm run bundle` (part of `npm run build`): the container's entry point, runtime/main.ts, as an esbuild bundle in
// dist/bundle/ (main.js and the chunks it loads), split at main's dynamic imports so a process loads only its
// mode's code. Loading ~2,000 module files from node_modules took most of a function's start (cold start, issue
// 11); a few minified files do not. The image runs it and needs no node_modules.
import { rm, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
// An argument writes it elsewhere (test/integration/transport/image.test.ts); a second one writes esbuild's metafile
// there (which input went into which output: test/integration/transport/cold-start-modules.test.ts).
const outdir = process.argv[2] ?? join(root, 'dist', 'bundle')
const metafile = process.argv[3]
// Chunk names carry content hashes: last build's would stay beside this one's.
await rm(outdir, { recursive: true, force: true })
const result = await build({
  absWorkingDir: root,
  entryPoints: { main: 'runtime/main.ts' },
  outdir,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  minify: true,
  sourcemap: 'linked',
  legalComments: 'none',
  logLevel: 'warning',
  metafile: Boolean(metafile),
  // CommonJS dependencies call require(); an ES module has none of its own.
  banner: {
    js: "import { createRequire as __mbfRequire } from 'node:module'; const require = __mbfRequire(import.meta.url);",
  },
})
if (metafile) await writeFile(metafile, JSON.stringify(result.metafile))
