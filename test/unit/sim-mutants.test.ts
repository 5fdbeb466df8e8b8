// The race-finding check (npm run sim:mutants) undoes each fix by a text edit on a copy of the tree. An edit whose
// anchor no longer matches the product code (the fix was reworded since) would make that mutant fail to apply — and
// the check would only say so when someone runs it. Checked here on every test run instead.
import { existsSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { expect, it } from 'vitest'
import { MUTANTS, mutatedCopy, staleAnchors } from '../sim/mutants.js'

it('every mutant of the race-finding check still applies to the code as it is', () => {
  expect(MUTANTS.length).toBeGreaterThanOrEqual(12)
  expect(MUTANTS.flatMap((m) => staleAnchors(m))).toEqual([])
})

it('a mutated copy holds the files its mutant edits, each edited, and the simulation it runs', {
  timeout: 30_000,
}, () => {
  // One whose edits are in both pkg/ and functions/.
  for (const m of MUTANTS.filter((x) => x.name === 'cancel-in-flight-no-wait+documented-blind')) {
    const dir = mutatedCopy(m)
    try {
      expect(existsSync(join(dir, 'test/sim/run.ts'))).toBe(true)
      for (const e of m.edits ?? []) expect(readFileSync(join(dir, e.file), 'utf8')).not.toContain(e.find)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }
})
