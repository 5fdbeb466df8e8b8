// Re-renders the scale report (table and PNG) from a run's JSON, e.g. after a change to the plot:
// `npx tsx bench/scale/render.ts bench/results/scale.json bench/scale.png` (prints the markdown table).
import { readFileSync, writeFileSync } from 'node:fs'
import { markdownTable, plotSpec, renderPng } from './report.js'

const [input, output] = process.argv.slice(2)
if (!input || !output) {
  process.stderr.write('usage: tsx bench/scale/render.ts <results.json> <plot.png>\n')
  process.exit(2)
}
const results = JSON.parse(readFileSync(input, 'utf8'))
writeFileSync(output, await renderPng(plotSpec(results)))
process.stdout.write(`${markdownTable(results)}\n`)
