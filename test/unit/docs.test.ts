// The documentation cannot drift from the repository: every relative link resolves (a file, and a heading when it
// names one), and every command in the fenced shell blocks of the README's local part and the install task names an
// npm script, or a file, that exists. Running those commands is the install test's job (test/integration/node).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { describe, expect, it } from 'vitest'
import { shellCommands } from '../support/doc-commands.js'

const ROOT = join(import.meta.dirname, '..', '..')
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8')

function markdown(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name)
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : markdown(path)
    return e.name.endsWith('.md') ? [path] : []
  })
}

/** The pages a user reads: the README, the changelog, docs/ and the manifests' READMEs. */
const PAGES = [
  'README.md',
  'CHANGELOG.md',
  ...markdown('docs'),
  ...markdown('deploy'),
  'keda/README.md',
  'knative/README.md',
]

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes. */
const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/`/g, '')
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-')

function anchors(file: string): Set<string> {
  const text = read(file).replace(/```[\s\S]*?```/g, '')
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1] as string)))
}

/** Markdown links outside code: [text](target). */
function links(text: string): string[] {
  const prose = text.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '')
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1] as string)
}

describe('links in the docs', () => {
  it('every relative link names a file of the repository, and a heading it has', () => {
    const broken: string[] = []
    for (const page of PAGES) {
      for (const target of links(read(page))) {
        if (/^[a-z]+:/i.test(target)) continue
        const [path, anchor] = target.split('#') as [string, string | undefined]
        const file = path ? join(dirname(page), path) : page
        if (relative(ROOT, join(ROOT, file)).startsWith('..')) {
          broken.push(`${page}: ${target} leaves the repository`)
          continue
        }
        if (!existsSync(join(ROOT, file))) {
          broken.push(`${page}: ${target} (no ${file})`)
          continue
        }
        if (anchor && file.endsWith('.md') && !statSync(join(ROOT, file)).isDirectory() && !anchors(file).has(anchor))
          broken.push(`${page}: ${target} (no heading #${anchor} in ${file})`)
      }
    }
    expect(broken).toEqual([])
  })

  it('checks the pages it should', () => {
    expect(PAGES).toEqual(expect.arrayContaining(['docs/install.md', 'docs/reference/settings.md']))
    expect(links(read('README.md')).length).toBeGreaterThan(10)
  })
})

/** The fenced sh blocks of a page, or of its part from one heading to the next of that level. */
function shellBlocks(file: string, from?: string, to?: string): string[] {
  let text = read(file)
  if (from) text = text.slice(text.indexOf(from), to ? text.indexOf(to, text.indexOf(from)) : undefined)
  return [...text.matchAll(/```(?:sh|bash)\n([\s\S]*?)```/g)].map((m) => m[1] as string)
}

/** Each command of a block, as a shell splits them: comments dropped, continuation lines joined. */
const commands = shellCommands

const SCRIPTS = Object.keys((JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts)
/** Folders of the repository a command may name a file in. */
const REPO_PATH = /(?:^|[\s=])((?:dev|deploy|keda|knative|crds|cmd|clients|test|events)\/[\w./-]*)/g

function problems(cmds: string[]): string[] {
  const wrong: string[] = []
  for (const cmd of cmds) {
    for (const m of cmd.matchAll(/\bnpm run ([\w:-]+)/g))
      if (!SCRIPTS.includes(m[1] as string)) wrong.push(`${cmd}: no npm script "${m[1]}"`)
    for (const m of cmd.matchAll(REPO_PATH)) {
      const path = (m[1] as string).replace(/[.,;:]+$/, '')
      if (!existsSync(join(ROOT, path))) wrong.push(`${cmd}: no ${path}`)
    }
  }
  return wrong
}

describe("the docs' commands name what exists", () => {
  const local = shellBlocks('README.md', '## Try it locally', '## Documentation').flatMap(commands)
  const install = shellBlocks('docs/install.md').flatMap(commands)

  it("README's local part: npm scripts and files", () => {
    expect(local).toEqual(expect.arrayContaining(['npm run setup', 'npm run demo', 'npm start']))
    expect(problems(local)).toEqual([])
  })

  it('the install task: npm scripts, the install script and the manifests', () => {
    expect(install.some((c) => c.includes('dev/scripts/install.sh install'))).toBe(true)
    expect(problems(install)).toEqual([])
  })

  it('the install script offers the subcommands the docs use', () => {
    const script = read('dev/scripts/install.sh')
    // As commands: in a shell block, or an inline code span that starts with the script.
    const text = PAGES.map((page) =>
      [...shellBlocks(page), ...[...read(page).matchAll(/`([^`\n]+)`/g)].map((m) => m[1])].join('\n'),
    ).join('\n')
    const used = new Set([...text.matchAll(/dev\/scripts\/install\.sh ([a-z-]+)/g)].map((m) => m[1] as string))
    expect(used.size).toBeGreaterThan(2)
    for (const sub of used) expect(script, `install.sh ${sub}`).toMatch(new RegExp(`^${sub}\\)`, 'm'))
  })

  it('the problems check finds a missing script and a missing file', () => {
    expect(problems(['npm run no-such-script', 'kubectl apply -k deploy/no-such-dir/'])).toHaveLength(2)
  })
})
