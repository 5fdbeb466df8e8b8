// `--help`'s list of settings (cmd/manager/main.ts prints it), rendered from cmd/manager/config.ts's tables as
// docs/reference/settings.md is (dev/tools/docs/generate.ts).
import { OTHER_SETTINGS, SETTINGS } from './config.js'

/** The `--help` text of the settings: one entry per variable, wrapped, without Markdown. */
export function renderUsage(width = 118): string {
  const plain = (t: string) => t.replaceAll('`', '')
  const entry = (env: string, doc: string, who: string, shown?: string) => {
    const words = `${plain(doc)}${shown === undefined ? '' : ` Default ${shown}.`} Read by: ${who}.`.split(' ')
    const lines: string[] = []
    let line = ''
    for (const word of words) {
      if (line && 6 + line.length + word.length + 1 > width) {
        lines.push(line)
        line = word
      } else line = line ? `${line} ${word}` : word
    }
    lines.push(line)
    return [`  ${env}`, ...lines.map((l) => `      ${l}`)].join('\n')
  }
  return [
    ...Object.values(SETTINGS).map((s) => entry(s.env, s.doc, s.who, 'shown' in s ? s.shown : undefined)),
    ...OTHER_SETTINGS.map((s) => entry(s.env, s.doc, s.who)),
  ].join('\n')
}
