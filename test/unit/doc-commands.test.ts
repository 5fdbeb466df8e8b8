// The extractor of the docs' marked shell blocks (test/support/doc-commands.ts): what the install test runs, and the
// errors that name the page and the marker when a marked block went missing, moved or lost its commands.
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { markedBlock, markedBlocks, readMarkedBlock, shellCommands } from '../support/doc-commands.js'

const page = (...lines: string[]) => lines.join('\n')

describe('markedBlock', () => {
  const doc = page(
    '# Install',
    '',
    '<!-- install-test: bundle -->',
    '```sh',
    'kubectl apply --server-side -f release/model-backfill.yaml   # the CRD',
    '```',
    '',
    'Some prose.',
    '',
    '<!-- install-test: chart -->',
    '',
    '```bash',
    'helm install mbf release/model-backfill-$VERSION.tgz \\',
    '  -f values.yaml',
    '```',
    '',
    '```sh',
    'echo an unmarked block',
    '```',
  )

  it('returns the text exactly as written and its commands, for each of two blocks', () => {
    const bundle = markedBlock(doc, 'docs/install.md', 'bundle')
    expect(bundle.text).toBe('kubectl apply --server-side -f release/model-backfill.yaml   # the CRD\n')
    expect(bundle.commands).toEqual(['kubectl apply --server-side -f release/model-backfill.yaml'])
    expect(bundle.line).toBe(4)
    const chart = markedBlock(doc, 'docs/install.md', 'chart')
    expect(chart.text).toBe('helm install mbf release/model-backfill-$VERSION.tgz \\\n  -f values.yaml\n')
    expect(chart.commands).toEqual(['helm install mbf release/model-backfill-$VERSION.tgz -f values.yaml'])
    expect([...markedBlocks(doc, 'docs/install.md').keys()]).toEqual(['bundle', 'chart'])
  })

  it('a missing marker: an error naming the page and the marker', () => {
    expect(() => markedBlock(doc, 'docs/install.md', 'plugin')).toThrow(
      /^docs\/install\.md has no block marked <!-- install-test: plugin -->/,
    )
  })

  it('a marker used twice, one not before a shell block, a block never closed, an empty block', () => {
    const twice = page(
      '<!-- install-test: a -->',
      '```sh',
      'true',
      '```',
      '<!-- install-test: a -->',
      '```sh',
      'x',
      '```',
    )
    expect(() => markedBlocks(twice, 'README.md')).toThrow(
      'README.md: <!-- install-test: a --> marks two blocks (lines 1 and 5)',
    )
    const prose = page('<!-- install-test: a -->', 'Then run:', '```sh', 'true', '```')
    expect(() => markedBlocks(prose, 'README.md')).toThrow(
      /README\.md: <!-- install-test: a --> \(line 1\) is not followed by a ```sh block/,
    )
    const yaml = page('<!-- install-test: a -->', '```yaml', 'a: 1', '```')
    expect(() => markedBlocks(yaml, 'README.md')).toThrow(/is not followed by a ```sh block/)
    const open = page('<!-- install-test: a -->', '```sh', 'true')
    expect(() => markedBlocks(open, 'README.md')).toThrow(
      'README.md: <!-- install-test: a -->: its block (line 2) is never closed',
    )
    const empty = page('<!-- install-test: a -->', '```sh', '# only a comment', '', '```')
    expect(() => markedBlocks(empty, 'README.md')).toThrow(
      'README.md: <!-- install-test: a -->: its block (line 2) holds no command',
    )
  })

  it("the repository's pages: the blocks the install test runs are there", () => {
    const root = join(import.meta.dirname, '..', '..')
    for (const marker of ['version', 'bundle', 'chart', 'plugin'])
      expect(readMarkedBlock(root, 'docs/install.md', marker).commands.length).toBeGreaterThan(0)
    expect(readMarkedBlock(root, 'README.md', 'bundle').commands.length).toBeGreaterThan(0)
  })

  it("the README's first-screen install is the install task's bundle install, command for command", () => {
    const root = join(import.meta.dirname, '..', '..')
    expect(readMarkedBlock(root, 'README.md', 'bundle').commands).toEqual(
      readMarkedBlock(root, 'docs/install.md', 'bundle').commands,
    )
  })
})

describe('shellCommands', () => {
  it('comments: whole lines and trailing ones dropped; a # inside a word or quotes kept', () => {
    expect(
      shellCommands(
        [
          '# a comment line',
          'VERSION=0.2.0     # the release',
          'echo "a # not a comment" \'nor # this\' x#y $#',
          '  # indented comment',
        ].join('\n'),
      ),
    ).toEqual(['VERSION=0.2.0', 'echo "a # not a comment" \'nor # this\' x#y $#'])
  })

  it('line continuations are joined; a backslash inside a comment continues nothing', () => {
    expect(
      shellCommands(
        [
          'helm install mbf x.tgz -n ns --create-namespace \\',
          '  -f a.yaml \\',
          '  -f b.yaml',
          'next # ends \\',
          'last',
        ].join('\n'),
      ),
    ).toEqual(['helm install mbf x.tgz -n ns --create-namespace -f a.yaml -f b.yaml', 'next', 'last'])
  })

  it('quotes and $( ) spanning lines, a trailing pipe, and escaped quotes stay one command', () => {
    expect(
      shellCommands(
        [
          'nats pub subj "{\\"id\\":\\"r-$RANDOM\\",',
          '  \\"time\\":\\"$(date -u +%FT%T.%3NZ)\\"}"',
          'x=$(echo a',
          '  b)',
          'ls |',
          '  wc -l',
        ].join('\n'),
      ),
    ).toEqual([
      'nats pub subj "{\\"id\\":\\"r-$RANDOM\\",\n  \\"time\\":\\"$(date -u +%FT%T.%3NZ)\\"}"',
      'x=$(echo a b)',
      'ls | wc -l',
    ])
  })

  it("a here-document's lines belong to the command that opens it, verbatim", () => {
    expect(
      shellCommands(
        [
          "kubectl apply -f - <<'EOF'",
          'kind: Model   # yaml, not a shell comment',
          "metadata: {name: 'g'}",
          'EOF',
          'echo done',
        ].join('\n'),
      ),
    ).toEqual([
      "kubectl apply -f - <<'EOF'\nkind: Model   # yaml, not a shell comment\nmetadata: {name: 'g'}\nEOF",
      'echo done',
    ])
  })

  it('an unclosed quote or here-document is an error, not a silently shorter command list', () => {
    expect(() => shellCommands('echo "never closed\n')).toThrow(/quote is never closed/)
    expect(() => shellCommands('cat <<EOF\nbody\n')).toThrow(/never closed by its delimiter line EOF/)
  })
})
