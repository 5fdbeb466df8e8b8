// Re-renders the scale report (table and PNG) from a run's JSON, e.g. after a change to the plot:
// `npx tsx dev/bench/scale/render.ts dev/bench/results/scale.json dev/bench/scale.png` (prints the markdown table). Several
// JSONs (runs of different sizes) are merged in order, a later one's keys winning: `render.ts a.json b.json out.png`.
import { readFileSync, writeFileSync } from 'node:fs'
import { markdownTable, plotSpec, renderPng } from './report.js'

const args = process.argv.slice(2)
const output = args.pop()
if (!output || args.length === 0) {
  process.stderr.write('usage: tsx dev/bench/scale/render.ts <results.json>... <plot.png>\n')
  process.exit(2)
}
const results = Object.assign({}, ...args.map((input) => JSON.parse(readFileSync(input, 'utf8'))))
writeFileSync(output, await renderPng(plotSpec(results)))
process.stdout.write(`${markdownTable(results)}\n`)
