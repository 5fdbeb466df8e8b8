// The layering of the product code, checked on every `npm run lint`: each room (top-level folder) may import only
// the rooms below it, and no module may take part in an import cycle. Type-only imports count too: a type that
// points upward ties the rooms together as much as a value does.
//
//   core, lib ← observability ← events ← {jetstream, kube} ← transport ← admission ← functions ← process
//
// observability (the logger and tracing) sits below events because encoding an event stamps the active trace on it.
// cli is a tool on top of everything but the functions. Tests, benchmarks and scripts are not checked.
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'

const BELOW: Record<string, readonly string[]> = {
  core: [],
  lib: [],
  observability: ['core', 'lib'],
  events: ['core', 'lib', 'observability'],
  jetstream: ['core', 'lib', 'observability', 'events'],
  kube: ['core', 'lib', 'observability', 'events'],
  transport: ['core', 'lib', 'observability', 'events', 'jetstream', 'kube'],
  admission: ['core', 'lib', 'observability', 'events', 'jetstream', 'kube', 'transport'],
  functions: ['core', 'lib', 'observability', 'events', 'jetstream', 'kube', 'transport', 'admission'],
  process: ['core', 'lib', 'observability', 'events', 'jetstream', 'kube', 'transport', 'admission', 'functions'],
  cli: ['core', 'lib', 'observability', 'events', 'jetstream', 'kube', 'transport', 'admission'],
}
/** Imports tolerated while their owner moves them out: the gateway emitter becomes the client package clients/ts. */
const TOLERATED = new Set(['events/emitter.ts → jetstream/bus.ts'])
/** Files in a room that are build tools, not product code (they run at development time only). */
const TOOLING = new Set(['events/generate.ts', 'crds/generate.ts'])

export interface Violation {
  file: string
  imports: string
  why: string
}

function sources(dir: string): string[] {
  const out: string[] = []
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules') continue
    const path = join(dir, name)
    if (statSync(path).isDirectory()) out.push(...sources(path))
    else if (/\.(ts|mts|mjs)$/.test(name) && !name.endsWith('.d.ts')) out.push(path)
  }
  return out
}

const roomOf = (rel: string) => rel.split(sep)[0] ?? ''

/** Every import of the product code: upward or sideways imports across rooms, and cycles. */
export function checkLayers(root: string, rooms: Record<string, readonly string[]> = BELOW): Violation[] {
  const violations: Violation[] = []
  const graph = new Map<string, string[]>()
  for (const room of Object.keys(rooms)) {
    let files: string[]
    try {
      files = sources(join(root, room))
    } catch {
      continue
    }
    for (const abs of files) {
      const file = relative(root, abs)
      if (TOOLING.has(file)) continue
      const edges: string[] = []
      const { importedFiles } = ts.preProcessFile(readFileSync(abs, 'utf8'), true, true)
      for (const { fileName } of importedFiles) {
        if (!fileName.startsWith('.')) continue
        const target = relative(root, resolve(dirname(abs), fileName)).replace(/\.js$/, '.ts')
        const to = roomOf(target)
        if (to !== room && !rooms[room]?.includes(to) && !TOLERATED.has(`${file} → ${target}`)) {
          violations.push({ file, imports: target, why: `${room} may not import ${to}` })
        }
        edges.push(target)
      }
      graph.set(file, edges)
    }
  }
  for (const cycle of cycles(graph)) {
    violations.push({ file: cycle[0] as string, imports: cycle.join(' → '), why: 'import cycle' })
  }
  return violations
}

/** Elementary cycles found by depth-first search, each reported once (from its smallest member). */
function cycles(graph: Map<string, string[]>): string[][] {
  const found = new Map<string, string[]>()
  const state = new Map<string, 'open' | 'done'>()
  const stack: string[] = []
  const visit = (node: string) => {
    state.set(node, 'open')
    stack.push(node)
    for (const next of graph.get(node) ?? []) {
      if (!graph.has(next)) continue
      if (state.get(next) === 'open') {
        const cycle = stack.slice(stack.indexOf(next))
        const start = cycle.indexOf([...cycle].sort()[0] as string)
        const rotated = [...cycle.slice(start), ...cycle.slice(0, start)]
        found.set(rotated.join(' '), [...rotated, rotated[0] as string])
      } else if (!state.has(next)) visit(next)
    }
    stack.pop()
    state.set(node, 'done')
  }
  for (const node of [...graph.keys()].sort()) if (!state.has(node)) visit(node)
  return [...found.values()]
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')
  const violations = checkLayers(root)
  for (const v of violations) console.error(`${v.file}: ${v.why}: ${v.imports}`)
  if (violations.length > 0) {
    console.error(`\n${violations.length} layering violation(s); the rule is in tools/layers/check.ts`)
    process.exit(1)
  }
  console.log('layers: no upward import, no cycle')
}
