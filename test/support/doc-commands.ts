// The shell blocks the docs mark for the install test, read from the docs themselves so the test runs what a reader
// copies. A block is marked by an HTML comment on the line before its fence:
//
//   <!-- install-test: bundle -->
//   ```sh
//   kubectl apply --server-side -f release/model-backfill.yaml
//   ```
//
// An HTML comment renders as nothing on GitHub and in most Markdown viewers, so the page reads as a task page; a named
// marker survives rewording, reordering and new blocks around it (a heading or a block's position would not), and a
// marker that is moved away from its block, or a block that lost its commands, is an error naming the page and the
// marker instead of a test that silently runs less.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

export interface DocBlock {
  /** The page, as the error messages name it (relative to the repository). */
  doc: string
  marker: string
  /** The 1-based line of the fence that opens the block. */
  line: number
  /** The block's text exactly as the page has it: what the install test runs. */
  text: string
  /** Its commands: comments dropped, line continuations joined, whitespace outside quotes collapsed. */
  commands: string[]
}

/** The marker's comment on a line of its own: `<!-- install-test: NAME -->`. */
const MARKER = /^\s*<!--\s*install-test:\s*([\w.-]+)\s*-->\s*$/
/** The fence a marked block must open with: a shell block (the language is what the test runs it with). */
const SHELL_FENCE = /^(\s*)(`{3,}|~{3,})\s*(sh|bash|shell)\s*$/

const where = (doc: string, marker: string) => `${doc}: <!-- install-test: ${marker} -->`

/** Every marked block of a page (its Markdown text), by marker; a marker used twice or not on a shell block throws. */
export function markedBlocks(markdown: string, doc: string): Map<string, DocBlock> {
  const lines = markdown.split('\n')
  const blocks = new Map<string, DocBlock>()
  for (let i = 0; i < lines.length; i++) {
    const m = MARKER.exec(lines[i] as string)
    if (!m) continue
    const marker = m[1] as string
    if (blocks.has(marker))
      throw new Error(
        `${where(doc, marker)} marks two blocks (lines ${(blocks.get(marker) as DocBlock).line - 1} and ${i + 1}): a marker names one block`,
      )
    let open = i + 1
    while (open < lines.length && (lines[open] as string).trim() === '') open++
    const fence = SHELL_FENCE.exec(lines[open] ?? '')
    if (!fence)
      throw new Error(
        `${where(doc, marker)} (line ${i + 1}) is not followed by a \`\`\`sh block: the marker goes on the line before the block's fence`,
      )
    const closing = new RegExp(`^\\s*${(fence[2] as string)[0]}{${(fence[2] as string).length},}\\s*$`)
    let close = open + 1
    while (close < lines.length && !closing.test(lines[close] as string)) close++
    if (close >= lines.length) throw new Error(`${where(doc, marker)}: its block (line ${open + 1}) is never closed`)
    const text = `${lines.slice(open + 1, close).join('\n')}\n`
    const commands = shellCommands(text)
    if (commands.length === 0)
      throw new Error(
        `${where(doc, marker)}: its block (line ${open + 1}) holds no command, only comments or blank lines`,
      )
    blocks.set(marker, { doc, marker, line: open + 1, text, commands })
    i = close
  }
  return blocks
}

/** The block `marker` marks in a page's text; its absence throws, naming the page and the marker. */
export function markedBlock(markdown: string, doc: string, marker: string): DocBlock {
  const block = markedBlocks(markdown, doc).get(marker)
  if (!block)
    throw new Error(
      `${doc} has no block marked <!-- install-test: ${marker} --> (the install test runs it: put the marker on the line before the block's \`\`\`sh fence)`,
    )
  return block
}

/** The marked block of a page of the repository at `root` (`doc` relative to it, e.g. `docs/install.md`). */
export function readMarkedBlock(root: string, doc: string, marker: string): DocBlock {
  return markedBlock(readFileSync(join(root, doc), 'utf8'), doc, marker)
}

/**
 * The commands of a shell block as a reader's shell splits them: one per line, except where a backslash continues the
 * line, a quote or `$(…)` spans lines, or a here-document follows (its lines belong to the command that opens it).
 * Comments (`#` at the start of a word, outside quotes) are dropped, and runs of blanks outside quotes become one
 * space, so two pages' blocks compare by what they run, not by how their comments are aligned.
 */
export function shellCommands(text: string): string[] {
  const out: string[] = []
  let cmd = ''
  let quote: "'" | '"' | undefined
  /** Open `$(` and `(` outside quotes: a newline inside them does not end the command. */
  let depth = 0
  const heredocs: { delimiter: string; tabs: boolean }[] = []
  const finish = () => {
    const c = cmd.trim()
    if (c) out.push(c)
    cmd = ''
  }
  const lines = text.split('\n')
  for (let li = 0; li < lines.length; li++) {
    const line = lines[li] as string
    /** A backslash ended the line outside a comment: the command goes on. */
    let continued = false
    for (let i = 0; i < line.length; i++) {
      const ch = line[i] as string
      if (quote === "'") {
        cmd += ch
        if (ch === "'") quote = undefined
        continue
      }
      if (ch === '\\') {
        if (i === line.length - 1) {
          // A continuation: the newline goes with the backslash (inside double quotes too).
          continued = true
          break
        }
        cmd += ch + (line[++i] as string)
        continue
      }
      if (quote === '"') {
        cmd += ch
        if (ch === '"') quote = undefined
        continue
      }
      if (ch === "'" || ch === '"') quote = ch
      else if (ch === '(') depth++
      else if (ch === ')') depth = Math.max(0, depth - 1)
      else if (ch === '#' && (cmd === '' || /[\s;|&(]$/.test(cmd))) break
      else if (ch === '<' && line[i + 1] === '<' && line[i + 2] !== '<') {
        const h = /^<<(-?)\s*(['"]?)([\w.-]+)\2/.exec(line.slice(i))
        if (h) {
          heredocs.push({ delimiter: h[3] as string, tabs: h[1] === '-' })
          cmd += h[0]
          i += h[0].length - 1
          continue
        }
      }
      if (/\s/.test(ch) && quote === undefined) {
        if (!/\s$/.test(cmd)) cmd += ' '
      } else cmd += ch
    }
    if (quote && !continued) {
      cmd += '\n'
      continue
    }
    // A here-document's lines, verbatim, up to its delimiter line.
    while (heredocs.length > 0) {
      const { delimiter, tabs } = heredocs.shift() as { delimiter: string; tabs: boolean }
      const body: string[] = []
      for (li++; li < lines.length; li++) {
        const l = lines[li] as string
        if ((tabs ? l.replace(/^\t+/, '') : l) === delimiter) break
        body.push(l)
      }
      if (li >= lines.length) throw new Error(`a here-document is never closed by its delimiter line ${delimiter}`)
      cmd = `${cmd.trimEnd()}\n${body.join('\n')}\n${delimiter}`
    }
    if (continued) {
      if (!quote && !/\s$/.test(cmd)) cmd += ' '
      continue
    }
    if (depth > 0 || /(\|\||&&|\|)\s*$/.test(cmd)) {
      cmd += ' '
      continue
    }
    finish()
  }
  if (quote) throw new Error(`a ${quote} quote is never closed: ${cmd.trim().slice(0, 80)}`)
  finish()
  return out.map((c) => c.replace(/ +$/gm, ''))
}
