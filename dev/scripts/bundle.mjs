// `npm run bundle` (part of `npm run build`): the container's entry point, cmd/manager/main.ts, as an esbuild bundle in
// dist/bundle/ (main.js and the chunks it loads), split at main's dynamic imports so a process loads only its
// mode's code; beside it the evaluation workload's, cmd/model-eval/main.ts (model-eval.js). Loading ~2,000 module
// files from node_modules took most of a function's start; a few minified files
// do not. The image runs it and needs no node_modules.
import { rm, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'

const root = join(dirname(fileURLToPath(import.meta.url)), '../..')
// An argument writes it elsewhere (test/integration/transport/image.test.ts); a second one writes esbuild's metafile
// there (which input went into which output: test/integration/transport/cold-start-modules.test.ts).
const outdir = process.argv[2] ?? join(root, 'dist', 'bundle')
const metafile = process.argv[3]
// Chunk names carry content hashes: last build's would stay beside this one's.
await rm(outdir, { recursive: true, force: true })
/**
 * node-fetch 2 (client-node's HTTP) imports whatwg-url only as a fallback for Node's own URL
 * (`const URL = Url.URL || whatwgUrl.URL`), which every Node since 10 has: the fallback is never taken. Its Unicode
 * tables (tr46) were ~0.3 MB of the bundle, parsed at every start of a function with a Kubernetes client. Node's URL
 * stands in for it.
 */
const nodeUrlForWhatwgUrl = {
  name: 'whatwg-url-is-node-url',
  setup(b) {
    b.onResolve({ filter: /^whatwg-url$/ }, () => ({ path: 'whatwg-url', namespace: 'node-url' }))
    b.onLoad({ filter: /.*/, namespace: 'node-url' }, () => ({
      contents: 'export const URL = globalThis.URL; export const URLSearchParams = globalThis.URLSearchParams;',
      loader: 'js',
    }))
  },
}
/**
 * zod's namespaces re-export every locale (`z.locales`, `core.locales`), so all ~40 of them (~0.25 MB, more than
 * half of zod in the bundle) were parsed at every start; zod itself sets English (classic/schemas.js imports en.js)
 * and nothing here picks another. The locales' index is cut to English only.
 */
const zodEnglishOnly = {
  name: 'zod-english-only',
  setup(b) {
    b.onResolve({ filter: /\/locales\/index\.js$/ }, (args) =>
      /[\\/]zod[\\/]/.test(args.importer)
        ? { path: join(args.resolveDir, args.path), namespace: 'zod-locales' }
        : undefined,
    )
    b.onLoad({ filter: /.*/, namespace: 'zod-locales' }, (args) => ({
      contents: "export { default as en } from './en.js'",
      resolveDir: dirname(args.path),
      loader: 'js',
    }))
  },
}
const result = await build({
  absWorkingDir: root,
  // model-eval: the reference backfill workload, its own entry point in the same image (a CronJob's command).
  entryPoints: { main: 'cmd/manager/main.ts', 'model-eval': 'cmd/model-eval/main.ts' },
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
  plugins: [nodeUrlForWhatwgUrl, zodEnglishOnly],
  // CommonJS dependencies call require(); an ES module has none of its own.
  banner: {
    js: "import { createRequire as __mbfRequire } from 'node:module'; const require = __mbfRequire(import.meta.url);",
  },
})
if (metafile) await writeFile(metafile, JSON.stringify(result.metafile))
// The image copies dist/bundle without the repository's package.json: without one saying "module", Node (>= 22) would
// first try every chunk as CommonJS and compile it again as ESM when that fails.
await writeFile(join(outdir, 'package.json'), '{ "type": "module" }\n')
