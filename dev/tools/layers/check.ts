// The layering of the product code, checked on every `npm run lint`: each room (a folder of the product code) may
// import only the rooms below it, and no module may take part in an import cycle. Type-only imports count too: a type
// that points upward ties the rooms together as much as a value does.
//
//   pkg/core, pkg/lib ← pkg/observability ← events ← {pkg/jetstream, pkg/kube} ← pkg/transport ← pkg/admission
//     ← pkg/reconcile ← functions ← cmd/manager
//
// pkg/reconcile (the loop every function runs: observe, decide, compare-and-set, apply) stands on pkg/admission: the
// admission protocol is what the admit role's configuration runs between a decision to create a Job and its commit.
//
// pkg/observability (the logger and tracing) sits below events because encoding an event stamps the active trace on
// it. The other entry points in cmd/ stand on pkg/ and events/ but not on the functions: the kubectl plugin
// (cmd/kubectl-mbf) and the background gate sidecar (cmd/gate), which only the composition root (cmd/manager)
// starts. clients/ (the gateway package) imports nothing of ours. Tests, benchmarks and scripts are not checked.
//
// Configuration is read once, in the composition root: no room below cmd/manager/ reads `process.env`
// (cmd/manager/config.ts parses every setting at start and the values are passed down), so a setting has one name,
// one default and one validation, and a bad value stops the process at start instead of at its first use.
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'

const LIBRARIES = [
  'pkg/core',
  'pkg/lib',
  'pkg/observability',
  'events',
  'pkg/jetstream',
  'pkg/kube',
  'pkg/transport',
  'pkg/admission',
  'pkg/reconcile',
] as const
const [core, lib, observability, events, jetstream, kube, transport, admission, reconcile] = LIBRARIES
const BELOW: Record<string, readonly string[]> = {
  // The gateway client package (clients/ts): gateways import it without the functions, so it imports nothing of
  // ours.
  clients: [],
  [core]: [],
  [lib]: [],
  [observability]: [core, lib],
  [events]: [core, lib, observability],
  // The gateway client's NATS URL reading, from its source (one parser for both sides).
  [jetstream]: [core, lib, observability, events, 'clients'],
  [kube]: [core, lib, observability, events],
  [transport]: [core, lib, observability, events, jetstream, kube],
  [admission]: [core, lib, observability, events, jetstream, kube, transport],
  [reconcile]: [core, lib, observability, events, jetstream, kube, transport, admission],
  functions: [...LIBRARIES],
  'cmd/gate': [core, lib, observability, events, jetstream, transport],
  'cmd/kubectl-mbf': [...LIBRARIES],
  // The reference backfill workload (its own entry point): the apiserver's error reading, HTTP and deadlines, and
  // the gate's wire names (pkg/core/gate.ts).
  'cmd/model-eval': [core, lib, kube],
  'cmd/manager': [...LIBRARIES, 'functions', 'cmd/gate'],
}
/** This repository's packages as other rooms import them: by name, not by path. */
const OWN_PACKAGES: Record<string, string> = { '@flexinfer/gateway-emitter': 'clients/ts/src/index.ts' }
/** Imports tolerated while their owner moves them out. */
const TOLERATED = new Set<string>()
/**
 * Rooms that may read the environment: the composition root, the kubectl plugin (an entry point of its own, which
 * reads the NATS context and credentials as the nats CLI does), the evaluation workload (an entry point of its own,
 * configured by its Job template) and the standalone gateway client package.
 */
const READS_ENV = new Set(['cmd/manager', 'cmd/kubectl-mbf', 'cmd/model-eval', 'clients'])
/** Files below the composition root allowed to read `process.env`, each with the reason. */
const ENV_TOLERATED: Record<string, string> = {}
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

/** The room a repository path belongs to: the longest room folder it is in ('' for none). */
const roomOf = (rel: string, rooms: Record<string, readonly string[]>) => {
  const path = rel.split(sep).join('/')
  let best = ''
  for (const room of Object.keys(rooms)) {
    if ((path === room || path.startsWith(`${room}/`)) && room.length > best.length) best = room
  }
  return best
}

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
      const text = readFileSync(abs, 'utf8')
      if (!READS_ENV.has(room) && !(file in ENV_TOLERATED) && readsEnvironment(text)) {
        violations.push({
          file,
          imports: 'process.env',
          why: `${room} may not read the environment (cmd/manager/config.ts parses it; receive the value instead)`,
        })
      }
      const { importedFiles } = ts.preProcessFile(text, true, true)
      for (const { fileName } of importedFiles) {
        // Our own packages by name are rooms too: the functions must not load the gateway client's sources.
        const own = OWN_PACKAGES[fileName.split('/').slice(0, 2).join('/')]
        if (!fileName.startsWith('.') && !own) continue
        const target = own ?? relative(root, resolve(dirname(abs), fileName)).replace(/\.js$/, '.ts')
        const to = roomOf(target, rooms)
        if (to !== room && !rooms[room]?.includes(to) && !TOLERATED.has(`${file} → ${target}`)) {
          violations.push({ file, imports: target, why: `${room} may not import ${to || target.split(sep)[0]}` })
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

/** Whether the source reads `process.env`: `process.env`, `process['env']` or `{ env } = process`. */
export function readsEnvironment(text: string): boolean {
  const file = ts.createSourceFile('x.ts', text, ts.ScriptTarget.Latest, false)
  const isProcess = (e: ts.Node) => ts.isIdentifier(e) && e.text === 'process'
  const visit = (node: ts.Node): boolean => {
    if (ts.isPropertyAccessExpression(node) && isProcess(node.expression) && node.name.text === 'env') return true
    if (
      ts.isElementAccessExpression(node) &&
      isProcess(node.expression) &&
      ts.isStringLiteralLike(node.argumentExpression) &&
      node.argumentExpression.text === 'env'
    )
      return true
    if (
      ts.isVariableDeclaration(node) &&
      node.initializer &&
      isProcess(node.initializer) &&
      ts.isObjectBindingPattern(node.name) &&
      node.name.elements.some((e) => ((e.propertyName ?? e.name) as ts.Identifier).text === 'env')
    )
      return true
    return ts.forEachChild(node, visit) ?? false
  }
  return visit(file)
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
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
  const violations = checkLayers(root)
  for (const v of violations) console.error(`${v.file}: ${v.why}: ${v.imports}`)
  if (violations.length > 0) {
    console.error(`\n${violations.length} layering violation(s); the rules are in dev/tools/layers/check.ts`)
    process.exit(1)
  }
  console.log('layers: no upward import, no cycle, no environment read below cmd/manager/')
}
